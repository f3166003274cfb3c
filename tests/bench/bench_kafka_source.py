"""A Kafka-sourced deployment beside a binlog-sourced one, on the same rows.

On the real services (``dbus services up``), one deployment (a filter and a route,
as in ``bench_runtime.py``) runs twice over the same 20-column rows:

* (b) binlog-sourced: ``--rows`` rows inserted into MariaDB; rows/s from the start
  of the writes until the output topic holds them all;
* (k) Kafka-sourced: the CloudEvents (b) wrote, produced again into a topic a
  runtime reads as a Kafka source (``dbus_spark.config.kafka_source``); rows/s from the
  start of that produce until the output topic holds them all;
* (p) the bare read of (k) for scale: one Python consumer of the same topic,
  decoding each message into a row change, no Spark, no functions, no sink.

Each runtime is warm first (1,000 rows through), as a long-running one is.

    .venv/bin/python tests/bench/bench_kafka_source.py [--rows 100000] [--runs 1]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_capture import WIDE, WIDE_FILL
from bench_runtime import WARM, WARM_FILL, config, deployment
from measures import TopicCount, cache_bytecode
from support import kafka_consumer

from dbus_deploy.services import endpoints
from dbus_fn.capture import SourceSpec
from dbus_spark.config.kafka_source import KafkaSource
from dbus_spark.config.runtime import RuntimeConfig, deployment_folders
from dbus_spark.reads.kafka_read import change_of
from dbus_spark.spark.job import start
from dbus_spark.spark.session import spark_session


def _produced(bootstrap: str, topic: str, messages: list[Any]) -> None:
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 500_000,
    })  # fmt: skip
    for key, value, headers in messages:
        producer.produce(topic, key=key, value=value, headers=headers)
        producer.poll(0)
    producer.flush(120)


def _made(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)


def _messages(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, bytes, Any]]:
    """Every message of ``topic`` (``count`` of them), in partition order."""
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[tuple[bytes, bytes, Any]] = []
    try:
        while len(found) < count:
            for message in consumer.consume(1000, timeout=5):
                if message.error() is None:
                    found.append((message.key(), message.value(), message.headers()))
    finally:
        consumer.close()
    return found


def _wait(query: Any, count: TopicCount, topic: str, total: int, began: float) -> float:
    def failure() -> str | None:
        error = query.exception()
        return None if error is None else str(error).splitlines()[0]

    return count.seconds_until(topic, total, began, failure)


def bare_read(bootstrap: str, topic: str, total: int) -> float:
    """Rows/s of one consumer reading and decoding ``topic`` (no Spark, no sink)."""
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    read, began = 0, time.monotonic()
    try:
        while read < total:
            for message in consumer.consume(1000, timeout=5):
                if message.error() is None:
                    change_of("k", message)
                    read += 1
    finally:
        consumer.close()
    return total / (time.monotonic() - began)


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()

    local = endpoints()
    bootstrap = local.kafka.bootstrap_servers
    settings = SourceSpec("bench", local.mariadb.dsn, ("*.*",)).connection.pymysql_kwargs()
    database = f"bench_{uuid.uuid4().hex[:12]}"
    work = Path(".dbus") / "bench" / database
    conn = pymysql.connect(**settings, autocommit=True)
    cur = conn.cursor()
    cur.execute(f"CREATE DATABASE {database}")
    cur.execute(f"USE {database}")
    spark = spark_session("local[2]", app_name="dbus-bench")
    spark.sparkContext.setLogLevel("ERROR")
    count = TopicCount(bootstrap)
    print(f"{args.rows:,} rows of 20 columns; a filter and a route; runs: {args.runs}")
    try:
        cur.execute(WIDE)
        cur.execute(WARM)
        for run in range(1, args.runs + 1):
            cur.execute("TRUNCATE wide")
            cur.execute("TRUNCATE warm")
            binlog_out = f"bench-{uuid.uuid4().hex[:8]}"
            cfg = config(work, local.mariadb.dsn, database, f"kafka://{binlog_out}", "latest")
            query = start(cfg, spark=spark)
            try:
                cur.execute(WARM_FILL.format(first=1, last=1000))
                _wait(query, count, binlog_out, 1000, time.monotonic())
                began = time.monotonic()
                for first in range(1, args.rows + 1, 10_000):
                    last = min(first + 9_999, args.rows)
                    cur.execute(WIDE_FILL.format(first=first, last=last))
                binlog = args.rows / _wait(query, count, binlog_out, 1000 + args.rows, began)
            finally:
                query.stop()
            messages = _messages(bootstrap, binlog_out, 1000 + args.rows)
            warm, rows = messages[:1000], messages[1000:]
            source_topic, kafka_out = f"bench-in-{run}-{uuid.uuid4().hex[:8]}", f"{binlog_out}-k"
            _made(bootstrap, source_topic)  # as the runtime makes its own: 3 partitions
            _produced(bootstrap, source_topic, warm[:1])
            kafka_cfg = RuntimeConfig(
                sources=(),
                kafka_sources=(KafkaSource("kin", bootstrap, (source_topic,), start="earliest"),),
                deployments=deployment_folders(
                    (str(deployment(work / kafka_out / "fn", database, f"kafka://{kafka_out}")),)
                ),
                kafka_bootstrap=bootstrap,
                elasticsearch_url=local.elasticsearch.url,
                checkpoint_dir=str(work / kafka_out / "checkpoint"),
            )
            query = start(kafka_cfg, spark=spark)
            try:
                _produced(bootstrap, source_topic, warm[1:])
                _wait(query, count, kafka_out, 1000, time.monotonic())
                began = time.monotonic()
                _produced(bootstrap, source_topic, rows)
                produced = time.monotonic() - began
                kafka = args.rows / _wait(query, count, kafka_out, 1000 + args.rows, began)
            finally:
                query.stop()
            bare = bare_read(bootstrap, source_topic, 1000 + args.rows)
            print(f"run {run}: (b) binlog-sourced {binlog:>9,.0f} rows/s   "
                  f"(k) Kafka-sourced {kafka:>9,.0f} rows/s   k/b {kafka / binlog:.2f}   "
                  f"(p) bare consume+decode {bare:>9,.0f} rows/s   "
                  f"(produce of the input took {produced:.1f} s)")  # fmt: skip
    finally:
        count.close()
        spark.stop()
        cur.execute(f"DROP DATABASE {database}")
        conn.close()


if __name__ == "__main__":
    main()
