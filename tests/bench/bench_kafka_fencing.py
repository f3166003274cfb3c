"""What fencing costs a cluster runtime's Kafka writes, on the real broker.

The same records go through the Kafka sink as a standalone runtime writes them
(idempotent producer, one flush per task) and as a cluster member writes them
(transactions committed on a confirmed hold, ``dbus_spark.sinks.kafka``):

* per-task time of small tasks (``--small`` records, a micro-batch at a low rate):
  p50 / p99 of ``flush()``, which is what a micro-batch waits for;
* throughput of one big task (``--big`` records), records/s;
* the first transactional producer's start (``init_transactions``).

The hold is confirmed by a function that always answers "held": one real
``HoldCheck.confirm`` round trip is measured by the coordination tests (about
0.6 ms) and is needed at most once per ``hold_seconds`` per worker.

    .venv/bin/python tests/bench/bench_kafka_fencing.py [--small 200] [--tasks 200] [--big 200000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from dbus_deploy.services import endpoints
from dbus_spark.sinks.kafka import KafkaSink, WriteFence
from dbus_spark.sinks.records import KafkaRecord

VALUE = b"x" * 1000  # about a 20-column row's CloudEvent


def held(source: str, epoch: int) -> float:
    return time.monotonic()


def make_sink(bootstrap: str, fenced: bool) -> tuple[KafkaSink, float]:
    began = time.monotonic()
    fence = WriteFence(f"dbus-bench-{uuid.uuid4().hex}", 2.0, 2.0, held) if fenced else None
    sink = KafkaSink(bootstrap, fence=fence)
    sink.hold("bench", 1)
    return sink, time.monotonic() - began


def run_task(sink: KafkaSink, topic: str, count: int) -> float:
    began = time.monotonic()
    for i in range(count):
        sink.write(KafkaRecord(topic, b"%d" % (i % 1000), VALUE))
    flushed = time.monotonic()
    assert sink.flush() == count
    return time.monotonic() - (flushed if count < 10_000 else began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--big", type=int, default=200_000)
    args = parser.parse_args()
    bootstrap = endpoints().kafka.bootstrap_servers
    topic = f"dbus-bench-fencing-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)
    try:
        for fenced in (False, True):
            name = "fenced (cluster)" if fenced else "plain (standalone)"
            sink, start = make_sink(bootstrap, fenced)
            run_task(sink, topic, args.small)  # warm: connections, metadata
            flushes = sorted(run_task(sink, topic, args.small) for _ in range(args.tasks))
            big = run_task(sink, topic, args.big)
            sink.close()
            p50 = statistics.median(flushes) * 1000
            p99 = flushes[int(len(flushes) * 0.99) - 1] * 1000
            print(
                f"{name}: producer start {start * 1000:.0f} ms; {args.small}-record task "
                f"flush p50 {p50:.1f} ms, p99 {p99:.1f} ms; {args.big} records in one task "
                f"{args.big / big:,.0f} records/s"
            )
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


if __name__ == "__main__":
    main()
