"""One source, many deployments on the same table: what the shared read costs, on the
real services (``dbus services up``).

For 1, 5 and 20 deployments (``--counts``), each a filter and a route to a topic of
its own, over one table of 20-column rows:

* rows/s end to end: ``--rows`` rows written, until every deployment's topic holds
  them all (a warm runtime: a warm-up batch first);
* COMMIT → readable in Kafka at ``--rate`` rows/s for ``--seconds``, on the first
  deployment's topic (p50, p99);
* the cost of N deployments against N times one (the rows/s of one divided by N).

    .venv/bin/python tests/bench/bench_deployments.py [--counts 1 5 20] [--rows 20000]
        [--rate 1000] [--seconds 15]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import WIDE, WIDE_FILL
from bench_runtime import WARM, WARM_FILL, runtime_row_id
from measures import TopicCount, cache_bytecode, steady_load

from dbus_fn.capture import SourceSpec, replica_id_for
from dbus_fn.local_services import local_endpoints
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding
from dbus_spark.spark.job import start
from dbus_spark.spark.session import spark_session


def deployments(work: Path, database: str, topics: list[str]) -> tuple[str, ...]:
    """One deployment per topic: keep every change of the database, route it there."""
    folders = []
    for number, topic in enumerate(topics):
        folder = work / f"fn{number}"
        folder.mkdir(parents=True)
        (folder / "bench.py").write_text(textwrap.dedent(f"""
            import dbus_fn as fn

            @fn.filter(tables="{database}.*")
            def keep(event: fn.RowChange) -> bool:
                return True

            @fn.route(tables="{database}.*")
            def there(event: fn.RowChange) -> str:
                # The latency run's rows to a topic of their own: their ids are the
                # throughput rows' too.
                return "kafka://{topic}" + ("-pulse" if event.table == "pulse" else "")
            """))  # fmt: skip
        (folder / "dbus.toml").write_text(
            f'name = "bench{number}"\nversion = "1"\nmodule = "bench.py"\n'
            f'tables = ["{database}.*"]\ninitial = "none"\n'
        )
        folders.append(str(folder))
    return tuple(folders)


def runtime(work: Path, dsn: str, database: str, topics: list[str]) -> RuntimeConfig:
    local = local_endpoints()
    assert local is not None, "run `dbus services up` first"
    run = uuid.uuid4().hex[:8]
    return RuntimeConfig(
        sources=(
            SourceBinding(
                SourceSpec("bench", dsn, (f"{database}.*",)),
                replica_id=replica_id_for(f"bench/deployments/{run}"),
                start="latest",
            ),
        ),
        deployments=deployments(work / run, database, topics),
        kafka_bootstrap=local.kafka.bootstrap_servers,
        elasticsearch_url=local.elasticsearch.url,
        checkpoint_dir=str(work / run / "checkpoint"),
    )


def _until(query: Any, done: Any, timeout: float = 1800) -> None:
    began = time.monotonic()
    while not done():
        error = query.exception()
        if error is not None:
            raise RuntimeError(str(error).splitlines()[0])
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"not done in {timeout}s")
        time.sleep(0.05)


def measure(spark: Any, cur: Any, settings: dict[str, Any], database: str, work: Path,
            dsn: str, count: int, args: argparse.Namespace) -> tuple[float, Any]:  # fmt: skip
    """Rows/s through ``count`` deployments, then the latency at ``args.rate`` rows/s."""
    topics = [f"bench-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    cfg = runtime(work, dsn, database, topics)
    query = start(cfg, spark=spark)
    counted = TopicCount(cfg.kafka_bootstrap)
    try:
        cur.execute("TRUNCATE wide")
        cur.execute("TRUNCATE warm")
        cur.execute(WARM_FILL.format(first=1, last=100))
        _until(query, lambda: all(counted(t) >= 100 for t in topics))
        began = time.monotonic()
        for first in range(1, args.rows + 1, 10_000):
            cur.execute(WIDE_FILL.format(first=first, last=min(first + 9_999, args.rows)))
        wanted = 100 + args.rows
        _until(query, lambda: all(counted(t) >= wanted for t in topics))
        rows_per_second = args.rows / (time.monotonic() - began)
        cur.execute("DROP TABLE IF EXISTS pulse")
        cur.execute("CREATE TABLE pulse (id INT PRIMARY KEY, v VARCHAR(8))")
        load = steady_load(cfg.kafka_bootstrap, settings, database, "pulse", f"{topics[0]}-pulse",
                           args.rate, args.seconds, runtime_row_id)  # fmt: skip
    finally:
        query.stop()
        counted.close()
    return rows_per_second, load


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=1000, help="rows/s for the latency run")
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the latency run")
    args = parser.parse_args()

    local = local_endpoints()
    assert local is not None, "run `dbus services up` first"
    dsn = local.mariadb.dsn
    settings = SourceSpec("bench", dsn, ("*.*",)).connection.pymysql_kwargs()
    database = f"bench_{uuid.uuid4().hex[:12]}"
    work = Path(".dbus") / "bench" / database
    conn = pymysql.connect(**settings, autocommit=True)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
    cur.execute(WIDE)
    cur.execute(WARM)
    spark = spark_session("local[2]", app_name="dbus-bench")
    spark.sparkContext.setLogLevel("ERROR")
    one: float | None = None
    try:
        print(f"{args.rows} rows of 20 columns; latency at {args.rate} rows/s for "
              f"{args.seconds:g} s; each deployment a filter and a route to its own topic")
        for count in args.counts:
            rows_per_second, load = measure(spark, cur, settings, database, work, dsn, count, args)
            one = rows_per_second * count if count == 1 else one
            versus = "" if one is None else f"; N x one would be {one / count:,.0f} rows/s"
            print(f"{count:>3} deployment(s): {rows_per_second:>9,.0f} rows/s{versus}; "
                  f"latency {load.describe()}", flush=True)  # fmt: skip
    finally:
        spark.stop()
        cur.execute(f"DROP DATABASE {database}")
        conn.close()


if __name__ == "__main__":
    main()
