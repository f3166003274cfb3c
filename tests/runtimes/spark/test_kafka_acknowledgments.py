"""What the Kafka sink takes as written: a delivery report with an offset, and only
once a new topic's partitions host their logs.

librdkafka reports a request's messages as delivered when a later request to the
same partition succeeds (an implicit acknowledgment, with no offset). On a partition
a broker has just created, the earlier request can have failed while the later one
was appended in its place (KAFKA-15591), so those messages were never written. That
race cannot be made on demand; these tests rewrite one real delivery report to carry
no offset, as an implicit one does, and check that the sink sends the message again
(fenced: in a new transaction, so each message is seen once) or fails the task
(unfenced: the batch is read again), never counting it as written.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from test_kafka_fencing import TIMEOUT, Hold, read, wrap_produce, write

from dbus_deploy.services import KafkaEndpoint
from dbus_fn.errors import KafkaSinkError
from dbus_spark.sinks.kafka import KafkaSink, WriteFence
from dbus_spark.sinks.kafka_admin import wait_writable

pytestmark = pytest.mark.integration


class _Unnumbered:
    """A delivery report as librdkafka gives an implicitly acknowledged message."""

    def __init__(self, msg: Any) -> None:
        self._msg = msg

    def __getattr__(self, name: str) -> Any:
        return getattr(self._msg, name)

    def offset(self) -> int:
        return -1001  # RD_KAFKA_OFFSET_INVALID


def _first_report_unnumbered(sink: KafkaSink, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Make the first delivery report ``sink`` gets one without an offset; the count of
    reports so far."""
    reports = {"n": 0}

    def numbered_after_the_first(
        real_produce: Callable[..., None], *args: Any, on_delivery: Callable[..., None],
        **kwargs: Any,
    ) -> None:  # fmt: skip
        def report(err: Any, msg: Any) -> None:
            reports["n"] += 1
            on_delivery(err, _Unnumbered(msg) if reports["n"] == 1 else msg)

        real_produce(*args, on_delivery=report, **kwargs)

    wrap_produce(sink, monkeypatch, numbered_after_the_first)
    return reports


def test_a_fenced_message_acknowledged_without_an_offset_is_sent_again_once(
    kafka_service: KafkaEndpoint, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fence = WriteFence(f"dbus-test-{uuid.uuid4().hex}", TIMEOUT, 0.0, Hold("held"))
    sink = KafkaSink(kafka_service.bootstrap_servers, fence=fence)
    try:
        sink.hold("shop", 3)
        reports = _first_report_unnumbered(sink, monkeypatch)
        sent = write(sink, kafka_topic, 10)
        assert sink.flush() == 10
        assert reports["n"] > 10, "the chunk was sent again"
        seen = read(kafka_service.bootstrap_servers, kafka_topic)
        assert sorted(seen) == sorted(sent), "each message once: the first copy was aborted"
    finally:
        sink.close()


def test_an_unfenced_message_acknowledged_without_an_offset_fails_the_task(
    kafka_service: KafkaEndpoint, kafka_topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = KafkaSink(kafka_service.bootstrap_servers)
    try:
        _first_report_unnumbered(sink, monkeypatch)
        write(sink, kafka_topic, 10)
        with pytest.raises(KafkaSinkError) as caught:
            sink.flush()
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"Kafka refused 1 message(s), first: {kafka_topic}: partition ")
        assert "acknowledged a message without its offset" in message
        assert message.endswith("the batch will be retried")
        write(sink, kafka_topic, 10, "again")  # the next task's writes count again
        assert sink.flush() == 10
    finally:
        sink.close()


def test_a_client_that_saw_a_topic_before_it_had_leaders_waits_for_it(
    kafka_service: KafkaEndpoint,
) -> None:
    """Asked before its topic is made (as a busy broker that has not heard of a new
    topic yet answers), an admin client keeps answering "No leaders found" until it
    reads the topic's metadata again: the wait must, or the topic's first write fails
    after the whole bound."""
    bootstrap = kafka_service.bootstrap_servers
    topic = f"dbus-test-{uuid.uuid4().hex}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.list_topics(timeout=10)  # as the sink's admin lists them before creating
        future = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()},
                                    request_timeout=2)[TopicPartition(topic, 0)]  # fmt: skip
        with pytest.raises(KafkaException):
            future.result()  # it has seen the topic without leaders
        admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(timeout=30)
        wait_writable(admin, [topic], partitions=3, timeout=15.0)
    finally:
        admin.delete_topics([topic], operation_timeout=30)


def test_a_new_topic_is_written_once_every_partition_takes_writes(
    kafka_service: KafkaEndpoint,
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    topic = f"dbus-test-{uuid.uuid4().hex}"
    sink = KafkaSink(bootstrap, topic_partitions=3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        sent = write(sink, topic, 30)
        assert sink.flush() == 30
        assert sorted(read(bootstrap, topic)) == sorted(sent)
        wait_writable(admin, [topic], partitions=3, timeout=5.0)  # ready: returns at once
        with pytest.raises(KafkaSinkError) as caught:  # a partition that never comes
            wait_writable(admin, [topic], partitions=4, timeout=1.0)
        assert str(caught.value).startswith(
            f"Kafka topic {topic} was created but its partition 3 does not take writes "
            "after 1s ("
        )
        assert str(caught.value).endswith("); check the broker's log")
    finally:
        sink.close()
        admin.delete_topics([topic], operation_timeout=30)

