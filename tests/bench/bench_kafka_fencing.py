"""What fencing costs a cluster runtime's Kafka writes, on the real broker.

The same records go through the Kafka sink as a standalone runtime writes them
(idempotent producer, one flush per task) and as a cluster member writes them
(transactions committed on a confirmed hold, ``dbus_spark.sinks.kafka``):

* per-task time of small tasks (``--small`` records, a micro-batch at a low rate):
  p50 / p99 of ``flush()``, which is what a micro-batch waits for (``settle()``
  where several deployments go at their own pace, each bounded);
* throughput of one big task (``--big`` records), records/s;
* the first task's time, the transactional producer's start (``init_transactions``)
  included.

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
from dbus_spark.state.records import KafkaRecord

VALUE = b"x" * 1000  # about a 20-column row's CloudEvent


def held(source: str, epoch: int) -> float:
    return time.monotonic()


def make_sink(bootstrap: str, fenced: bool, paced: bool) -> KafkaSink:
    fence = WriteFence(f"dbus-bench-{uuid.uuid4().hex}", 2.0, 2.0, held) if fenced else None
    sink = KafkaSink(bootstrap, fence=fence)
    sink.hold("bench", 1)
    sink.block_for = 5.0 if paced else None
    return sink


def run_task(sink: KafkaSink, topic: str, count: int) -> float:
    """Seconds the task waits for its records once written (for a big one: in all)."""
    paced = sink.block_for is not None
    began = time.monotonic()
    for i in range(count):
        sink.write(KafkaRecord(topic, b"%d" % (i % 1000), VALUE), "a" if paced else None)
    flushed = time.monotonic()
    if paced:
        assert sink.settle(60.0) == (count, {})
    else:
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
        for fenced, paced, name in (
            (False, False, "plain (standalone)"),
            (True, False, "fenced (cluster, one deployment)"),
            (True, True, "fenced, paced (cluster, deployments at their own pace)"),
        ):
            sink = make_sink(bootstrap, fenced, paced)
            began = time.monotonic()
            run_task(sink, topic, args.small)  # warm: connections, metadata, transactions
            start = time.monotonic() - began
            flushes = sorted(run_task(sink, topic, args.small) for _ in range(args.tasks))
            big = run_task(sink, topic, args.big)
            sink.close()
            p50 = statistics.median(flushes) * 1000
            p99 = flushes[int(len(flushes) * 0.99) - 1] * 1000
            print(
                f"{name}: first task {start * 1000:.0f} ms; {args.small}-record task "
                f"flush p50 {p50:.1f} ms, p99 {p99:.1f} ms; {args.big} records in one task "
                f"{args.big / big:,.0f} records/s"
            )
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


if __name__ == "__main__":
    main()
