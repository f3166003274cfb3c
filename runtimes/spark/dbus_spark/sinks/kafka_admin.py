"""What the Kafka sink asks of a cluster's admin API: its topics, created with our
partition counts, and how often its brokers abort transactions past their timeout
(which a fenced handoff waits for; ``dbus_spark.sinks.kafka``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from dbus_fn.errors import KafkaSinkError
from dbus_spark.logs import kafka_config

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
) -> None:
    """Create those of ``topics`` the cluster (``settings``: its client settings) lacks,
    with ``partitions`` each; with ``create`` off, a missing one is an error."""
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
                t, num_partitions=partitions, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)}
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
