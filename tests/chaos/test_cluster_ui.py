"""`dbus ui` for a whole cluster: two members each read one source; the ui finds them
through ZooKeeper, asks each runtime's API, and serves one merged state (the same
API, the same dashboard, opened in headless Chromium). When one member is SIGKILLed
the ui says so at once, and shows its source moving to the other member, which reads on
from the position the killed one committed: the rows written while the source had no
reader reach Kafka. On MariaDB and on MySQL (where that position is a GTID set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from convergence import RuntimeProcess
from history_support import TopicState
from support import FIRST_BATCH, free_port, page_texts, wait_for

from dbus_fn.cli import cli

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

CLUSTER = "ui"
SESSION = 4.0
ARTIFACTS = Path(__file__).resolve().parents[2] / ".dbus" / "artifacts"
SIDES = ("east", "west")


def _dbus(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _deployment(folder: Path, database: str, topic: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "both.py").write_text(textwrap.dedent(f'''
        import dbus_fn as fn

        @fn.route(tables=["{database}.east", "{database}.west"])
        def out(event: fn.RowChange) -> str:
            return "kafka://{topic}-" + event.table
    '''))  # fmt: skip
    (folder / "dbus.toml").write_text(
        f'name = "both"\nversion = "1.0"\nmodule = "both.py"\n'
        f'tables = ["{database}.east", "{database}.west"]\nsources = ["east", "west"]\n'
    )
    return folder


def _state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/api/v1/state", timeout=10) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def _events(state: dict[str, Any]) -> int:
    return sum(d["events"] for d in state["deployments"] if d["name"] == "both")


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_one_ui_shows_the_whole_cluster_and_a_member_going(
    database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    private_zookeeper: tuple[Any, str],
    kafka_topic: str,
    browser: Any,
    tmp_path: Path,
) -> None:
    _, hosts = private_zookeeper
    connection = database.connect()
    with connection.cursor() as cur:
        for side in SIDES:
            cur.execute(f"CREATE TABLE {side} (id INT PRIMARY KEY, name VARCHAR(20))")
    env = {"DBUS_ZOOKEEPER": hosts, "DBUS_CLUSTER": CLUSTER}
    _dbus(env, "cluster", "init")
    members = {
        runtime_id: RuntimeProcess.for_member(
            runtime_id=runtime_id, cluster=CLUSTER, zookeeper=hosts, session_timeout=SESSION,
            kafka=kafka_service.bootstrap_servers, elasticsearch=elasticsearch_service.url,
            folder=tmp_path / runtime_id, env={"UI_DSN": database.endpoint.dsn},
            start="latest", options=["--api", "127.0.0.1:0"],
        )
        for runtime_id in ("rt-1", "rt-2")
    }
    ui_port = free_port()
    ui_log = (tmp_path / "ui.log").open("wb")
    ui = subprocess.Popen(
        [str(Path(sys.executable).parent / "dbus"), "ui", "--api", f"127.0.0.1:{ui_port}"],
        env={**os.environ, **env}, stdout=ui_log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{ui_port}"
    try:
        for member in members.values():
            member.start()

        def both_answering() -> bool:
            runtimes = _state(url)["cluster"]["runtimes"]
            return len(runtimes) == 2 and all(r["answered"] for r in runtimes)

        wait_for(both_answering, 180, "both members registered and answering the ui",
                 every=0.5, ignoring=(OSError, KeyError, TypeError))  # fmt: skip
        for side in SIDES:
            _dbus(env, "cluster", "source", "add", side, "--dsn-env", "UI_DSN",
                  "--table", f"{database.name}.{side}")  # fmt: skip
        _dbus(env, "fn", "deploy", str(_deployment(tmp_path / "both", database.name, kafka_topic)))

        def owners() -> dict[str, str]:
            return {s["name"]: s["owner"] for s in _state(url)["sources"] if s["up"]}

        def split_between_both() -> dict[str, str] | None:
            found = owners()
            return found if len(found) == 2 and len(set(found.values())) == 2 else None

        split = wait_for(split_between_both, 180, "each member reading one source", every=0.5)
        # Each member runs the deployment (asked at its own API) before any row is written.
        def deployed_everywhere() -> bool:
            runtimes = _state(url)["cluster"]["runtimes"]
            return all(any(d["name"] == "both" and d["version"] == "1.0"
                           for d in _state(r["api"])["deployments"]) for r in runtimes)  # fmt: skip

        wait_for(deployed_everywhere, 60, "both members to run the deployment", every=0.5)
        rows = {"east": 0, "west": 0}

        def write(side: str, count: int) -> None:
            with connection.cursor() as cur:
                cur.executemany(f"INSERT INTO {side} VALUES (%s, %s)",
                                [(rows[side] + i, side) for i in range(1, count + 1)])  # fmt: skip
            rows[side] += count

        write("east", 40)
        write("west", 25)
        # Both members' counts, summed: every row of both tables reached the deployment.
        # These rows make each member's first batch (``FIRST_BATCH``): at the opening of
        # the parallel pass, one took 68 s from its plan to its commit.
        wait_for(lambda: _events(_state(url)) == sum(rows.values()), FIRST_BATCH,
                 "the ui's events to be both members' rows", every=0.5)  # fmt: skip
        state = _state(url)
        (deployment,) = [d for d in state["deployments"] if d["name"] == "both"]
        assert deployment["delivered"] == sum(rows.values())
        assert state["cluster"]["functions"] == {"both": "1.0"}
        assert {f"source:{side}" for side in SIDES} <= {n["id"] for n in state["topology"]["nodes"]}

        browser.get(f"{url}/")
        wait_for(lambda: len(page_texts(browser, "#runtimes tbody tr")) == 2, 30,
                 "the dashboard to list both runtimes")  # fmt: skip
        shown = dict(zip(page_texts(browser, "#sources tbody tr", "data-source"),
                         page_texts(browser, '#sources td[data-field="owner"]'), strict=True))
        assert shown == split
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot = ARTIFACTS / "dashboard-cluster.png"
        assert browser.save_screenshot(str(screenshot))
        print(f"cluster dashboard screenshot: {screenshot}")

        # One member goes: the ui says so at once, then shows its source read by the other.
        gone_id = split["west"]
        kept_id = split["east"]
        members[gone_id].kill9()
        write("west", 20)  # while west has no reader: the next one reads them all the same

        def gone_shown() -> bool:
            runtimes = {r["id"]: r for r in _state(url)["cluster"]["runtimes"]}
            return gone_id not in runtimes or not runtimes[gone_id]["answered"]

        wait_for(gone_shown, 10, f"the ui to show {gone_id} gone", every=0.2)
        def gone_drawn() -> bool:
            shown = page_texts(browser, '#runtimes td[data-field="answered"]')
            return len(shown) == 1 or any(text != "answering" for text in shown)

        wait_for(gone_drawn, 10, "the dashboard to show it")
        wait_for(lambda: owners() == {"east": kept_id, "west": kept_id}, 120,
                 f"west to move to {kept_id}", every=0.5)  # fmt: skip
        before = _events(_state(url))
        write("west", 30)
        wait_for(lambda: _events(_state(url)) >= before + 30, 60,
                 "west's new rows counted by the member that took it", every=0.5)  # fmt: skip
        metrics = urllib.request.urlopen(f"{url}/metrics", timeout=10).read().decode()
        assert f'dbus_cluster_source_owner{{runtime="{kept_id}",source="west"}} 1.0' in metrics
        assert "dbus_cluster_zookeeper_up 1.0" in metrics
        # Every row of west in Kafka: what the killed member delivered, what was written
        # while the source had no reader and after it moved.
        west = TopicState(kafka_service.bootstrap_servers, f"{kafka_topic}-west")
        try:
            wait_for(lambda: west.poll(1.0) or set(west.last) >= set(range(1, rows["west"] + 1)),
                     60, "every row of west in Kafka")  # fmt: skip
        finally:
            west.consumer.close()
    finally:
        ui.send_signal(signal.SIGTERM)
        try:
            code = ui.wait(timeout=20)
        finally:
            ui_log.close()
            for member in members.values():
                member.stop()
    assert code == 0, (tmp_path / "ui.log").read_text()
    assert "ui stopped" in (tmp_path / "ui.log").read_text()
