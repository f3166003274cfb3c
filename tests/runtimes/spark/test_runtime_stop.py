"""Stopping `dbus runtime start` the usual ways is a clean stop, not an error.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group, and a
service manager (systemd's default KillMode) sends SIGTERM to every process of
the service: Spark's JVM and its Python helpers get the signal too, not just the
CLI. The CLI must still stop its query quietly: after SIGTERM it exits 0, after
Ctrl-C 130 with one line saying what was committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from support import Proxy, relay_table

pytestmark = pytest.mark.e2e


class Runtime(NamedTuple):
    """A `dbus runtime start` in its own process group, its output in ``log``."""

    process: subprocess.Popen[bytes]
    checkpoint: Path
    log: Path

    def wait_for_first_commit(self, timeout: float) -> None:
        """Running for real: the first micro-batch has committed."""
        deadline = time.monotonic() + timeout
        while not list((self.checkpoint / "commits").glob("[0-9]*")):
            assert self.process.poll() is None, self.output()[-3000:]
            assert time.monotonic() < deadline, f"no batch committed within {timeout:.0f}s"
            time.sleep(0.5)

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def start_runtime(
    services: Any,
    database: Any,
    function_folder: Any,
    tmp_path: Path,
    route: str,
    *extra: str,
    elasticsearch: str | None = None,
) -> Runtime:
    """A runtime over a new table ``t`` whose one function routes every change to
    ``route``; its Elasticsearch is the services' unless ``elasticsearch`` names one."""
    folder, _table = relay_table(database, function_folder, route)
    checkpoint = tmp_path / "checkpoint"
    argv = [
        str(Path(sys.executable).parent / "dbus"), "runtime", "start",
        "--source", f"src={services.mariadb.dsn}",
        "--functions", str(folder),
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", elasticsearch or services.elasticsearch.url,
        "--checkpoint", str(checkpoint),
        "--master", "local[2]",
        *extra,
    ]  # fmt: skip
    log = tmp_path / "runtime.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return Runtime(process, checkpoint, log)


def stopped_by(
    signum: int, runtime: Runtime, meanwhile: Callable[[], None] = lambda: None
) -> tuple[int, str]:
    """Once the runtime committed a batch (and ``meanwhile`` ran), ``signum`` to its
    whole process group: its exit code and output."""
    try:
        runtime.wait_for_first_commit(120)  # a stuck start: the JVM, Spark, the first batch
        meanwhile()
        os.killpg(runtime.process.pid, signum)
        # A stuck stop: the query's stop waits 5 s for a batch in flight, then Spark's end.
        code = runtime.process.wait(timeout=90)
    finally:
        runtime.kill()
    return code, runtime.output()


@pytest.fixture
def relay_runtime(
    services: Any, fresh_database: Any, kafka_topic: str, tmp_path: Path, function_folder: Any
) -> Iterator[Runtime]:
    """A runtime relaying the changes of table ``t`` of ``fresh_database`` to Kafka."""
    route = f"kafka://{kafka_topic}"
    runtime = start_runtime(services, fresh_database, function_folder, tmp_path, route)
    yield runtime
    runtime.kill()


def test_sigterm_to_the_whole_process_group_stops_the_runtime_cleanly(
    relay_runtime: Runtime,
) -> None:
    code, output = stopped_by(signal.SIGTERM, relay_runtime)
    assert "stopped on an error" not in output, output[-3000:]
    assert code == 0, output[-3000:]
    assert "runtime stopped" in output


def test_ctrl_c_stops_the_runtime_quietly_with_one_line_of_what_was_committed(
    relay_runtime: Runtime, fresh_database: Any
) -> None:
    def insert_rows() -> None:  # changes in flight at the stop
        with fresh_database.connect().cursor() as cur:
            for first in range(0, 2000, 100):
                cur.execute(
                    "INSERT INTO t VALUES " + ",".join(f"({i})" for i in range(first, first + 100))
                )

    code, output = stopped_by(signal.SIGINT, relay_runtime, insert_rows)  # a terminal's Ctrl-C
    assert code == 130, output[-3000:]
    assert "Traceback" not in output and "ERROR" not in output, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert last.startswith("runtime interrupted after committing batch "), output[-3000:]
    assert "the sinks have every change of src up to " in last
    assert f"the next start with checkpoint {relay_runtime.checkpoint} goes on from there" in last


def test_a_run_whose_sink_never_came_back_exits_non_zero_naming_the_batch(
    services: Any,
    fresh_database: Any,
    es_index: str,
    tmp_path: Path,
    function_folder: Any,
) -> None:
    # The runtime reaches Elasticsearch through a forwarder the test cuts: to the runtime
    # the sink is gone (nothing listens), and nobody else's Elasticsearch stops.
    upstream = services.elasticsearch.url.split("://", 1)[1].rstrip("/")
    with contextlib.closing(Proxy(upstream)) as proxy:
        runtime = start_runtime(
            services, fresh_database, function_folder, tmp_path, f"es://{es_index}", "--for", "60",
            elasticsearch=f"http://127.0.0.1:{proxy.port}",
        )  # fmt: skip
        try:
            # 120 s bounds a stuck start (the JVM, Spark, the first micro-batch), as for
            # the other tests here; --for counts from the query's start, so a slow start
            # leaves the cut and the insert below as much of its 60 s as a fast one.
            runtime.wait_for_first_commit(120)
            proxy.cut()
            with fresh_database.connect().cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1), (2)")
            # 120 s bounds a runtime that does not stop: --for ends the run less than 60 s
            # after the first commit, and the stop waits 5 s for the batch the sink never
            # took.
            code = runtime.process.wait(timeout=120)
        finally:
            runtime.kill()
    output = runtime.output()
    assert code == 1, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert "was never acknowledged by the sinks" in last, output[-3000:]
    assert "src up to binlog." in last
    assert "nothing is lost" in last
