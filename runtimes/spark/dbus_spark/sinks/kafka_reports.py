"""What the Kafka client's reports say: whether a delivery report means written, and
which of its errors mean what to the sink (``dbus_spark.sinks.kafka``)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
"""Messages the sink itself purged (given up on by ``settle``)."""
REFUSED = (KafkaError.MSG_SIZE_TOO_LARGE,)
"""What the client refuses to take of one record, whatever the broker's state."""
TIMED_OUT = (KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT)
"""A message the client gave up waiting for: it may still reach the broker."""
LOST_BROKER = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
"""The client's errors that say it lost its connection to the cluster and connects
again: the sink retrying, as the metrics count it."""


def not_delivered(err: KafkaError | None, msg: Any) -> str | None:
    """Why a delivery report does not say the message was written: the broker's
    error, or a success without an offset. librdkafka reports a request's messages as
    delivered when a later request to the partition succeeds (an implicit
    acknowledgment); on a partition new to the producer a broker can take the later
    request without the earlier one (``dbus_spark.sinks.kafka_admin``), so such
    messages are sent again rather than taken as written."""
    if err is not None:
        return str(err.str())
    if msg.offset() < 0:  # acks=all (fixed) answers every written message's offset
        return (
            f"partition {msg.partition()} acknowledged a message without its offset "
            "(implicitly, after a failed request), so it may not have been written"
        )
    return None
