"""`dbus runtime start`: bad input is one line and a non-zero exit, before Spark starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import free_port

ROOT = Path(__file__).resolve().parents[3]
ORDERS = str(ROOT / "functions" / "orders")
DBUS = [sys.executable, "-c", "from dbus_fn.cli import main; main()"]


@pytest.fixture(autouse=True)
def _own_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each start gets a checkpoint of its own: the shared default may hold another
    # source's position (from `dbus demo`, say), which a start refuses before the
    # check a test is about.
    monkeypatch.setenv("DBUS_CHECKPOINT", str(tmp_path / "own-checkpoint"))


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DBUS, "runtime", "start", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def _assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_an_unreachable_source_is_one_line_naming_it() -> None:
    port = free_port()
    result = _start(
        "--source", f"shop=mysql://dbus:topsecret@127.0.0.1:{port}",
        "--functions", ORDERS,
        "--kafka", "127.0.0.1:9092",
        "--elasticsearch", "http://127.0.0.1:9200",
    )  # fmt: skip
    _assert_one_line_error(result, "unreachable", f"127.0.0.1:{port}")
    assert "topsecret" not in result.stderr


def test_missing_functions_is_a_usage_error() -> None:
    result = _start("--source", "shop=mysql://u:p@127.0.0.1:1")
    assert result.returncode == 2
    _assert_one_line_error(result, "--functions")


def test_a_negative_shard_count_is_a_usage_error() -> None:
    result = _start(
        "--source", "shop=mysql://u:p@127.0.0.1:1", "--functions", ORDERS, "--decode-shards", "-1"
    )  # fmt: skip
    assert result.returncode == 2
    assert "--decode-shards" in result.stderr and "-1" in result.stderr


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_an_open_read_that_is_no_duration_is_a_usage_error(value: str) -> None:
    result = _start(
        "--source", "shop=mysql://u:p@127.0.0.1:1", "--functions", ORDERS, "--open-read", value
    )  # fmt: skip
    assert result.returncode == 2
    assert "--open-read" in result.stderr and value in result.stderr


def test_an_unknown_log_format_is_a_usage_error() -> None:
    result = _start("--functions", ORDERS, "--log-format", "yaml")
    assert result.returncode == 2
    assert "--log-format" in result.stderr and "yaml" in result.stderr


@pytest.mark.parametrize(
    ("address", "needle"),
    [("9464", "expected HOST:PORT"), ("0.0.0.0:9464", "--api-token")],
)
def test_a_bad_api_address_is_one_line_with_exit_2(address: str, needle: str) -> None:
    result = _start("--functions", ORDERS, "--api", address)
    assert result.returncode == 2
    _assert_one_line_error(result, needle)


def test_a_taken_api_port_is_one_line_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = _start("--functions", ORDERS, "--api", f"127.0.0.1:{port}")
    assert result.returncode == 2
    _assert_one_line_error(result, f"127.0.0.1:{port}", "--api")


@pytest.mark.parametrize(
    ("python", "needle"),
    [("python9", "has no 'python9'"), ("/nowhere/python3", "not an interpreter on this host")],
)
def test_an_executor_python_this_host_cannot_run_is_one_line(python: str, needle: str) -> None:
    result = _start("--functions", ORDERS, "--executor-python", python)
    assert result.returncode == 2
    _assert_one_line_error(result, "--executor-python", needle)


def test_a_carry_switch_neither_on_nor_off_is_one_line_before_anything_starts() -> None:
    result = _start("--functions", ORDERS, env={"DBUS_CARRY_OPEN_READS": "maybe"})
    assert result.returncode == 2
    _assert_one_line_error(result, "DBUS_CARRY_OPEN_READS='maybe'", "set it to 1", "or 0")


def test_a_malformed_source_is_a_usage_error() -> None:
    result = _start("--source", "mysql://u:p@127.0.0.1:1", "--functions", ORDERS)
    assert result.returncode == 2
    _assert_one_line_error(result, "NAME=DSN")


def test_a_function_folder_that_does_not_load_is_named(tmp_path: Path) -> None:
    (tmp_path / "dbus.toml").write_text(
        'name = "broken"\nversion = "1"\nmodule = "broken.py"\ntables = ["shop.orders"]\n'
    )
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    result = _start(
        "--source", f"shop=mysql://u:p@127.0.0.1:{free_port()}",
        "--functions", str(tmp_path),
        "--kafka", "127.0.0.1:9092",
        "--elasticsearch", "http://127.0.0.1:9200",
    )  # fmt: skip
    _assert_one_line_error(result, "no_such_module_here")


MISCONFIGURED = {
    # (the setting, its value, what the error names, the fix it names)
    "statement": ("binlog_format", "'STATEMENT'", "binlog_format=STATEMENT", "binlog_format=ROW"),
    "compressed": ("log_bin_compress", "ON", "log_bin_compress=ON", "log_bin_compress=OFF"),
}


@pytest.fixture(params=sorted(MISCONFIGURED))
def misconfigured_server(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str, str]]:
    """A private MariaDB whose binlog cannot be captured whole: statement-based, as many
    servers still are, or compressed; with what the error must name."""
    import pymysql

    from dbus_deploy.services import down, load_config, up

    setting, value, named, fix = MISCONFIGURED[request.param]
    env = {**os.environ, "DBUS_HOME": str(tmp_path / "home")}
    env["DBUS_MARIADB_PORT"] = str(free_port())
    config = load_config(env)
    try:
        up(["mariadb"], config=config)
        port = config.ports["mariadb"]
        conn = pymysql.connect(host="127.0.0.1", port=port, user="dbus", password="dbus")
        with conn.cursor() as cur:
            cur.execute(f"SET GLOBAL {setting} = {value}")
        conn.close()
        yield f"mysql://dbus:dbus@127.0.0.1:{port}", named, fix
    finally:
        down(config=config)


@pytest.mark.integration
def test_a_source_whose_binlog_cannot_be_read_whole_is_refused(
    misconfigured_server: tuple[str, str, str],
) -> None:
    dsn, named, fix = misconfigured_server
    result = _start(
        "--source", f"legacy={dsn}",
        "--functions", ORDERS,
        "--kafka", "127.0.0.1:9092",
        "--elasticsearch", "http://127.0.0.1:9200",
    )  # fmt: skip
    _assert_one_line_error(result, named, fix)


def test_a_malformed_local_service_port_is_named_not_ignored() -> None:
    result = _start("--functions", ORDERS, env={"DBUS_MARIADB_PORT": "banana"})
    assert result.returncode == 2
    _assert_one_line_error(result, "DBUS_MARIADB_PORT", "banana")


def test_a_bare_executor_python_is_this_interpreter_here_and_the_path_elsewhere() -> None:
    from dbus_spark.spark.session import workers_python

    here = str(Path(sys.executable).parent)
    environ = {"PATH": "/usr/bin:/bin", "DBUS_EXECUTOR_PYTHON": "python3"}
    assert workers_python(environ) == "python3"  # what every host runs, by its own PATH
    assert environ["PATH"] == f"{here}:/usr/bin:/bin"  # here: this interpreter's folder first
    assert workers_python({"PATH": "/usr/bin"}) == sys.executable  # unset: this one
    assert workers_python({"PYSPARK_PYTHON": "/opt/py"}) == "/opt/py"  # as Spark was told


@pytest.mark.parametrize("form", ["path", "file-uri", "under-a-file"])
def test_a_checkpoint_that_is_a_file_is_refused_before_anything_is_written(
    form: str, services: Any, tmp_path: Path
) -> None:
    file = tmp_path / "passwd"
    file.write_text("root:x:0:0::/root:/bin/sh\n")
    given = {"path": str(file), "file-uri": f"file://{file}", "under-a-file": f"{file}/cp"}[form]
    result = _start(
        "--source", f"shop={services.mariadb.dsn}",
        "--functions", ORDERS,
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", given,
        "--api", "off",
        "--master", "local[1]",
        "--for", "5",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    _assert_one_line_error(result, "--checkpoint", "a folder", "URI")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passwd"]  # nothing beside it
    assert file.read_text() == "root:x:0:0::/root:/bin/sh\n"


def test_a_start_that_fails_gives_the_process_its_signal_handlers_back() -> None:
    import signal

    from click.testing import CliRunner

    from dbus_fn.cli import cli

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    result = CliRunner().invoke(cli, [
        "runtime", "start", "--source", f"shop=mysql://u:p@127.0.0.1:{free_port()}",
        "--functions", ORDERS, "--kafka", "127.0.0.1:9092",
        "--elasticsearch", "http://127.0.0.1:9200", "--api", "off",
    ])  # fmt: skip
    assert result.exit_code == 3, result.output
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_detach_bound_that_is_no_duration_is_a_usage_error(value: str) -> None:
    result = _start(
        "--source", "shop=mysql://u:p@127.0.0.1:1", "--functions", ORDERS, "--detach-after", value
    )  # fmt: skip
    assert result.returncode == 2
    assert "--detach-after" in result.stderr and value in result.stderr
