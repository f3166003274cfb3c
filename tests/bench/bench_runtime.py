"""Runtime throughput and latency, on the real services (``dbus services up``).

In one run, on the same binlog of 20-column rows:

* (a) bare mysql-replication decoding, rows/s (as in ``bench_capture.py``);
* (b) the runtime end to end into Kafka (source → function stage → acknowledged
  by the broker), rows/s, and (c) into Elasticsearch;
* (b) again with metrics on against off, taking turns (``--metrics-runs`` each):
  batch reports written, Spark's progress counted, ``/metrics`` served and
  scraped every second;
* their ratios to (a);
* latency from COMMIT to the message being readable in Kafka at a steady
  ``--rate`` rows/s (p50, p99);
* peak RSS of the runtime's processes (driver JVM and Python workers) while one
  ``--big`` row transaction goes through.

    .venv/bin/python tests/bench/bench_runtime.py [--rows 100000] [--rate 1000]
        [--decode-shards N] [--open-read SECONDS] [--delivery exactly-once]

A source's read goes on across micro-batches unless ``DBUS_CARRY_OPEN_READS=0``
(``dbus_spark.reads.open_read_control``); the first line printed says which.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import WIDE, WIDE_FILL, bare, master
from measures import CommittedCount, PeakMemory, SteadyLoad, TopicCount, cache_bytecode, steady_load

from dbus_deploy.services import endpoints
from dbus_fn.capture import SourceSpec, replica_id_for
from dbus_fn.events import BinlogPosition
from dbus_spark.config.runtime import (
    DEFAULT_OPEN_READ_SECONDS,
    RuntimeConfig,
    SourceBinding,
    deployment_folders,
)
from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
from dbus_spark.observe import RuntimeMetrics
from dbus_spark.reads import open_read_control
from dbus_spark.spark.job import start
from dbus_spark.spark.session import spark_session

WARM = WIDE.replace("CREATE TABLE wide", "CREATE TABLE warm")
WARM_FILL = WIDE_FILL.replace("INSERT INTO wide", "INSERT INTO warm")


def deployment(
    folder: Path, database: str, destination: str, tables: str = "*",
    delivery: str = "at-least-once",
) -> Path:  # fmt: skip
    """A deployment that sends every change of ``database.tables`` to ``destination``,
    with the manifest's ``delivery``."""
    folder.mkdir(parents=True)
    (folder / "bench.py").write_text(
        textwrap.dedent(
            f"""
            import dbus_fn as fn

            @fn.filter(tables="{database}.{tables}")
            def keep(event: fn.RowChange) -> bool:
                return True

            @fn.route(tables="{database}.{tables}")
            def there(event: fn.RowChange) -> str:
                return "{destination}"
            """
        )
    )
    # The stream is measured, not a bootstrap: with the default (initial = "snapshot")
    # a runtime started at "latest" would first send the tables' rows, whose keys the
    # latency run would take for its own.
    (folder / "dbus.toml").write_text(
        f'name = "bench"\nversion = "1"\nmodule = "bench.py"\ntables = ["{database}.{tables}"]\n'
        f'initial = "none"\ndelivery = "{delivery}"\n'
    )
    return folder


def config(
    work: Path,
    dsn: str,
    database: str,
    destination: str,
    begin: BinlogPosition | str,
    shards: int = 0,
    tables: str = "*",
    open_read: float = DEFAULT_OPEN_READ_SECONDS,
    delivery: str = "at-least-once",
) -> RuntimeConfig:
    local = endpoints()
    run = uuid.uuid4().hex[:8]
    return RuntimeConfig(
        sources=(
            SourceBinding(
                SourceSpec("bench", dsn, (f"{database}.{tables}",)),
                replica_id=replica_id_for(f"bench/runtime/{run}"),
                start=begin,
            ),
        ),
        deployments=deployment_folders(
            (str(deployment(work / run / "fn", database, destination, tables, delivery)),)
        ),
        kafka_bootstrap=local.kafka.bootstrap_servers,
        elasticsearch_url=local.elasticsearch.url,
        checkpoint_dir=str(work / run / "checkpoint"),
        decode_shards=shards,
        open_read_seconds=open_read,
        exactly_once_deployments=("bench",) if delivery == "exactly-once" else (),
    )


def _failure(query: Any) -> str | None:
    error = query.exception()
    return None if error is None else str(error).splitlines()[0]


def _delivered(cfg: RuntimeConfig) -> Callable[[], int]:
    """How many records the runtime's one destination holds now (Kafka messages, or
    Elasticsearch documents). Spark's input rows no longer say it: an open read
    delivers as it reads and hands Spark only its counters."""
    destination = _destination(cfg)
    if destination.startswith("kafka://"):
        count = (CommittedCount if cfg.exactly_once else TopicCount)(cfg.kafka_bootstrap)
        return lambda: count(destination.removeprefix("kafka://"))
    index = destination.removeprefix("es://")

    def documents() -> int:
        url = f"{cfg.elasticsearch_url}/{index}/_count"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return int(json.loads(answer.read())["count"])
        except OSError:  # not made yet
            return 0

    return documents


