"""How long a runtime takes from ``dbus runtime start`` to its first change in Kafka.

On the real services (``dbus services up``), each run:

* starts ``dbus runtime start --from latest`` on a fresh checkpoint while a load
  commits one row every ``--every`` seconds, and times, from the command's start:
  the log's "runtime started" line, and the first change readable in Kafka;
* stops it (SIGTERM) and times the stop, and counts the CPU seconds its whole process
  tree spent from its start to its stop (the CLI, Spark's JVM, every Python process
  Spark started), sampled every 0.1 s (``measures.TreeCpu``: this process adopts the
  ones whose parent went first, so they stay in its tree, and reaps them), with
  Python's bytecode caches in use, as a user's runtime has them
  (``measures.cache_bytecode``);
* starts it again on the same checkpoint (a restart: it resumes where it committed)
  and times the same two moments.

The figures are printed per run, then their medians. A change committed before the
runtime took its position is not read (``--from latest``); the first one after it
is what reaches Kafka first.

    .venv/bin/python tests/bench/bench_start.py [--runs 3] [--every 0.02]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_runtime import deployment
from measures import TopicCount, TreeCpu, adopt_orphans, cache_bytecode

from dbus_deploy.services import endpoints

STARTED = re.compile(r"^(\S+ \S+) \S+ runtime started: .* in ([\d.]+) s \((.*)\)$", re.M)
PHASE = re.compile(r"(\w+) ([\d.]+) s")


class Trickle:
    """One-row transactions into ``table``, one every ``every`` seconds, in a thread."""

    def __init__(self, connect: dict[str, object], table: str, every: float) -> None:
        self._conn = pymysql.connect(**connect, autocommit=True)  # type: ignore[arg-type]
        self._table, self._every = table, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._conn.cursor() as cur:
            while not self._stop.wait(self._every):
                cur.execute(f"INSERT INTO {self._table} (note) VALUES ('x')")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._conn.close()


def _started_after(log: Path, began_wall: float) -> dict[str, float | None]:
    """Seconds from ``began_wall`` to the log's "runtime started" line, and the steps
    that line gives: before the runtime's start (the command's imports, its API), and
    each step of it (checks, Spark's session, the query's start)."""
    found = STARTED.search(log.read_text(errors="replace"))
    if found is None:
        return {"started": None}
    stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    started = stamp - began_wall
    steps: dict[str, float | None] = {
        "started": started,
        "before the start": started - float(found.group(2)),
    }
    for name, seconds in PHASE.findall(found.group(3)):
        steps[name] = float(seconds)
    return steps


def _reap_all(within: float = 30.0) -> None:
    """Wait for every child left (orphans adopted) until there are none, or ``within``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def one_start(
    command: list[str], log: Path, topic: str, count: TopicCount, timeout: float
) -> dict[str, float | None]:
    """Start the runtime, time its start and first change in Kafka, stop it."""
    already = count(topic)
    cpu = TreeCpu()
    began_wall, began = time.time(), time.monotonic()
    with log.open("wb") as out, cpu:
        runtime = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            first, stopped = _first_change_and_stop(
                runtime, log, topic, count, already, began, timeout
            )
        finally:
            _reap_all()
    return {
        **_started_after(log, began_wall),
        "first change": first,
        "stop": stopped,
        "cpu": cpu.seconds,
    }


def _first_change_and_stop(
    runtime: subprocess.Popen[bytes],
    log: Path,
    topic: str,
    count: TopicCount,
    already: int,
    began: float,
    timeout: float,
) -> tuple[float, float]:
    """Seconds from ``began`` to the first change in ``topic``; then the runtime is
    stopped (SIGTERM), and the seconds that took."""
    try:
        first = count.seconds_until(
            topic, already + 1, began, lambda: _exited(runtime, log), timeout
        )
    finally:
        stopping = time.monotonic()
        runtime.send_signal(signal.SIGTERM)
        try:
            runtime.wait(120)
        except subprocess.TimeoutExpired:
            runtime.kill()
            runtime.wait()
        stopped = time.monotonic() - stopping
    return first, stopped


def _exited(runtime: subprocess.Popen[bytes], log: Path) -> str | None:
    if runtime.poll() is None:
        return None
    return f"the runtime exited {runtime.returncode}: {log.read_text()[-2000:]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--every", type=float, default=0.02, help="seconds between commits")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    adopt_orphans()
    cache_bytecode()
    local = endpoints()
    maria = local.mariadb
    connect = {"host": maria.host, "port": maria.port, "user": maria.user,
               "password": maria.password}  # fmt: skip
    database = f"bench_start_{uuid.uuid4().hex[:8]}"
    admin = pymysql.connect(**connect, autocommit=True)  # type: ignore[arg-type]
    count = TopicCount(local.kafka.bootstrap_servers)
    dbus = str(Path(sys.executable).parent / "dbus")
    figures: dict[str, list[float]] = {}
    with admin.cursor() as cur, tempfile.TemporaryDirectory() as work:
        cur.execute(f"CREATE DATABASE {database}")
        cur.execute(f"CREATE TABLE {database}.t (id INT AUTO_INCREMENT PRIMARY KEY, note TEXT)")
        trickle = Trickle({**connect, "database": database}, "t", args.every)
        try:
            for run in range(1, args.runs + 1):
                topic = f"{database}_{run}"
                folder = deployment(Path(work) / f"fn{run}", database, f"kafka://{topic}", "t")
                command = [
                    dbus, "runtime", "start", "--source", f"bench={maria.dsn}",
                    "--functions", str(folder), "--kafka", local.kafka.bootstrap_servers,
                    "--checkpoint", str(Path(work) / f"checkpoint{run}"), "--from", "latest",
                    "--master", "local[2]", "--api", "off",
                ]  # fmt: skip
                for kind in ("start", "restart"):
                    log = Path(work) / f"runtime{run}-{kind}.log"
                    took = one_start(command, log, topic, count, args.timeout)
                    line = ", ".join(
                        f"{name} {value:.2f} s" for name, value in took.items() if value is not None
                    )
                    print(f"run {run}, {kind}: {line}", flush=True)
                    for name, value in took.items():
                        if value is not None:
                            figures.setdefault(f"{kind}: {name}", []).append(value)
        finally:
            trickle.close()
            cur.execute(f"DROP DATABASE {database}")
            count.close()
            admin.close()
    print(f"\nmedians of {args.runs} runs ({os.cpu_count()} cores):")
    for name, values in figures.items():
        print(f"  {name}: {statistics.median(values):.2f} s")


if __name__ == "__main__":
    main()
