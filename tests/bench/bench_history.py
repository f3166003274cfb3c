"""History bench: a deployment bootstrapped from a big table while the live stream flows.

On the real services (``dbus services up``), in one run:

* a bare read of the table (PyMySQL unbuffered cursor, rows discarded), rows/s;
* the table read as a bootstrap's chunks read it (``read_chunk``), its rows parsed
  natively and by PyMySQL, rows/s;
* the bootstrap of an N-row, 20-column table into Kafka, then (a new runtime) into
  Elasticsearch: rows/s (first chunk planned to last chunk committed), and the
  ratio to the bare read;
* meanwhile another table takes ``--rate`` updates/s, read by another deployment:
  COMMIT → readable in Kafka p50/p99 during the bootstrap, against the same
  stream with no bootstrap running;
* the CPU each part of the machine took during each bootstrap (cores: the runtime's
  Python workers and JVM, each service, the bench itself) and how busy it was, which
  says whether a bootstrap is bound by the machine's cores;
* peak memory (PSS sum of the driver JVM and the Python workers) of each run, and
  of a bootstrap of a ``--small``-row table, to show it does not grow with size;
* `dbus fn verify` over the bootstrapped index: rows/s.

    .venv/bin/python tests/bench/bench_history.py [--rows 2000000] [--small 200000]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pymysql
import pymysql.cursors

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import WIDE, WIDE_FILL
from measures import CpuShare, cache_bytecode
from support import kafka_consumer

from dbus_deploy.services import endpoints
from dbus_fn.capture import SourceSpec, replica_id_for
from dbus_fn.capture._chunks import ChunkRead, chunked_table, next_boundary, read_chunk
from dbus_fn.capture._native import SWITCH as NATIVE_SWITCH
from dbus_fn.capture._reader import BinlogReader
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding, deployment_folders
from dbus_spark.interfaces.history.verify import verify
from dbus_spark.spark.job import start, stop
from dbus_spark.spark.session import spark_session
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore


def folder(work: Path, name: str, table: str, destination: str, initial: str) -> str:
    path = work / name
    path.mkdir(parents=True)
    (path / f"{name}.py").write_text(textwrap.dedent(f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def there(event: fn.RowChange) -> str:
            return "{destination}"
        '''))  # fmt: skip
    (path / "dbus.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\nmodule = "{name}.py"\ntables = ["{table}"]\n'
        f'initial = "{initial}"\n'
    )
    return str(path)


def runtime(work: Path, dsn: str, deployments: list[str], chunk_rows: int) -> RuntimeConfig:
    local = endpoints()
    run = uuid.uuid4().hex[:8]
    return RuntimeConfig(
        sources=(SourceBinding(SourceSpec("bench", dsn, ("*.*",)),
                               replica_id=replica_id_for(f"bench/history/{run}")),),
        deployments=deployment_folders(deployments),
        kafka_bootstrap=local.kafka.bootstrap_servers,
        elasticsearch_url=local.elasticsearch.url,
        checkpoint_dir=str(work / run / "checkpoint"),
        chunk_rows=chunk_rows,
    )


class Peak:
    """Peak PSS (MiB) of this process's children: Spark's JVM and Python workers."""

    def __init__(self) -> None:
        self.mib = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._done.is_set():
            total = 0.0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_full_info().pss / 2**20
                except psutil.Error:
                    continue
            self.mib = max(self.mib, total)
            time.sleep(0.2)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.mib


class Pulse:
    """``rate`` single-row updates a second to the pulse table; when each committed,
    and when its message became readable in Kafka."""

    def __init__(self, settings: dict[str, Any], database: str, topic: str, rate: int,
                 bootstrap: str) -> None:  # fmt: skip
        self.committed: dict[bytes, float] = {}
        self.received: dict[bytes, float] = {}
        self._stop = threading.Event()
        self._settings, self._database, self._rate = settings, database, rate
        self._consumer = kafka_consumer(
            bootstrap, {"auto.offset.reset": "latest", "fetch.wait.max.ms": 10}
        )
        self._consumer.subscribe([topic])
        self._threads = [threading.Thread(target=self._write, daemon=True),
                         threading.Thread(target=self._read, daemon=True)]  # fmt: skip

    def start(self) -> None:
        self._consumer.poll(1.0)  # joined the group before writing
        for thread in self._threads:
            thread.start()

    def _write(self) -> None:
        conn = pymysql.connect(**self._settings, database=self._database, autocommit=True)
        with conn.cursor() as cur:
            began, n = time.monotonic(), 0
            while not self._stop.is_set():
                pause = began + n / self._rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                key = n % 1000
                cur.execute("UPDATE pulse SET n = %s WHERE id = %s", (n, key))
                self.committed[f"{key}:{n}".encode()] = time.monotonic()
                n += 1
        conn.close()

    def _read(self) -> None:
        import json

        while not self._stop.is_set():
            msg = self._consumer.poll(0.05)
            if msg is not None and not msg.error():
                after = json.loads(msg.value())["after"]
                self.received.setdefault(f"{after['id']}:{after['n']}".encode(),
                                         time.monotonic())  # fmt: skip

    def stop(self) -> list[float]:
        time.sleep(3)  # the last updates reach Kafka
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._consumer.close()
        return sorted((self.received[k] - t) * 1000 for k, t in self.committed.items()
                      if k in self.received)  # fmt: skip


def percentiles(latencies: list[float]) -> str:
    if not latencies:
        return "no messages"
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
    return f"p50 {statistics.median(latencies):.0f} ms, p99 {p99:.0f} ms ({len(latencies)} rows)"


def bare_read(settings: dict[str, Any], database: str, table: str) -> float:
    conn = pymysql.connect(**settings, database=database, cursorclass=pymysql.cursors.SSCursor)
    began, count = time.perf_counter(), 0
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        for _ in cur:
            count += 1
    conn.close()
    return count / (time.perf_counter() - began)


def chunk_reads(dsn: str, database: str, table: str, native: str) -> float:
    """Rows/s of the table read as a bootstrap's chunks read it (``read_chunk``: its
    SELECT, its rows as snapshot row changes), 10,000 rows a chunk, with the native
    row parsing on (``native`` "1") or off ("0")."""
    reader = BinlogReader(SourceSpec("bench", dsn, ("*.*",)),
                          replica_id=replica_id_for(f"bench/chunks/{uuid.uuid4()}"))  # fmt: skip
    chunked = chunked_table(reader, database, table)
    before = os.environ.get(NATIVE_SWITCH)
    os.environ[NATIVE_SWITCH] = native
    began, count, lower = time.perf_counter(), 0, None
    try:
        while True:
            upper = next_boundary(reader, chunked, lower, 10_000)
            count += sum(type(item) is not ChunkRead for item in read_chunk(reader, chunked,
                                                                              lower, upper))
            if upper is None:
                return count / (time.perf_counter() - began)
            lower = upper
    finally:
        if before is None:
            os.environ.pop(NATIVE_SWITCH, None)
        else:
            os.environ[NATIVE_SWITCH] = before
        reader.close()


def bootstrap(spark: Any, cfg: RuntimeConfig, deployment: str, table: str, pulse: Pulse | None,
              ) -> tuple[float, float, CpuShare]:  # fmt: skip
    """Rows/s of the bootstrap, the runtime's peak PSS (MiB) while it ran, and the CPU
    each part of the machine took meanwhile."""
    peak = Peak()
    query = start(cfg, spark=spark)
    store = HistoryStore(progress_path(cfg.checkpoint_dir))
    try:
        if pulse is not None:
            pulse.start()
        with CpuShare() as cpu:
            while True:
                if query.exception() is not None:
                    raise RuntimeError(str(query.exception()))
                store.reload()
                task = store.tasks("bench").get(f"{deployment}:{table}")
                if task is not None and task.finished:
                    break
                time.sleep(0.5)
        return task.rows / (task.finished - task.started), peak.stop(), cpu
    finally:
        peak.stop()
        stop(query, spark)


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=500, help="live updates/s meanwhile")
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--skip", nargs="*", default=[], choices=["es", "small", "verify"])
    args = parser.parse_args()

    local = endpoints()
    dsn = local.mariadb.dsn
    settings = SourceSpec("bench", dsn, ("*.*",)).connection.pymysql_kwargs()
    database = f"bench_{uuid.uuid4().hex[:12]}"
    work = Path(".dbus") / "bench" / database
    conn = pymysql.connect(**settings, autocommit=True)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
    spark = spark_session("local[2]", app_name="dbus-bench")
    try:
        began = time.monotonic()
        for name, rows in (("wide", args.rows), ("small", args.small)):
            cur.execute(WIDE.replace("CREATE TABLE wide", f"CREATE TABLE {name}"))
            for first in range(1, rows + 1, 10_000):
                cur.execute(WIDE_FILL.replace("INSERT INTO wide", f"INSERT INTO {name}")
                            .format(first=first, last=min(first + 9_999, rows)))  # fmt: skip
        cur.execute("CREATE TABLE pulse (id INT PRIMARY KEY, n BIGINT)")
        cur.execute("INSERT INTO pulse SELECT seq, 0 FROM seq_0_to_999")
        print(f"{args.rows:,} + {args.small:,} rows of 20 columns written in "
              f"{time.monotonic() - began:.0f}s; chunks of {args.chunk_rows:,} rows")  # fmt: skip
        bare = max(bare_read(settings, database, "wide") for _ in "12")
        print(f"bare read (PyMySQL unbuffered)         {bare:>10,.0f} rows/s")
        for how, switch in (("rows parsed natively", "1"), ("rows parsed by PyMySQL", "0")):
            rate = max(chunk_reads(dsn, database, "wide", switch) for _ in "12")
            print(f"chunk reads, {how:<26}{rate:>10,.0f} rows/s ({rate / bare:.2f} x bare)")

        def live(name: str) -> tuple[str, str]:
            topic = f"bench-live-{uuid.uuid4().hex[:8]}"
            return folder(work / name, "live", f"{database}.pulse", f"kafka://{topic}",
                          "none"), topic  # fmt: skip

        path, topic = live("quiet")
        cfg = runtime(work, dsn, [path], args.chunk_rows)
        query = start(cfg, spark=spark)
        pulse = Pulse(settings, database, topic, args.rate, cfg.kafka_bootstrap)
        try:
            time.sleep(10)  # the first micro-batches start the workers
            pulse.start()
            time.sleep(30)
            quiet = pulse.stop()
        finally:
            stop(query, spark)
        print(f"live stream, no bootstrap:       {percentiles(quiet)}")

        for sink in ("kafka", "es"):
            if sink in args.skip:
                continue
            name = f"bench-{sink}-{uuid.uuid4().hex[:8]}"
            catalog = folder(work / name, "catalog", f"{database}.wide", f"{sink}://{name}",
                             "snapshot")  # fmt: skip
            path, topic = live(f"{name}-live")
            cfg = runtime(work, dsn, [catalog, path], args.chunk_rows)
            pulse = Pulse(settings, database, topic, args.rate, cfg.kafka_bootstrap)
            rate, peak, cpu = bootstrap(spark, cfg, "catalog", f"{database}.wide", pulse)
            during = pulse.stop()
            print(f"bootstrap → {sink:<5} {args.rows:,} rows  {rate:>10,.0f} rows/s "
                  f"({rate / bare:.2f} x bare), peak PSS {peak:,.0f} MiB")  # fmt: skip
            print(f"CPU during it: {cpu.text()}")
            print(f"live stream during it:          {percentiles(during)}")
            if sink == "es" and "verify" not in args.skip:
                out = io.StringIO()
                report = verify("catalog", checkpoint=cfg.checkpoint_dir, out=out)
                print(f"verify over the index:           {report.rows / report.seconds:>10,.0f}"
                      f" rows/s ({len(report.bad)} drifted)")  # fmt: skip
        if "small" not in args.skip:
            name = f"bench-small-{uuid.uuid4().hex[:8]}"
            catalog = folder(work / name, "catalog", f"{database}.small", f"kafka://{name}",
                             "snapshot")  # fmt: skip
            cfg = runtime(work, dsn, [catalog], args.chunk_rows)
            rate, peak, _ = bootstrap(spark, cfg, "catalog", f"{database}.small", None)
            print(f"bootstrap → kafka {args.small:,} rows  {rate:>10,.0f} rows/s, "
                  f"peak PSS {peak:,.0f} MiB")  # fmt: skip
    finally:
        spark.stop()
        cur.execute(f"DROP DATABASE {database}")
        conn.close()


if __name__ == "__main__":
    main()
