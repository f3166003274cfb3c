"""dbus against Debezium, side by side: one run, one binlog, the real services.

The peer is Debezium's MySQL connector in a Kafka Connect standalone worker
(``debezium_peer.py``), fetched from Maven Central into ``.dbus/peers/`` on the
first run, once with its defaults and once tuned. For dbus (the runtime as
``bench_runtime.py`` runs it, local[2]) and for each of the peer's rows:

* rows/s over an already-written binlog of ``--rows`` rows of a 20-column and of a
  3-column table: every engine starts at the binlog position taken just before the
  table's rows were written, and the time runs from its start until all the rows
  are readable in Kafka;
* COMMIT → readable in Kafka (p50, p99) at steady ``--rates`` rows/s;
* peak PSS of its processes (the Spark driver JVM and Python workers; the worker
  JVM) through the run.

    .venv/bin/python tests/bench/bench_peers.py [--rows 100000] [--server mysql]
        [--skip tuned latency ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psutil
import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import NARROW, NARROW_FILL, WIDE, WIDE_FILL, fill_rows, master, on_server
from bench_runtime import WARM, WARM_FILL, config, runtime_row_id
from debezium_peer import (
    VARIANTS,
    ConnectWorker,
    PeerUnavailableError,
    PeerVariant,
    connector_config,
    fetch,
)
from debezium_peer import row_id as peer_row_id
from measures import PeakMemory, TopicCount, cache_bytecode, steady_load, tree
from side_by_side import Metric, render
from support import free_port

from dbus_deploy.services import endpoints, load_config
from dbus_fn.capture import SourceSpec, replica_id_for
from dbus_fn.errors import DbusError
from dbus_fn.events import BinlogPosition

TABLES = {"wide": ("20 columns", WIDE, WIDE_FILL), "narrow": ("3 columns", NARROW, NARROW_FILL)}
PULSE = "CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(8))"
DBUS = "dbus"


class Bench:
    """One run's database, topics and figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.local = endpoints()
        self.source = getattr(self.local, args.server)
        """The server every engine reads (``--server``)."""
        self.settings = SourceSpec("bench", self.source.dsn, ("*.*",)).connection
        self.run = uuid.uuid4().hex[:8]
        self.database = f"peers_{self.run}"
        self.work = load_config().home / "peers" / "runs" / self.run
        self.count = TopicCount(self.local.kafka.bootstrap_servers)
        self.conn = pymysql.connect(**self.settings.pymysql_kwargs(), autocommit=True)
        self.cur = self.conn.cursor()
        self.starts: dict[str, BinlogPosition] = {}
        self.markers = 0
        self.metrics: dict[tuple[str, str], Metric] = {}

    def figure(self, name: str, unit: str, engine: str, value: float) -> None:
        self.metrics.setdefault((name, unit), Metric(name, unit)).figures[engine] = value

    def topic(self, engine: str, table: str) -> str:
        return f"peers.{self.run}.{engine}.{table}"

    def pulse(self, engine: str, rate: int) -> str:
        table = f"pulse_{engine}_{rate}"
        self.cur.execute(PULSE.format(name=table))
        return table

    def ready(self, table: str, topic: str, failure: Callable[[], str | None]) -> None:
        """Wait until a marker row written to ``table`` is readable in ``topic``; a new
        marker is written every second, as a reader that is starting may take its
        position after the first one. Markers have negative ids, apart from the rows
        measured."""
        deadline = time.monotonic() + 300
        while True:
            self.markers -= 1
            self.cur.execute(f"INSERT INTO {table} (id) VALUES ({self.markers})")
            try:
                self.count.seconds_until(topic, 1, time.monotonic(), failure, timeout=1)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    def write_binlog(self) -> None:
        """The rows every engine reads, each table's after the position noted for it."""
        for table, (_, _, fill) in TABLES.items():
            self.starts[table] = master(self.cur)
            fill_rows(self.cur, fill, self.args.rows)
            print(f"{self.args.rows:,} rows of {table} from {self.starts[table]}", flush=True)

    def latency(
        self, engine: str, rate: int, topic: str, table: str, row_id: Callable[[bytes], int]
    ) -> None:
        load = steady_load(
            self.local.kafka.bootstrap_servers,
            self.settings.pymysql_kwargs(),
            self.database,
            table,
            topic,
            rate,
            self.args.seconds,
            row_id,
        )
        print(f"  {engine}: COMMIT → Kafka at {rate:,} rows/s: {load.describe()}", flush=True)
        self.figure(f"p50 at {rate:,}/s", "ms", engine, load.p50)
        self.figure(f"p99 at {rate:,}/s", "ms", engine, load.p99)

    def close(self) -> None:
        from confluent_kafka.admin import AdminClient

        self.count.close()
        self.cur.execute(f"DROP DATABASE IF EXISTS {self.database}")
        self.conn.close()
        admin = AdminClient({"bootstrap.servers": self.local.kafka.bootstrap_servers})
        ours = [
            t for t in admin.list_topics(timeout=10).topics if t.startswith(f"peers.{self.run}")
        ]
        for future in (admin.delete_topics(ours, operation_timeout=30) if ours else {}).values():
            future.result(timeout=60)


