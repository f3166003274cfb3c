"""Kafka sink: an idempotent producer whose flush means "acknowledged by all replicas".

One producer per Python worker process serves every task that runs there (a
producer is expensive to start and holds connections). Ordering: with
``enable.idempotence`` the broker keeps per-partition order even with several
requests in flight, and the key is the row's primary key, so one row's changes
stay in order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from dbus_fn.errors import DbusError
from dbus_spark.sinks.records import KafkaRecord

log = logging.getLogger(__name__)

# Tuned on the local broker with tests/bench/bench_runtime.py: lz4 costs little CPU
# and a few milliseconds of linger fills batches without hurting latency much.
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 512 * 1024,
    "compression.type": "lz4",
    # The local queue holds what the broker has not acknowledged yet; bounded so a
    # 1M-row transaction streams through in bounded memory (produce() then waits).
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 64 * 1024,
    # A broker that is down is waited for this long before a delivery fails and the
    # task (and so the micro-batch) is retried; nothing is acknowledged before.
    "message.timeout.ms": 300_000,
    "message.max.bytes": 64 * 1024 * 1024,
    # A broker that is down is retried at most once a second, not five times.
    "reconnect.backoff.ms": 1000,
    "reconnect.backoff.max.ms": 10000,
}


class KafkaSinkError(DbusError, RuntimeError):
    """Kafka did not acknowledge a message; the batch must not commit."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


class KafkaSink:
    """Sends ``KafkaRecord``s; ``flush()`` returns once all are acknowledged."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic_partitions: int = 3,
        create_topics: bool = True,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._config = {"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, **(settings or {})}
        self._producer = Producer(self._config)
        self._topic_partitions = topic_partitions
        self._create_topics = create_topics
        self._known_topics: set[str] = set()
        self._errors: list[str] = []
        self._pending = 0
        self._sent = 0
        self._lock = threading.Lock()

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        with self._lock:
            self._pending -= 1
            if err is not None:
                self._errors.append(f"{msg.topic()}: {err.str()}")
            else:
                self._sent += 1

    def ensure_topics(self, topics: Iterable[str]) -> None:
        """Create missing topics explicitly, so partition counts are ours, not the broker's."""
        missing = set(topics) - self._known_topics
        if not missing:
            return
        admin = AdminClient({"bootstrap.servers": self._bootstrap})
        existing = set(admin.list_topics(timeout=30).topics)
        to_create = sorted(missing - existing)
        if to_create and not self._create_topics:
            raise KafkaSinkError(
                f"Kafka topic(s) {', '.join(to_create)} do not exist and topic creation is off; "
                "create them, or run with topic creation on",
                topic=to_create[0],
            )
        if to_create:
            futures = admin.create_topics(
                [
                    NewTopic(
                        t,
                        num_partitions=self._topic_partitions,
                        # Rows over 1 MB are delivered, not dropped.
                        config={"max.message.bytes": str(64 * 1024 * 1024)},
                    )
                    for t in to_create
                ]
            )
            for topic, future in futures.items():
                try:
                    future.result(timeout=30)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise KafkaSinkError(
                            f"cannot create Kafka topic {topic}: {exc.args[0].str()}", topic=topic
                        ) from exc
        self._known_topics |= missing

    def write(self, record: KafkaRecord) -> None:
        if record.topic not in self._known_topics:
            self.ensure_topics([record.topic])
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    headers=list(record.headers),
                    on_delivery=self._on_delivery,
                )
                break
            except BufferError:
                # Back pressure: the local queue is full; let deliveries drain.
                self._producer.poll(0.1)
        with self._lock:
            self._pending += 1
        self._producer.poll(0)

    def flush(self) -> int:
        started = time.monotonic()
        while True:
            remaining = self._producer.flush(5.0)
            if remaining == 0:
                break
            log.warning(
                "kafka: %d message(s) not yet acknowledged after %.0fs (broker %s); waiting",
                remaining,
                time.monotonic() - started,
                self._bootstrap,
            )
        with self._lock:
            errors, self._errors = self._errors, []
            sent, self._sent = self._sent, 0
        if errors:
            raise KafkaSinkError(
                f"Kafka refused {len(errors)} message(s), first: {errors[0]}; "
                "the batch will be retried"
            )
        return sent

    def close(self) -> None:
        self._producer.flush(30)
