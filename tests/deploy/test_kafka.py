"""The Kafka broker that `dbus services up kafka` runs takes and gives messages."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from scratch import scratch_topic
from support import kafka_consumer

from dbus_deploy.services import KafkaEndpoint

pytestmark = pytest.mark.integration


def test_kafka_topic_round_trips_a_message_with_an_idempotent_producer(
    kafka_service, kafka_topic
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": kafka_service.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
        }
    )
    producer.produce(kafka_topic, key=b"k1", value=b"v1")
    assert producer.flush(30) == 0
    consumer = kafka_consumer(
        kafka_service.bootstrap_servers,
        {"auto.offset.reset": "earliest"},
        group=f"{kafka_topic}-reader",
    )
    try:
        consumer.subscribe([kafka_topic])
        message = None
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        assert (message.key(), message.value()) == (b"k1", b"v1")
    finally:
        consumer.close()


def test_kafka_topic_is_fresh_and_has_three_partitions(kafka_service, kafka_topic) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_service.bootstrap_servers})
    metadata = admin.list_topics(kafka_topic, timeout=10)
    assert len(metadata.topics[kafka_topic].partitions) == 3


def test_kafka_topic_is_made_for_one_test_and_deleted_after_it(
    kafka_service: KafkaEndpoint,
) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_service.bootstrap_servers})
    with scratch_topic(kafka_service) as topic:
        assert topic in admin.list_topics(timeout=10).topics
    # Deletion completes asynchronously in the controller; give it a moment.
    for _ in range(20):
        if topic not in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.5)
    pytest.fail(f"topic {topic} still exists after its test")
