"""One deployment's trouble against another's latency, on the real services
(``dbus services up``; ``socat`` for the cut).

Two deployments over one database: ``a`` routes every change to Kafka, ``b`` to
Elasticsearch, which the runtime reaches through a TCP proxy. One row a transaction
at ``--rate`` rows/s, each phase on a table of its own:

1. baseline: ``a``'s COMMIT → Kafka p50/p99 for ``--seconds``;
2. ``b``'s Elasticsearch cut off (the proxy stopped) for ``--outage`` seconds: ``a``'s
   p50/p99 meanwhile; then the proxy back, and how long until ``b``'s index holds
   every row of the phase's table;
3. ``b``'s function made slower than the load (``--slow`` seconds an event) for
   ``--seconds``: ``a``'s p50/p99 and ``b``'s state; then ``b`` made fast again (its
   folder rewritten, as a redeploy does), and how long until its index holds every row;
4. a backfill of ``--bootstrap`` rows for a third deployment ``c`` (to Kafka), whose
   table was filled before the runtime started: ``a``'s p50/p99 in the first
   ``--boot-seconds`` of it, and
   how long ``c``'s topic took to hold every row (0 skips the phase);
5. a backfill of ``--history`` rows for ``b`` asked while its Elasticsearch is cut off
   for ``--seconds``: ``a``'s p50/p99 meanwhile, and how long after the proxy is back
   ``b``'s index holds the whole table (0 skips the phase).

    .venv/bin/python tests/bench/bench_pace.py [--rate 100] [--seconds 30] [--outage 120]
        [--slow 0.015] [--bootstrap 1000000] [--boot-seconds 60] [--history 100000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import textwrap
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_runtime import runtime_row_id
from measures import SteadyLoad, cache_bytecode, steady_load
from support import Proxy, kafka_count, serving_api

from dbus_fn.capture import SourceSpec, replica_id_for
from dbus_fn.local_services import local_endpoints
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding, deployment_folders
from dbus_spark.interfaces.history.follow import backfill
from dbus_spark.spark.job import start
from dbus_spark.spark.session import spark_session
from dbus_spark.state.progress import ProgressBook


def _folder(folder: Path, name: str, database: str, destination: str, delay: float,
            tables: str = "*") -> Path:  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    slow = f"time.sleep({delay})" if delay else "pass"
    (folder / "bench.py").write_text(textwrap.dedent(f"""
        import time

        import dbus_fn as fn

        @fn.route(tables="{database}.{tables}")
        def there(event: fn.RowChange) -> str:
            {slow}
            return "{destination}" + event.table
        """))  # fmt: skip
    (folder / "dbus.toml").write_text(
        f'name = "{name}"\nversion = "1"\nmodule = "bench.py"\ntables = ["{database}.{tables}"]\n'
        'initial = "none"\n'
    )
    return folder


def _documents(url: str, index: str) -> int:
    try:
        with urllib.request.urlopen(f"{url}/{index}/_count", timeout=10) as answer:
            return int(json.loads(answer.read())["count"])
    except OSError:
        return 0


def _phase(cur: Any, settings: dict[str, Any], database: str, kafka: str, topic: str,
           table: str, args: argparse.Namespace, seconds: float) -> SteadyLoad:  # fmt: skip
    cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(8))")
    time.sleep(3)  # the runtime sees the new table before its rows
    return steady_load(kafka, settings, database, table, f"{topic}{table}", args.rate, seconds,
                       runtime_row_id)  # fmt: skip


def _caught_up(es: str, index: str, rows: int, timeout: float = 600) -> float:
    began = time.monotonic()
    while _documents(es, index) < rows:
        if time.monotonic() - began > timeout:
            return float("inf")
        time.sleep(0.5)
    return time.monotonic() - began


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--outage", type=float, default=120.0)
    parser.add_argument("--slow", type=float, default=0.015, help="seconds b takes an event")
    parser.add_argument("--bootstrap", type=int, default=1_000_000, help="rows c backfills")
    parser.add_argument("--boot-seconds", type=float, default=60.0,
                        help="how long a's latency is measured while c backfills")  # fmt: skip
    parser.add_argument("--history", type=int, default=100_000,
                        help="rows b backfills while its Elasticsearch is cut off")  # fmt: skip
    args = parser.parse_args()

    local = local_endpoints()
    assert local is not None, "run `dbus services up` first"
    dsn, es, kafka = local.mariadb.dsn, local.elasticsearch.url, local.kafka.bootstrap_servers
    settings = SourceSpec("bench", dsn, ("*.*",)).connection.pymysql_kwargs()
    database = f"bench_{uuid.uuid4().hex[:12]}"
    work = Path(".dbus") / "bench" / database
    topic, index = f"bench-{uuid.uuid4().hex[:8]}-", f"bench-{uuid.uuid4().hex[:8]}-"
    conn = pymysql.connect(**settings, autocommit=True)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
    proxy = Proxy(es.split("://", 1)[1].rstrip("/"))
    b_folder = _folder(work / "b", "b", database, f"es://{index}", 0.0)
    source = SourceBinding(
        SourceSpec("bench", dsn, (f"{database}.*",)),
        replica_id=replica_id_for(f"bench/pace/{database}"),
        start="latest",
    )
    a_folder = _folder(work / "a", "a", database, f"kafka://{topic}", 0.0)
    c_folder = _folder(work / "c", "c", database, f"kafka://{topic}", 0.0, tables="big")
    if args.bootstrap:
        # Filled before the runtime starts: c's backfill reads it, the stream does not.
        cur.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(8))")
        cur.execute(f"INSERT INTO big SELECT seq, 'row' FROM seq_1_to_{args.bootstrap}")
    if args.history:
        cur.execute("CREATE TABLE hist (id INT PRIMARY KEY, v VARCHAR(8))")
        cur.execute(f"INSERT INTO hist SELECT seq, 'row' FROM seq_1_to_{args.history}")
    cfg = RuntimeConfig(
        sources=(source,),
        deployments=deployment_folders((str(a_folder), str(b_folder), str(c_folder))),
        kafka_bootstrap=kafka,
        elasticsearch_url=f"http://127.0.0.1:{proxy.port}",
        checkpoint_dir=str(work / "checkpoint"),
    )
    spark = spark_session("local[2]", app_name="dbus-bench")
    spark.sparkContext.setLogLevel("ERROR")
    query = start(cfg, spark=spark)
    book = ProgressBook(cfg.checkpoint_dir)
    served = contextlib.ExitStack()
    served.enter_context(serving_api(cfg.checkpoint_dir))  # what `backfill` asks
    try:
        print(f"a → Kafka, b → Elasticsearch (through a proxy), {args.rate} rows/s, "
              f"detach bound {cfg.detach_seconds:g} s")  # fmt: skip
        _phase(cur, settings, database, kafka, topic, "warm", args, 5)
        base = _phase(cur, settings, database, kafka, topic, "base", args, args.seconds)
        print(f"baseline            a: {base.describe()}", flush=True)

        cur.execute("CREATE TABLE cut (id INT PRIMARY KEY, v VARCHAR(8))")
        time.sleep(3)
        proxy.cut()
        cur.execute("DROP TABLE cut")
        outage = _phase(cur, settings, database, kafka, topic, "cut", args, args.outage)
        states = {d: b.state for d, b in book.load().get("bench", {}).items()}
        proxy.restore()
        back = _caught_up(es, f"{index}cut", int(args.rate * args.outage))
        print(f"b's ES cut {args.outage:g} s a: {outage.describe()}; p99 "
              f"{outage.p99 / base.p99:.2f}x baseline; b meanwhile {states}; b's index "
              f"held the table {back:.1f} s after the proxy was back", flush=True)  # fmt: skip

        _folder(b_folder, "b", database, f"es://{index}", args.slow)
        time.sleep(5)
        slow = _phase(cur, settings, database, kafka, topic, "slow", args, args.seconds)
        states = {d: (b.state, b.reason) for d, b in book.load().get("bench", {}).items()}
        _folder(b_folder, "b", database, f"es://{index}", 0.0)
        back = _caught_up(es, f"{index}slow", int(args.rate * args.seconds))
        print(f"b {args.slow:g} s/event  a: {slow.describe()}; p99 {slow.p99 / base.p99:.2f}x "
              f"baseline; b meanwhile {states}; fast again, b's index held the table "
              f"{back:.1f} s later", flush=True)  # fmt: skip

        if args.bootstrap:
            backfill("c", [f"{database}.big"], None, checkpoint=cfg.checkpoint_dir, wait=False)
            began = time.monotonic()
            during = _phase(cur, settings, database, kafka, topic, "boot", args,
                            args.boot_seconds)  # fmt: skip
            done = kafka_count(kafka, f"{topic}big", expected=args.bootstrap, within=1800)
            took = time.monotonic() - began
            print(f"c backfills {args.bootstrap:,} rows  a: {during.describe()}; p99 "
                  f"{during.p99 / base.p99:.2f}x baseline; c's topic held {done:,} rows "
                  f"{took:.1f} s after the request ({done / took:,.0f} rows/s)",
                  flush=True)  # fmt: skip

        if args.history:
            proxy.cut()
            backfill("b", [f"{database}.hist"], None, checkpoint=cfg.checkpoint_dir, wait=False)
            cut = _phase(cur, settings, database, kafka, topic, "histcut", args, args.seconds)
            proxy.restore()
            back = _caught_up(es, f"{index}hist", args.history, timeout=1800)
            print(f"b backfills {args.history:,} rows, its ES cut  a: {cut.describe()}; p99 "
                  f"{cut.p99 / base.p99:.2f}x baseline; b's index held the table {back:.1f} s "
                  "after the proxy was back", flush=True)  # fmt: skip
    finally:
        served.close()
        query.stop()
        proxy.close()
        spark.stop()
        cur.execute(f"DROP DATABASE {database}")
        conn.close()


if __name__ == "__main__":
    main()
