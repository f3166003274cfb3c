"""What the Kafka sink asks of a cluster's admin API: its topics, created with our
partition counts, and how often its brokers abort transactions past their timeout
(which a fenced handoff waits for; ``dbus_spark.sinks.kafka``).

A topic just created is not written to until each of its partitions answers a
ListOffsets request. A broker publishes a new partition in its metadata before it
hosts the partition's log; a produce request in between fails, and the producer's
next request to that partition, already in flight, is appended in its place
(a broker without the fix of KAFKA-15591 takes any first sequence on a partition
that has no state for the producer). librdkafka then reports the failed
request's messages as delivered (an implicit acknowledgment), so they would be
lost without a word. The sink also refuses such acknowledgments
(``dbus_spark.sinks.kafka``), for partitions created by others."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

from dbus_fn.errors import KafkaSinkError
from dbus_spark.config.logs import kafka_config

log = logging.getLogger(__name__)

# Kafka's default; what a broker that will not say is assumed to use.
DEFAULT_ABORT_SCAN_SECONDS = 10.0
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Rows over 1 MB are delivered, not dropped."""


def create_missing_topics(
    settings: Mapping[str, Any],
    topics: set[str],
    *,
    partitions: int,
    create: bool,
    timeout: float,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create those of ``topics`` the cluster (``settings``: its client settings) lacks,
    with ``partitions`` each and the topic ``config`` given; with ``create`` off, a
    missing one is an error."""
    bootstrap = settings["bootstrap.servers"]
    admin = AdminClient(kafka_config(settings))
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise KafkaSinkError(
            f"Kafka at {bootstrap} did not list its topics: {exc.args[0].str()}",
            topic=sorted(topics)[0],
        ) from None
    to_create = sorted(topics - existing)
    if to_create and not create:
        raise KafkaSinkError(
            f"Kafka topic(s) {', '.join(to_create)} do not exist and topic creation is off; "
            "create them, or run with topic creation on",
            topic=to_create[0],
        )
    if not to_create:
        return
    futures = admin.create_topics(
        [
            NewTopic(
                t,
                num_partitions=partitions,
                config={"max.message.bytes": str(MAX_MESSAGE_BYTES), **(config or {})},
            )
            for t in to_create
        ]
    )
    created = []
    for topic, future in futures.items():
        try:
            future.result(timeout=30)
            created.append(topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaSinkError(
                    f"cannot create Kafka topic {topic}: {exc.args[0].str()}", topic=topic
                ) from exc
    # One made by another writer meanwhile has its own partitions: the sink's check of
    # each acknowledgment covers it.
    wait_writable(admin, created, partitions=partitions, timeout=timeout)


def wait_writable(
    admin: AdminClient, topics: list[str], *, partitions: int, timeout: float
) -> None:
    """Wait until every partition of ``topics`` answers ListOffsets, that is, until its
    leader hosts its log (see the module docstring); a KafkaSinkError naming the
    first that did not by ``timeout``."""
    waiting = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    deadline = time.monotonic() + timeout
    while waiting:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in waiting}, request_timeout=max(1.0, timeout)
        )
        still = []
        for tp, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                still.append((tp, exc.args[0].str()))
        if not still:
            return
        if time.monotonic() >= deadline:
            tp, why = still[0]
            raise KafkaSinkError(
                f"Kafka topic {tp.topic} was created but its partition {tp.partition} "
                f"does not take writes after {timeout:g}s ({why}); check the broker's log",
                topic=tp.topic,
            )
        waiting = [tp for tp, _ in still]
        # ListOffsets asks the leaders the client last saw, and a client that saw the
        # topic without leaders (before it was made, or just after) keeps failing with
        # "No leaders found" until its view of the topic is read again.
        for topic in sorted({tp.topic for tp in waiting}):
            with contextlib.suppress(KafkaException):
                admin.list_topics(topic=topic, timeout=max(0.5, deadline - time.monotonic()))
        time.sleep(0.05)


def abort_scan_seconds(bootstrap: str, timeout: float = 10.0) -> float:
    """How often the broker aborts transactions past their timeout (its
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``)."""
    admin = AdminClient(kafka_config({"bootstrap.servers": bootstrap}))
    try:
        brokers = admin.list_topics(timeout=timeout).brokers
        found = []
        for broker in brokers:
            resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
            for future in admin.describe_configs([resource]).values():
                entry = future.result(timeout=timeout).get(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                )
                if entry is not None and entry.value:
                    found.append(int(entry.value) / 1000)
    except (KafkaException, ValueError) as exc:
        log.warning(
            "kafka: cannot read the brokers' transaction abort interval (%s); assuming %gs",
            exc,
            DEFAULT_ABORT_SCAN_SECONDS,
        )
        return DEFAULT_ABORT_SCAN_SECONDS
    return max(found, default=DEFAULT_ABORT_SCAN_SECONDS)