def _destination(cfg: RuntimeConfig) -> str:
    text = (Path(cfg.deployments[0].path) / "bench.py").read_text()
    return text.split('return "')[1].split('"')[0]


def _wait(query: Any, delivered: Callable[[], int], count: int, timeout: float = 1800) -> float:
    """Seconds until ``delivered()`` reaches ``count``; the query's error if it fails."""
    began = time.monotonic()
    while delivered() < count:
        if (why := _failure(query)) is not None:
            raise RuntimeError(why)
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"only {delivered()} of {count} records in {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - began


def steady_rows_per_second(
    spark: Any, cfg: RuntimeConfig, cursor: Any, rows: int, *, metrics: bool = False
) -> float:
    """Rows/s of a warm runtime: ``rows`` new rows over the time from the start of
    their writing until the destination holds them all.

    The first micro-batch starts the Python workers and loads the functions
    (seconds, once per runtime); a warm-up batch takes that cost, as a long-running
    runtime does, and the measured rows are written after it. With ``metrics`` the
    runtime counts every batch and serves ``/metrics``, scraped every second.
    """
    watched = RuntimeMetrics() if metrics else None
    query = start(cfg, spark=spark, metrics=watched)
    scraper = None if watched is None else Scraper(watched)
    delivered = _delivered(cfg)
    try:
        cursor.execute(WARM_FILL.format(first=1, last=1000))
        _wait(query, delivered, 1000)
        began = time.monotonic()
        for first in range(1, rows + 1, 10_000):
            cursor.execute(WIDE_FILL.format(first=first, last=min(first + 9_999, rows)))
        # Kafka keeps every message; an index keeps one document per key, and the
        # warm-up's keys are among the measured rows'.
        _wait(query, delivered, 1000 + rows if _destination(cfg).startswith("kafka") else rows)
        return rows / (time.monotonic() - began)
    finally:
        query.stop()
        if scraper is not None:
            scraper.stop()


class Scraper:
    """``/metrics`` of a runtime served on a free port and read every second."""

    def __init__(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics
        self._server = ApiServer(build_app(metrics), ApiSettings("127.0.0.1", 0))
        self._url = self._server.start() + "/metrics"
        self._done = threading.Event()
        self.scrapes = 0
        self._thread = threading.Thread(target=self._scrape, daemon=True)
        self._thread.start()

    def _scrape(self) -> None:
        while not self._done.wait(1.0):
            with urllib.request.urlopen(self._url, timeout=10) as answer:
                answer.read()
            self.scrapes += 1

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._server.stop()
        self._metrics.close()


def latency(spark: Any, cfg: RuntimeConfig, dsn_settings: dict[str, Any], database: str,
            topic: str, rate: int, seconds: float) -> SteadyLoad:  # fmt: skip
    """COMMIT → readable in Kafka while a warm runtime carries ``rate`` rows/s."""
    query = start(cfg, spark=spark)
    try:
        # Warm: one row through and its batch committed first (the first batch starts
        # the Python workers of the read, the write and the commit).
        with pymysql.connect(**dsn_settings, database=database, autocommit=True) as conn:
            conn.cursor().execute("INSERT INTO pulse (id, v) VALUES (-1, 'warm')")
        _wait(query, _delivered(cfg), 1)
        batches = len(query.recentProgress)
        while len(query.recentProgress) == batches and _failure(query) is None:
            time.sleep(0.05)
        load = steady_load(cfg.kafka_bootstrap, dsn_settings, database, "pulse", topic,
                           rate, seconds, runtime_row_id)  # fmt: skip
    finally:
        query.stop()
    print_phases(query)
    return load


def runtime_row_id(key: bytes) -> int:
    """The id of a row from the key of the runtime's message (its primary key, ``[id]``)."""
    return int(json.loads(key)[0])


def print_phases(query: Any) -> None:
    """Median milliseconds of each micro-batch phase (of the last 100 batches with rows)."""
    phases: dict[str, list[int]] = {}
    for progress in query.recentProgress:
        if progress["numInputRows"]:
            for phase, ms in progress["durationMs"].items():
                phases.setdefault(phase, []).append(ms)
    print(
        "micro-batch phases, median ms: "
        + ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in sorted(phases.items()))
    )


