"""How far each lane of a deployment's changes is committed in one Kafka cluster: the
positions topic of that cluster, written in the same transaction as the changes it
counts, and read back before a lane is written again.

A *lane* is what one read writes in order: of one runtime (its *scope*: a standalone
runtime's checkpoint, or a cluster), a deployment's changes of one source (read
whole, never in key shards: ``dbus_spark.planning.source``), or of one part of it that
is read in order apart (a Kafka source's partition). Its *mark* is the order of the last
change a committed transaction carried (``state.records.document_version``: binlog
position, then row inside its rows event, so a transaction split across two Kafka
transactions is counted row by row; a Kafka source's offset). A fenced sink
(``dbus_spark.sinks.kafka``) puts each lane's new mark in the transaction that carries
the lane's changes, so the two are visible together or not at all; a sink that
writes a lane again (after a kill, a failover, a source moving to another runtime, a
batch read again) first reads its mark and drops every change at or before it: what a
``read_committed`` consumer already sees is not sent twice.

The topic is compacted with one partition (one message per lane survives), and a sink
reads it on from where it stopped (``MarkReader``). A read waits until every
transaction open when it began has ended (``read_committed`` stops at the first open
one), so it never misses a mark committed by a runtime that was killed with its
transaction open: a new producer with that transactional id aborts it at once, else
the broker does at its timeout.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from dbus_fn.errors import KafkaSinkError
from dbus_spark.config.logs import kafka_config
from dbus_spark.sinks.kafka_admin import create_missing_topics
from dbus_spark.state.records import KafkaRecord

POSITIONS_TOPIC = "dbus.positions"
"""The positions topic of every Kafka cluster a runtime writes exactly once."""

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    # Compacted often: a lane's mark is rewritten with every transaction.
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.1",
}


@dataclass(frozen=True, slots=True)
class Lane:
    """One deployment's changes of one source, or of its ``part`` read apart, as the
    runtimes of ``scope`` write them (``scope_of``): two runtimes apart never share a
    lane, whatever their deployments and sources are called."""

    scope: str
    deployment: str
    source: str
    part: str = ""

    @property
    def key(self) -> bytes:
        """The lane's key in the positions topic."""
        named = [self.scope, self.deployment, self.source, *([self.part] if self.part else [])]
        return json.dumps(named, separators=(",", ":")).encode()


def scope_of(checkpoint: str, cluster: str | None, incarnation: str = "") -> str:
    """Whose lanes: a cluster's (its members hand sources to one another), else one
    standalone runtime's, named by its checkpoint; ``incarnation``: which making of
    that cluster or checkpoint (``RuntimeConfig.incarnation``).

    A lane's marks are orders of its source's binlog positions, so they hold only
    for the history they were written in: a cluster made again under its name, or a
    checkpoint deleted and begun again at its path, reads positions that may lie
    before those marks (another server, the binlog begun again, ``--from earliest``)
    and must not take them for its own: with its incarnation it writes other lanes.
    ("" for a cluster or checkpoint begun before incarnations: its lanes as they were.)"""
    if cluster is not None:
        scope = f"cluster/{cluster}"
    else:
        scope = f"standalone/{hashlib.sha256(checkpoint.encode()).hexdigest()[:16]}"
    return f"{scope}/{incarnation}" if incarnation else scope


def mark_record(lane: Lane, order: int, at: dict[str, Any] | None = None) -> KafkaRecord:
    """The positions topic's message saying ``lane`` is committed up to ``order``;
    ``at``: the source position what it carries was read at, where the order alone
    does not say it (a history chunk's read)."""
    value: dict[str, Any] = {"order": order}
    if at is not None:
        value["at"] = at
    return KafkaRecord(POSITIONS_TOPIC, lane.key, json.dumps(value).encode())


def ensure_positions_topic(settings: Mapping[str, Any], *, timeout: float) -> None:
    """Create the positions topic of the cluster (``settings``: its client settings)
    when it lacks one: compacted, one partition."""
    create_missing_topics(
        settings, {POSITIONS_TOPIC}, partitions=1, create=True, timeout=timeout,
        config=TOPIC_CONFIG,
    )  # fmt: skip


class MarkReader:
    """The positions topic of one cluster (``settings``: its client settings), read
    on from where it last stopped, so a sink that reads the marks for every task reads
    only what was written since."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self._settings = dict(settings)
        self._consumer: Any = None
        self.marks: dict[bytes, int] = {}
        """Per lane key, its committed mark, as of the last ``read``."""
        self.at: dict[bytes, dict[str, Any]] = {}
        """Per lane key whose mark names one, the position it was read at (``mark_record``)."""

    def read(self, *, timeout: float) -> dict[bytes, int]:
        """The marks, once the topic is read to the end it had when asked and every
        transaction then open has ended. A ``KafkaSinkError`` past ``timeout`` seconds
        (the next read starts again from the topic's beginning)."""
        bootstrap = self._settings["bootstrap.servers"]
        deadline = time.monotonic() + timeout
        partition = TopicPartition(POSITIONS_TOPIC, 0)
        try:
            if self._consumer is None:
                self._consumer = self._open()
            consumer = self._consumer
            _low, end = consumer.get_watermark_offsets(partition, timeout=timeout, cached=False)
            while end > 0:
                for message in consumer.consume(500, timeout=0.05):
                    key, value = message.key(), message.value()
                    if message.error() is None and key is not None and value is not None:
                        mark = json.loads(value)
                        self.marks[key] = mark["order"]
                        if "at" in mark:
                            self.at[key] = mark["at"]
                        else:
                            self.at.pop(key, None)
                [at] = consumer.position([partition])
                if at.offset >= end:
                    break
                if time.monotonic() >= deadline:
                    self.close()
                    raise KafkaSinkError(
                        f"Kafka at {bootstrap} did not let its positions topic be read to "
                        f"offset {end} within {timeout:g}s (read to {max(at.offset, 0)}; a "
                        "transaction stays open); check the broker, or wait for the "
                        "transaction's timeout",
                        topic=POSITIONS_TOPIC,
                    )
        except KafkaException as exc:
            self.close()
            raise KafkaSinkError(
                f"Kafka at {bootstrap} did not answer for its positions topic: "
                f"{exc.args[0].str()}",
                topic=POSITIONS_TOPIC,
            ) from exc
        return self.marks

    def _open(self) -> Any:
        """A ``read_committed`` consumer at the topic's beginning; the marks start empty."""
        consumer = Consumer(
            kafka_config(
                {
                    **self._settings,
                    "group.id": f"dbus-positions-{uuid.uuid4().hex}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                }
            )
        )
        consumer.assign([TopicPartition(POSITIONS_TOPIC, 0, OFFSET_BEGINNING)])
        self.marks, self.at = {}, {}
        return consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


__all__ = [
    "POSITIONS_TOPIC", "Lane", "MarkReader", "ensure_positions_topic", "mark_record",
    "scope_of",
]  # fmt: skip
