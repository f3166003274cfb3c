"""Two ways to read Kafka topics of dbus CloudEvents with Python work per row.

On the local Kafka (``dbus services up``), ``--rows`` CloudEvents of a 20-column row
(what dbus writes) go into a topic of 3 partitions; then, with the same per-row
work (the event decoded into a row change as a Kafka source's task decodes it, a
filter, a route):

* (s) Spark's own Kafka source (spark-sql-kafka, fetched from Maven Central into
  ``.dbus/cache/spark-kafka`` on first use), the work in ``mapInArrow``, into
  Spark's ``noop`` sink, ``local[2]``, one ``availableNow`` batch; seconds from
  the query's start to its end (the session's start apart);
* (d) dbus's way: a Python consumer, as a Kafka source's task reads
  (``dbus_spark.reads.kafka_read``), the work in the same process.

    .venv/bin/python tests/bench/bench_kafka_read.py [--rows 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from measures import cache_bytecode
from support import kafka_consumer

from dbus_deploy.services import endpoints
from dbus_fn.kafka_binding import change_from_kafka_message, to_kafka_message
from dbus_fn.testing import row_change

SPARK_KAFKA = "4.2.0"
"""The newest spark-sql-kafka on Maven Central; it loads under pyspark 4.3."""
_EXCLUDED = [  # what pyspark's own jars hold already
    ("org.apache.spark", "spark-sql_2.13"), ("org.apache.spark", "spark-core_2.13"),
    ("org.apache.spark", "spark-catalyst_2.13"), ("org.apache.spark", "spark-tags_2.13"),
    ("org.scala-lang", "scala-library"), ("org.apache.hadoop", "*"), ("org.slf4j", "*"),
    ("org.lz4", "*"), ("at.yawk.lz4", "*"), ("org.xerial.snappy", "*"),
    ("com.github.luben", "*"), ("com.google.code.findbugs", "jsr305"),
    ("org.scala-lang.modules", "scala-parallel-collections_2.13"),
]  # fmt: skip
TYPES = {"id": "int(11)", "a": "int(11)", "b": "bigint(20)", "c": "smallint(5) unsigned",
         "d": "tinyint(4)", "e": "varchar(32)", "f": "varchar(64)", "g": "char(8)", "h": "text",
         "i": "decimal(12,2)", "j": "double", "k": "float", "l": "datetime(6)", "m": "date",
         "n": "timestamp(6)", "o": "time", "p": "enum('x','y','z')", "q": "varbinary(16)",
         "r": "bigint(20) unsigned", "s": "int(11)"}  # fmt: skip


def wide_row(n: int) -> dict[str, Any]:
    return {"id": n, "a": n * 3, "b": n * 1000003, "c": n % 65535, "d": n % 100,
            "e": f"name-{n}", "f": f"a somewhat longer value {n}", "g": "fixed", "h": "text body",
            "i": Decimal(n) / 7, "j": n * 1.5, "k": n / 3, "l": "2024-01-02 03:04:05.123456",
            "m": "2024-02-29", "n": "2024-06-01 12:00:00.500000", "o": "12:34:56", "p": "y",
            "q": b"\xde\xad\xbe\xef", "r": n * 11, "s": None}  # fmt: skip


def work(messages: Iterable[tuple[bytes | None, bytes | None, Any]]) -> int:
    """The per-row work: decode, filter (one row in ten dropped), route; rows kept."""
    kept = 0
    routes: dict[str, int] = {}
    for key, value, headers in messages:
        change = change_from_kafka_message(key, value, headers, source="dc2")
        row = change.row  # type: ignore[union-attr]
        if row["id"] % 10 == 0:
            continue
        route = f"kafka://orders.{row['p']}"
        routes[route] = routes.get(route, 0) + 1
        kept += 1
    return kept


def spark_kafka_jars(cache: Path) -> list[str]:
    """spark-sql-kafka and what it needs beyond pyspark's jars, fetched once."""
    folder = cache / f"spark-kafka-{SPARK_KAFKA}"
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if jars:
        return jars
    exclusions = "".join(
        f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
        for g, a in _EXCLUDED
    )
    pom = f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
      <groupId>dbus.bench</groupId><artifactId>spark-kafka</artifactId><version>1</version>
      <packaging>pom</packaging><dependencies><dependency><groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId><version>{SPARK_KAFKA}</version>
      <exclusions>{exclusions}</exclusions></dependency></dependencies></project>"""
    with tempfile.TemporaryDirectory() as work_dir:
        (Path(work_dir) / "pom.xml").write_text(pom)
        subprocess.run(
            ["mvn", "-q", "-B", "dependency:copy-dependencies",
             f"-DoutputDirectory={folder.resolve()}"],
            cwd=work_dir, check=True,
        )  # fmt: skip
    return sorted(str(p) for p in folder.glob("*.jar"))


def produce(bootstrap: str, topic: str, rows: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(1, rows + 1):
        message = to_kafka_message(row_change("insert", "shop.wide", None, wide_row(n),
                                              column_types=TYPES))  # fmt: skip
        producer.produce(topic, key=message.key, value=message.value,
                         headers=list(message.headers))  # fmt: skip
        producer.poll(0)
    producer.flush(120)


def read_with_spark(spark: Any, bootstrap: str, topic: str, checkpoint: Path) -> float:
    import pyarrow as pa

    def per_batch(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        kept = 0
        for batch in batches:
            keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
            headers = [[(h["key"], h["value"]) for h in hs or ()]
                       for hs in batch.column("headers").to_pylist()]  # fmt: skip
            kept += work(zip(keys, values, headers, strict=True))
        yield pa.RecordBatch.from_arrays([pa.array([kept], pa.int64())], names=["kept"])

    began = time.monotonic()
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
        .select("key", "value", "headers").mapInArrow(per_batch, "kept long")
        .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    return time.monotonic() - began


def read_in_python(bootstrap: str, topic: str, rows: int) -> float:
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    began = time.monotonic()
    consumer.subscribe([topic])
    read = 0
    try:
        while read < rows:
            batch = consumer.consume(min(1000, rows - read), timeout=5)
            read += len(batch)
            work((m.key(), m.value(), m.headers()) for m in batch if m.error() is None)
    finally:
        consumer.close()
    return time.monotonic() - began


def main() -> None:
    cache_bytecode()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("mvn") is None:
        raise SystemExit("mvn is needed to fetch spark-sql-kafka (apt-get install maven)")
    from pyspark.sql import SparkSession

    bootstrap = endpoints().kafka.bootstrap_servers
    cache = Path(".dbus") / "cache"
    jars = spark_kafka_jars(cache)
    topic = f"bench-read-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, args.rows)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    began = time.monotonic()
    spark = (
        SparkSession.builder.master("local[2]").appName("dbus-bench")
        .config("spark.jars", ",".join(jars)).config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    print(f"{args.rows:,} CloudEvents of a 20-column row, 3 partitions; decode, filter, route; "
          f"Spark session {time.monotonic() - began:.1f} s")  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as checkpoints:
            for run in range(1, args.runs + 1):
                load = Path("/proc/loadavg").read_text().split()[0]
                spark_s = read_with_spark(spark, bootstrap, topic, Path(checkpoints) / str(run))
                python_s = read_in_python(bootstrap, topic, args.rows)
                print(f"run {run} (load {load}): (s) Spark's Kafka source "
                      f"{args.rows / spark_s:>9,.0f} rows/s   (d) a Python consumer "
                      f"{args.rows / python_s:>9,.0f} rows/s   d/s "
                      f"{spark_s / python_s:.1f}")  # fmt: skip
    finally:
        spark.stop()
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": bootstrap}).delete_topics([topic])


if __name__ == "__main__":
    main()
