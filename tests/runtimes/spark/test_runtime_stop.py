"""Stopping `dbus runtime start` the usual ways is a clean stop, not an error.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group, and a
service manager (systemd's default KillMode) sends SIGTERM to every process of
the service: Spark's JVM and its Python helpers get the signal too, not just the
CLI. The CLI must still stop its query and exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "systemd"])
def test_a_signal_to_the_whole_process_group_stops_the_runtime_cleanly(
    signum: int,
    services: Any,
    fresh_database: Any,
    kafka_topic: str,
    tmp_path: Path,
    function_folder: Any,
) -> None:
    with fresh_database.connect().cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    relay = function_folder(
        "relay",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{fresh_database.name}.t")
        def to_kafka(event: fn.RowChange) -> str:
            return "kafka://{kafka_topic}"
        ''',
        [f"{fresh_database.name}.t"],
    )
    checkpoint = tmp_path / "checkpoint"
    argv = [
        str(Path(sys.executable).parent / "dbus"), "runtime", "start",
        "--source", f"src={services.mariadb.dsn}",
        "--functions", str(relay),
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", str(checkpoint),
        "--master", "local[2]",
    ]  # fmt: skip
    log = tmp_path / "runtime.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log.open("wb") as out:
        runtime = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        # Running for real: the first micro-batch has committed.
        deadline = time.monotonic() + 120
        while not list((checkpoint / "commits").glob("[0-9]*")):
            assert runtime.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no batch committed within 120s"
            time.sleep(0.5)
        os.killpg(runtime.pid, signum)
        code = runtime.wait(timeout=90)
    finally:
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait(timeout=30)
    output = log.read_text()
    assert "stopped on an error" not in output, output[-3000:]
    assert code == 0, output[-3000:]
    assert "runtime stopped" in output


def test_a_run_whose_sink_never_came_back_exits_non_zero_naming_the_batch(
    services: Any,
    fresh_database: Any,
    es_index: str,
    tmp_path: Path,
    function_folder: Any,
) -> None:
    from dbus_deploy.services import down, up

    with fresh_database.connect().cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    index = function_folder(
        "indexer",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{fresh_database.name}.t")
        def to_index(event: fn.RowChange) -> str:
            return "es://{es_index}"
        ''',
        [f"{fresh_database.name}.t"],
    )
    checkpoint = tmp_path / "checkpoint"
    argv = [
        str(Path(sys.executable).parent / "dbus"), "runtime", "start",
        "--source", f"src={services.mariadb.dsn}",
        "--functions", str(index),
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", str(checkpoint),
        "--master", "local[2]",
        "--for", "60",
    ]  # fmt: skip
    log = tmp_path / "runtime.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log.open("wb") as out:
        runtime = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 45
        while not list((checkpoint / "commits").glob("[0-9]*")):
            assert runtime.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no batch committed within 45s"
            time.sleep(0.5)
        down(["elasticsearch"])
        try:
            with fresh_database.connect().cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1), (2)")
            code = runtime.wait(timeout=120)
        finally:
            up(["elasticsearch"])
    finally:
        if runtime.poll() is None:
            os.killpg(runtime.pid, signal.SIGKILL)
            runtime.wait(timeout=30)
    output = log.read_text()
    assert code == 1, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert "was never acknowledged by the sinks" in last, output[-3000:]
    assert "src up to binlog." in last
    assert "nothing is lost" in last