class PeerRun:
    """One variant of the peer: its worker, and a connector per measured table."""

    def __init__(self, bench: Bench, worker: ConnectWorker) -> None:
        self.bench = bench
        self.worker = worker
        self.engine = f"Debezium ({worker.variant.name})"
        self.key = worker.variant.name

    def processes(self) -> list[psutil.Process]:
        return tree(psutil.Process(self.worker.process.pid))

    def prefix(self, table: str) -> str:
        return f"peers.{self.bench.run}.{self.key}-{table}"

    def connector(self, table: str, *tables: str) -> str:
        """A connector of ``table`` (and ``tables``), streaming from the binlog's end."""
        name = f"{self.key}-{table}"
        db = self.bench.database
        self.worker.create(
            name,
            connector_config(
                self.prefix(table),
                self.bench.source,
                [f"{db}.{t}" for t in (table, *tables)],
                replica_id_for(f"bench/peers/{self.bench.run}/{name}"),
                self.worker.folder / f"{name}.history",
                self.worker.variant,
            ),
        )
        return name

    def prepare(self) -> None:
        """A connector per table, its schemas snapshotted, then stopped; the binlog is
        written after, so each starts at its table's position with schemas it knows."""
        for table in TABLES:
            name = self.connector(table, "ready")
            topic = f"{self.prefix(table)}.{self.bench.database}.ready"
            self.bench.ready("ready", topic, lambda n=name: self.worker.failure(n))
            self.worker.stop(name)

    def throughput_topic(self, table: str) -> str:
        return f"{self.prefix(table)}.{self.bench.database}.{table}"

    def throughput(self, table: str) -> float:
        """Seconds from resuming the table's connector at its position until every row
        is in Kafka."""
        name = f"{self.key}-{table}"
        topic = self.throughput_topic(table)
        began = time.monotonic()
        self.worker.start_at(name, self.prefix(table), self.bench.starts[table])
        seconds = self.bench.count.seconds_until(
            topic, self.bench.args.rows, began, lambda: self.worker.failure(name)
        )
        self.worker.stop(name)
        return seconds

    def latency(self, rate: int) -> None:
        table = self.bench.pulse(self.key, rate)
        name = self.connector(table)
        topic = f"{self.prefix(table)}.{self.bench.database}.{table}"
        self.bench.ready(table, topic, lambda: self.worker.failure(name))
        self.bench.latency(self.engine, rate, topic, table, peer_row_id)
        self.worker.delete(name)


def start_peers(bench: Bench, variants: list[PeerVariant], stack: ExitStack) -> list[PeerRun]:
    """A worker per variant, its connectors prepared (before the binlog is written)."""
    java, lib = fetch(load_config(), load_config().home / "peers")
    runs = []
    for variant in variants:
        worker = ConnectWorker(
            java,
            lib,
            bench.work / variant.name,
            bench.local.kafka.bootstrap_servers,
            free_port(),
            variant,
        )
        stack.callback(worker.close)
        runs.append(PeerRun(bench, worker))
    if "throughput" not in bench.args.skip:
        for peer in runs:
            peer.prepare()
    return runs


class DbusRun:
    """The runtime as bench_runtime.py runs it: local[2], one query per measurement."""

    engine = DBUS

    def __init__(self, bench: Bench) -> None:
        from dbus_spark.spark.session import spark_session

        self.bench = bench
        self.spark = spark_session("local[2]", app_name="dbus-bench-peers")
        self.spark.sparkContext.setLogLevel("ERROR")
        # A runtime is long-running: its Python workers start and its functions load
        # once, here, as the peer's workers started before they were measured.
        bench.cur.execute(WARM)
        warm = master(bench.cur)
        bench.cur.execute(on_server(bench.cur, WARM_FILL.format(first=1, last=1000)))
        topic = bench.topic(DBUS, "warm")
        with self.query("warm", topic, warm) as query:
            bench.count.seconds_until(topic, 1000, time.monotonic(), lambda: failure(query))

    @contextmanager
    def query(self, table: str, topic: str, begin: BinlogPosition) -> Iterator[Any]:
        """The runtime reading ``table`` from ``begin`` into ``topic``; stopped after,
        once its batch is done (a stop mid-batch aborts it, loudly)."""
        from dbus_spark.spark.job import start

        b = self.bench
        cfg = config(b.work / DBUS, b.source.dsn, b.database, f"kafka://{topic}", begin,
                     tables=table)  # fmt: skip
        query = start(cfg, spark=self.spark)
        try:
            yield query
        finally:
            deadline = time.monotonic() + 60
            while query.status["isTriggerActive"] and time.monotonic() < deadline:
                time.sleep(0.1)
            query.stop()

    def throughput_topic(self, table: str) -> str:
        return self.bench.topic(DBUS, table)

    def throughput(self, table: str) -> float:
        """Seconds from starting the query at the table's position until every row is
        in Kafka."""
        topic = self.throughput_topic(table)
        began = time.monotonic()
        with self.query(table, topic, self.bench.starts[table]) as query:
            return self.bench.count.seconds_until(
                topic, self.bench.args.rows, began, lambda: failure(query)
            )

    def latency(self, rate: int) -> None:
        table = self.bench.pulse(DBUS, rate)
        topic = self.bench.topic(DBUS, table)
        with self.query(table, topic, master(self.bench.cur)) as query:
            self.bench.ready(table, topic, lambda: failure(query))
            self.bench.latency(DBUS, rate, topic, table, runtime_row_id)

    def close(self) -> None:
        self.spark.stop()


