"""The records sinks accept, already encoded, and the closed set of row types a stage emits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


class RecordType(StrEnum):
    """What one row from the function stage is: a record for a sink, or a control row."""

    KAFKA = "kafka"
    """A Kafka message (a delivery or a dead letter)."""
    ELASTICSEARCH = "es"
    """An Elasticsearch document write."""
    STATS = "stats"
    """Control: the stage's counters, the last row of a partition."""
    HOLD = "hold"
    """Control: the epoch a cluster member read the source at, the first row of a partition."""


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One Kafka message: the key keeps one row's changes on one partition, in order."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class IndexAction:
    """One Elasticsearch write for one row: index the document, or delete it.

    ``version`` is external and grows with the binlog position, so a replayed or
    reordered write can never bring back an older document.
    """

    index: str
    doc_id: str
    version: int
    op: Literal["index", "delete"]
    document: Mapping[str, Any] | None = None
    column_types: Mapping[str, str] = field(default_factory=dict)
    # What to send to the dead-letter destination if the server refuses this document.
    origin: Any = None
