"""`dbus fn preview` and the dashboard's preview page on a running cluster runtime, all
real, its source on MariaDB and on MySQL: version 1 of a deployment routes every order
to one topic, version 2 (deployed over it) sends the even ones to a second topic. Over
100 real events kept by the runtime, a local version 3 that sends the even ones to a
third topic (and fails on every 25th) shows the routes that appear and vanish and its
new dead letters; the dashboard, in headless Chromium, shows version 1 beside version 2
(screenshot kept). The bad inputs each give one line and their exit code; nothing
reaches a sink."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from e2e_support import Scratch, member_env, spawn_cli_member, stop_cli_runtime
from support import page_texts, runtime_api, topic_exists, wait_for

from dbus_fn.cli import cli
from dbus_spark.interfaces.api.client import call

pytestmark = [pytest.mark.e2e]

CLUSTER = "preview"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".dbus" / "artifacts"


def _version(folder: Path, table: str, version: str, body: str) -> Path:
    """A deployment ``shown`` at ``version`` whose route function has ``body``."""
    folder.mkdir(parents=True)
    (folder / "shown.py").write_text(
        "import dbus_fn as fn\n\n\n"
        f'@fn.route(tables="{table}")\n'
        "def there(event: fn.RowChange) -> str:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    )
    (folder / "dbus.toml").write_text(
        f'name = "shown"\nversion = "{version}"\nmodule = "shown.py"\ntables = ["{table}"]\n'
        'sources = ["shop"]\ninitial = "none"\n'
    )
    return folder


@pytest.fixture
def cluster_env(scratch: Scratch, zk_root: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = member_env(scratch, zk_root, CLUSTER, "PREVIEW_SHOP_DSN")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _dbus(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


_ALONE = {"DBUS_CLUSTER": ""}
"""An empty DBUS_CLUSTER counts as unset: ask the runtime at --checkpoint, not the
cluster (``--cluster ''`` is refused)."""


@pytest.fixture
def member(scratch: Scratch, cluster_env: dict[str, str]) -> Iterator[tuple[str, Path]]:
    """One cluster runtime (a `dbus runtime start --cluster` process) running version 2
    of ``shown`` over a new orders table, its version 1 deployed before: the API URL and
    the checkpoint."""
    table = f"{scratch.fresh_database.name}.orders"
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    topic = scratch.kafka_topic
    assert _dbus("cluster", "init").exit_code == 0
    added = _dbus("cluster", "source", "add", "shop", "--dsn-env", "PREVIEW_SHOP_DSN",
                  "--table", table)  # fmt: skip
    assert added.exit_code == 0, added.output
    for version, body in (
        ("1.0.0", f'return "kafka://{topic}-a"\n'),
        ("2.0.0", f'return "kafka://{topic}-b" if event.after["id"] % 2 == 0 else "kafka://{topic}-a"\n'),
    ):  # fmt: skip
        folder = _version(scratch.tmp_path / f"v{version}", table, version, body)
        deployed = _dbus("fn", "deploy", str(folder))
        assert deployed.exit_code == 0, deployed.output
    checkpoint = scratch.tmp_path / "checkpoint"
    runtime = spawn_cli_member(scratch, CLUSTER, "rt-preview", checkpoint, cluster_env)
    try:
        yield runtime_api(checkpoint), checkpoint
    finally:
        stop_cli_runtime(scratch, runtime)


def _write_until_kept(scratch: Scratch, url: str, events: int) -> None:
    """Orders 1, 2, ... in transactions of 30 until the runtime keeps ``events`` of them."""
    written = 0

    def kept() -> bool:
        nonlocal written
        with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO orders VALUES (%s, %s)",
                            [(i, i * 3) for i in range(written + 1, written + 31)])  # fmt: skip
        written += 30
        _, answer = call(url, f"/api/v1/preview/shown?limit={events}", timeout=30)
        return len(answer["events"]) >= events and written >= events + 20

    wait_for(kept, 180, f"the runtime keeps {events} events of orders", every=2.0)


# On both servers: the member reads its source through the cluster's registry, on MariaDB
# and on MySQL alike.
@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_preview_shows_what_a_changed_route_does_to_100_real_events(
    scratch: Scratch, member: tuple[str, Path], browser: Any
) -> None:
    url, checkpoint = member
    topic = scratch.kafka_topic
    table = f"{scratch.fresh_database.name}.orders"
    _write_until_kept(scratch, url, 100)
    local = _version(
        scratch.tmp_path / "v3", table, "3.0.0",
        f'''
        if event.after["id"] % 25 == 0:
            raise ValueError("quarter hundreds are refused")
        return "kafka://{topic}-c" if event.after["id"] % 2 == 0 else "kafka://{topic}-a"
        ''',
    )  # fmt: skip

    result = _dbus("fn", "preview", str(local), "--json")  # through ZooKeeper (DBUS_CLUSTER)
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.output)
    summary = comparison["summary"]
    assert (comparison["left"], comparison["right"]) == ("deployed 2.0.0", "local 3.0.0")
    assert summary["events"] == 100
    assert summary["routes_appear"] == [f"kafka://{topic}-c"]
    assert summary["routes_vanish"] == [f"kafka://{topic}-b"]
    refused = [e for e in comparison["events"] if int(e["event"]["key"]["id"]) % 25 == 0]
    assert refused and summary["new_dead_letters"] == len(refused)
    assert all("quarter hundreds are refused" in e["right"]["sent"][0]["error"] for e in refused)
    evens = [e for e in comparison["events"] if int(e["event"]["key"]["id"]) % 2 == 0]
    assert summary["changed"] == len({e["event"]["id"] for e in evens + refused})
    odd = [e for e in comparison["events"] if int(e["event"]["key"]["id"]) % 2 == 1]
    odd = [e for e in odd if int(e["event"]["key"]["id"]) % 25 != 0]
    assert odd and not any(e["changed"] for e in odd)
    assert all(e["left"]["sent"] == e["right"]["sent"] for e in odd)
    first = odd[0]
    assert first["left"]["sent"][0]["row"]["total"] == 3 * int(first["event"]["key"]["id"])

    # The same by the runtime's checkpoint, as text.
    text = _dbus("fn", "preview", str(local), "--checkpoint", str(checkpoint), env=_ALONE)
    assert text.exit_code == 0, text.output
    assert (
        f"{summary['changed']} of 100 events change (deployed 2.0.0 → local 3.0.0)" in text.output
    )
    assert f"routes that appear: kafka://{topic}-c" in text.output
    assert "quarter hundreds are refused" in text.output

    # Bad input: one line each, with its exit code.
    other = _version(scratch.tmp_path / "other", table, "1.0.0", 'return "kafka://x"\n')
    (other / "dbus.toml").write_text((other / "dbus.toml").read_text().replace("shown", "other"))
    manifest = (other / "dbus.toml").read_text()
    (other / "dbus.toml").write_text(manifest.replace('"shown.py"', '"other.py"'))
    (other / "shown.py").rename(other / "other.py")
    unknown = _dbus("fn", "preview", str(other))
    assert unknown.exit_code == 2 and "no deployment 'other' runs" in unknown.output
    future = _dbus("fn", "preview", str(local), "--since", "2099-01-01T00:00:00+00:00")
    assert future.exit_code == 7, future.output
    assert "was committed in the time asked" in future.output
    elsewhere = _dbus("fn", "preview", str(local), "--table", "nowhere",
                      "--checkpoint", str(checkpoint), env=_ALONE)  # fmt: skip
    assert elsewhere.exit_code == 2 and "does not subscribe to it" in elsewhere.output
    nobody = _dbus("fn", "preview", str(local),
                   "--checkpoint", str(scratch.tmp_path / "no-runtime"), env=_ALONE)  # fmt: skip
    assert nobody.exit_code == 2 and "no runtime has run with checkpoint" in nobody.output
    # Nothing was written: the local version's new topic was never made.
    assert not topic_exists(scratch.services.kafka.bootstrap_servers, f"{topic}-c")

    # The dashboard: the deployed version beside the one before it.
    browser.get(f"{url}/")
    wait_for(lambda: "shown" in page_texts(browser, "#preview-deployment option", "value"),
             30, "the deployments offered")  # fmt: skip
    browser.execute_script("document.getElementById('preview-deployment').value = 'shown';"
                           "document.getElementById('preview-run').click();")  # fmt: skip
    wait_for(lambda: page_texts(browser, "#preview-events-table tbody tr"), 60,
             "the preview's events shown")  # fmt: skip
    lines = page_texts(browser, "#preview-summary span.line")
    assert lines[0].endswith("events change (previous 1.0.0 → deployed 2.0.0)"), lines
    assert f"routes that appear: kafka://{topic}-b" in lines
    rows = page_texts(browser, "#preview-events-table tbody tr.changed td.right")
    assert rows and all(f"kafka://{topic}-b" in row for row in rows)
    assert len(page_texts(browser, "#preview-events-table tbody tr")) == 100
    browser.execute_script("document.getElementById('preview').scrollIntoView();")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "preview.png"
    assert browser.save_screenshot(str(screenshot))
    print(f"preview screenshot: {screenshot}")
