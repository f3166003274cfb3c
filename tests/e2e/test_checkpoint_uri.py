"""A checkpoint given as a Hadoop file system URI: Spark keeps its logs there, the
runtime reads them back through the driver's JVM, and the runtime's own files stay
on the driver's disk, where every command given the same URI finds them.

``file://`` is the one Hadoop file system this machine has; ``hdfs://``, ``s3a://``
and the others go through the same calls once their jars are on the driver.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from e2e_support import Scratch, spawn_cli_runtime
from support import (
    kafka_consumer,
    process_command,
    process_running,
    relay_table,
    runtime_api,
    wait_for,
)

from dbus_spark.interfaces.settings import default_home
from dbus_spark.spark.job import start, stop
from dbus_spark.state.checkpoint import (
    SparkLog,
    beside,
    committed_positions,
    local_twin,
    resolve,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def uri(tmp_path: Path) -> Iterator[str]:
    """A ``file://`` checkpoint in a folder of its own; its driver-side files are
    removed afterwards."""
    checkpoint = resolve(f"file://{tmp_path}/shared/checkpoint")
    yield checkpoint
    twin = local_twin(checkpoint)
    for path in twin.parent.glob(f"{twin.name}*"):
        if path.is_dir():
            for child in sorted(path.rglob("*"), reverse=True):
                child.unlink() if child.is_file() else child.rmdir()
            path.rmdir()
        else:
            path.unlink()


def _relay(scratch: Scratch) -> tuple[Path, str]:
    route = f"kafka://{scratch.kafka_topic}"
    columns = "id INT PRIMARY KEY, name VARCHAR(20)"
    folder, table = relay_table(scratch.fresh_database, scratch.function_folder, route, columns)
    return folder, table


def _insert(scratch: Scratch, ids: range) -> None:
    with scratch.fresh_database.connect().cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(i, f"n{i}") for i in ids])


def _ids(scratch: Scratch, count: int, timeout: float) -> list[int]:
    """The row ids on the scratch topic from its start, read until ``count`` arrived
    (or ``timeout``), then 3 s more so that one sent twice shows."""
    consumer = kafka_consumer(scratch.services.kafka.bootstrap_servers,
                              {"auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([scratch.kafka_topic])
    ids: list[int] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                ids.append(json.loads(msg.key())[0])  # the key: the primary key's values
            if len(ids) >= count:
                deadline = min(deadline, time.monotonic() + 3)
    finally:
        consumer.close()
    return sorted(ids)


def _wait_settled(checkpoint: Path) -> None:
    """Wait until Spark has committed every batch it planned. A batch's rows reach
    Kafka when its transaction commits, a moment before Spark writes the batch to its
    commit log; a stop in that moment leaves the batch to be run again on resume."""

    def settled() -> bool:
        spark_log = SparkLog(str(checkpoint))
        return spark_log.started() and spark_log.pending() is None

    wait_for(settled, 60, "Spark's commit log to catch up with its offsets", every=0.2)


def test_a_uri_checkpoint_resumes_where_it_committed_and_keeps_its_files_on_the_driver(
    spark: Any, scratch: Scratch, uri: str
) -> None:
    folder, _table = _relay(scratch)
    config = replace(scratch.runtime_config(folder), checkpoint_dir=uri)
    query = start(config, spark=spark)
    try:
        _insert(scratch, range(1, 21))
        assert _ids(scratch, 20, 120) == list(range(1, 21))
        _wait_settled(scratch.tmp_path / "shared" / "checkpoint")
    finally:
        stop(query, spark)
    assert query.exception() is None
    shared = scratch.tmp_path / "shared"
    # The shared file system holds Spark's checkpoint and nothing of the runtime's.
    assert [p.name for p in shared.iterdir()] == ["checkpoint"]
    assert any((shared / "checkpoint" / "commits").iterdir())
    twin = local_twin(uri)
    assert twin.parent == default_home() / "checkpoints"
    assert beside(uri, ".config.json").is_file()
    assert (beside(uri, ".progress") / "history.json").is_file()
    # Read through Hadoop's file system, the committed positions are those the local
    # fast path reads from the same folder.
    through_hadoop = committed_positions(uri, spark)
    assert through_hadoop
    assert through_hadoop == committed_positions(str(shared / "checkpoint"))

    _insert(scratch, range(21, 51))  # while nothing runs
    query = start(config, spark=spark)
    try:
        _insert(scratch, range(51, 61))
        every = _ids(scratch, 60, 90)
        _wait_settled(scratch.tmp_path / "shared" / "checkpoint")
    finally:
        stop(query, spark)
    assert query.exception() is None
    # Resumed at the committed position: each row once, none skipped.
    assert every == list(range(1, 61))
    after = committed_positions(uri, spark)["src"]
    before = through_hadoop["src"]
    assert (after.file, after.pos) > (before.file, before.pos)


def _dbus(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "dbus"), *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip


def test_the_cli_runs_on_a_uri_checkpoint_and_its_commands_find_the_runtime(
    scratch: Scratch, uri: str
) -> None:
    folder, table = _relay(scratch)
    runtime = spawn_cli_runtime(scratch, folder, uri)
    try:
        runtime_api(uri, within=120)  # its address, found by the URI
        _insert(scratch, range(1, 11))
        assert _ids(scratch, 10, 90) == list(range(1, 11))
        # `dbus fn backfill` finds the running runtime by the same URI.
        backfill = _dbus("fn", "backfill", "relay", "--table", table, "--checkpoint", uri)
        assert backfill.returncode == 0, backfill.stderr
        wait_for(lambda: len(_ids(scratch, 20, 5)) == 20, 90, "the backfill's rows")
        spark_processes = psutil.Process(runtime.pid).children(recursive=True)
        commands = " ".join(" ".join(process_command(p)) for p in spark_processes)
        runtime.send_signal(signal.SIGTERM)  # a service manager's stop: a clean one
        # A stuck stop: the query's stop waits 5 s for a batch in flight, then Spark's end.
        code = runtime.wait(timeout=90)
        # Once it said it stopped, nothing of it runs: its JVM and Python workers are gone.
        left = [p for p in spark_processes if process_running(p)]
    finally:
        if runtime.poll() is None:
            runtime.kill()
            runtime.wait()
        output = (scratch.tmp_path / "runtime.log").read_text(errors="replace")
        print(output[-3000:])  # shown when the test fails
    assert code == 0, output[-3000:]
    assert output.strip().splitlines()[-1] == "runtime stopped", output[-3000:]
    assert "SparkSubmit" in commands and "pyspark.daemon" in commands, commands[:2000]
    assert left == [], [" ".join(process_command(p))[:200] for p in left]


def test_a_checkpoint_uri_no_file_system_serves_is_one_line_with_exit_2(
    scratch: Scratch, tmp_path: Path
) -> None:
    folder, _table = _relay(scratch)
    services = scratch.services
    result = _dbus(
        "runtime", "start", "--source", f"src={services.mariadb.dsn}", "--functions", str(folder),
        "--kafka", services.kafka.bootstrap_servers, "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", "nofs://namenode/dbus/checkpoint", "--master", "local[2]", "--api", "off",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert "--checkpoint nofs://namenode/dbus/checkpoint" in lines[0]
    assert 'No FileSystem for scheme "nofs"' in lines[0]
    assert "spark.jars.packages" in lines[0]
    assert not beside("nofs://namenode/dbus/checkpoint", ".config.json").exists()