def peak_rss_during(spark: Any, cfg: RuntimeConfig, rows: int) -> dict[str, float]:
    """Peak memory (MiB) of the driver JVM and of the Python workers during the run."""
    with PeakMemory(lambda: psutil.Process().children(recursive=True)) as memory:
        query = start(cfg, spark=spark)
        try:
            _wait(query, _delivered(cfg), rows)
        finally:
            query.stop()
    return memory.peaks


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=1000, help="rows/s for the latency run")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the latency run")
    parser.add_argument("--big", type=int, default=1_000_000, help="rows in the big transaction")
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=["es", "metrics", "latency", "big"]
    )
    parser.add_argument(
        "--metrics-runs", type=int, default=3, help="runs each with metrics on and off"
    )
    parser.add_argument(
        "--decode-shards",
        type=int,
        default=0,
        help="readers per busy source (0: the runtime's default)",
    )
    parser.add_argument(
        "--open-read",
        type=float,
        default=DEFAULT_OPEN_READ_SECONDS,
        help="seconds a batch's reader goes on past its planned end (the runtime's --open-read)",
    )
    parser.add_argument(
        "--delivery",
        choices=["at-least-once", "exactly-once"],
        default="at-least-once",
        help="the deployment's Kafka delivery (its manifest's delivery)",
    )
    args = parser.parse_args()

    local = endpoints()
    dsn = local.mariadb.dsn
    spec = SourceSpec("bench", dsn, ("*.*",))
    settings = spec.connection.pymysql_kwargs()
    database = f"bench_{uuid.uuid4().hex[:12]}"
    work = Path(".dbus") / "bench" / database
    conn = pymysql.connect(**settings, autocommit=True)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
    spark = spark_session("local[2]", app_name="dbus-bench")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        cur.execute(WIDE)
        cur.execute(WARM)

        def made(destination: str, begin: BinlogPosition | str = "latest") -> RuntimeConfig:
            return config(work, dsn, database, destination, begin, args.decode_shards,
                          open_read=args.open_read, delivery=args.delivery)  # fmt: skip

        carried = open_read_control.switched_on(os.environ)
        print(f"open reads carried across micro-batches: {'on' if carried else 'off'} "
              f"({open_read_control.SWITCH})")  # fmt: skip
        print(f"{args.rows} rows of 20 columns; delivery {args.delivery}")
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        begin = master(cur)
        kafka = steady_rows_per_second(
            spark,
            made(f"kafka://{topic}"),
            cur,
            args.rows,
        )
        end = master(cur)
        decode = max(rate(lambda: bare(settings, database, begin, end)) for _ in "12")
        print(f"(a) bare mysql-replication decode   {decode:>12,.0f} rows/s")
        print(f"(b) runtime end to end → Kafka      {kafka:>12,.0f} rows/s", end="")
        print(f"   b/a {kafka / decode:.2f}")
        if "es" not in args.skip:
            index = f"bench-{uuid.uuid4().hex[:8]}"
            cur.execute("TRUNCATE wide")
            cur.execute("TRUNCATE warm")
            es = steady_rows_per_second(
                spark,
                made(f"es://{index}"),
                cur,
                args.rows,
            )
            print(f"(c) runtime end to end → ES         {es:>12,.0f} rows/s", end="")
            print(f"   c/a {es / decode:.2f}")
        if "metrics" not in args.skip:
            runs: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.metrics_runs):
                for on in (False, True):
                    cur.execute("TRUNCATE wide")
                    cur.execute("TRUNCATE warm")
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    cfg = made(f"kafka://{topic}")
                    runs[on].append(steady_rows_per_second(spark, cfg, cur, args.rows, metrics=on))
            off, on = statistics.median(runs[False]), statistics.median(runs[True])
            print(f"(b) → Kafka, metrics off / on      {off:>12,.0f} / {on:,.0f} rows/s "
                  f"(median of {args.metrics_runs} each, taking turns): on/off {on / off:.3f}"
                  f"; runs off {[round(r) for r in runs[False]]}, "
                  f"on {[round(r) for r in runs[True]]}")  # fmt: skip
        if "latency" not in args.skip:
            cur.execute("CREATE TABLE pulse (id INT PRIMARY KEY, v VARCHAR(8))")
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            cfg = made(f"kafka://{topic}")
            load = latency(spark, cfg, settings, database, topic, args.rate, args.seconds)
            print(f"latency COMMIT → Kafka at {args.rate} rows/s: {load.describe()}")
        if "big" not in args.skip:
            cur.execute("CREATE TABLE big (id INT PRIMARY KEY, a VARCHAR(32), b BIGINT, c DOUBLE)")
            before = master(cur)
            conn.begin()
            for first in range(1, args.big + 1, 50_000):
                last = min(first + 49_999, args.big)
                cur.execute(
                    "INSERT INTO big SELECT seq, CONCAT('row ', seq), seq * 3, seq / 7 "
                    f"FROM seq_{first}_to_{last}"
                )
            conn.commit()
            topic = f"bench-{uuid.uuid4().hex[:8]}"
            peaks = peak_rss_during(
                spark,
                made(f"kafka://{topic}", before),
                args.big,
            )
            print(
                f"{args.big:,}-row transaction: peak RSS driver JVM {peaks['jvm']:,.0f} MiB, "
                f"Python workers {peaks['python_rss']:,.0f} MiB (RSS sum), "
                f"{peaks['python_pss']:,.0f} MiB (PSS sum); "
                f"runtime total PSS {peaks['total_pss']:,.0f} MiB"
            )
    finally:
        spark.stop()
        cur.execute(f"DROP DATABASE {database}")
        conn.close()


def rate(run: Any) -> float:
    """Items per second of ``run`` (which returns how many items it handled)."""
    began = time.perf_counter()
    count = run()
    return float(count) / (time.perf_counter() - began)


if __name__ == "__main__":
    main()