def runtime_processes(others: set[int]) -> list[psutil.Process]:
    """The runtime's driver JVM and Python workers: what this process started, apart
    from the processes ``others`` and theirs."""
    mine = []
    for process in psutil.Process().children(recursive=True):
        try:
            lineage = {process.pid, *(parent.pid for parent in process.parents())}
        except psutil.Error:  # gone meanwhile
            continue
        if not lineage & others:
            mine.append(process)
    return mine


def failure(query: Any) -> str | None:
    """Why a runtime's query stopped (its error's first line), else None."""
    return None if query.exception() is None else str(query.exception()).splitlines()[0]


def measure(bench: Bench, engines: list[PeerRun | DbusRun]) -> None:
    """Throughput, table by table, then latency, rate by rate, each engine in turn."""
    if "throughput" not in bench.args.skip:
        bench.write_binlog()
        for table, (label, _, _) in TABLES.items():
            for engine in engines:
                seconds = engine.throughput(table)
                rate = bench.args.rows / seconds
                # The same rows from the first message written to the last: the
                # engine's start (a Spark query's, a connector's) left out.
                flowing = bench.args.rows / bench.count.span(engine.throughput_topic(table))
                print(f"  {engine.engine}: {label}: {seconds:.1f} s, {rate:,.0f} rows/s "
                      f"({flowing:,.0f} rows/s once writing)", flush=True)  # fmt: skip
                bench.figure(f"rows/s, {label}", "rows/s", engine.engine, rate)
                bench.figure(f"rows/s once writing, {label}", "rows/s", engine.engine, flowing)
    if "latency" not in bench.args.skip:
        for rate in bench.args.rates:
            for engine in engines:
                engine.latency(rate)


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows per table")
    parser.add_argument(
        "--rates", type=int, nargs="+", default=[1000, 5000], help="rows/s of the latency runs"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="length of a latency run")
    parser.add_argument(
        "--server", choices=["mariadb", "mysql"], default="mariadb",
        help="the source: `dbus services up mariadb` or `mysql` (the MySQL connector's home)",
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["throughput", "latency", DBUS, *(v.name for v in VARIANTS)],
    )
    args = parser.parse_args()
    began_load = os.getloadavg()[0]
    variants = [v for v in VARIANTS if v.name not in args.skip]
    engines = [DBUS, *(f"Debezium ({v.name})" for v in variants)]
    try:
        bench = Bench(args)
    except (DbusError, pymysql.Error) as exc:
        sys.exit(
            f"bench_peers: the services are not reachable ({exc}); run .venv/bin/dbus services up"
        )
    try:
        bench.cur.execute(f"CREATE DATABASE {bench.database}")
        bench.cur.execute(f"USE {bench.database}")
        bench.cur.execute("CREATE TABLE ready (id INT PRIMARY KEY)")
        for _, create, _ in TABLES.values():
            bench.cur.execute(create)
        with ExitStack() as stack:
            peers = start_peers(bench, variants, stack) if variants else []
            memory = {
                peer.engine: stack.enter_context(PeakMemory(peer.processes)) for peer in peers
            }
            runs: list[PeerRun | DbusRun] = []
            if DBUS not in args.skip:
                others = {peer.worker.process.pid for peer in peers}
                memory[DBUS] = stack.enter_context(PeakMemory(lambda: runtime_processes(others)))
                ours = DbusRun(bench)
                stack.callback(ours.close)
                runs.append(ours)
            measure(bench, [*runs, *peers])
        for engine, peaks in memory.items():
            bench.figure("peak PSS", "MiB", engine, peaks.peaks["total_pss"])
    except (DbusError, PeerUnavailableError) as exc:
        sys.exit(f"bench_peers: {exc}")
    finally:
        bench.close()
    ran = [
        f"source: {args.server}",
        *([] if "throughput" in args.skip else [f"{args.rows:,} rows per table"]),
        *([] if "latency" in args.skip else [f"latency runs of {args.seconds:g} s"]),
        f"{psutil.cpu_count()} cores, load average {began_load:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end",
    ]
    print("\n" + "; ".join(ran))
    print(render(list(bench.metrics.values()), engines))


if __name__ == "__main__":
    main()
