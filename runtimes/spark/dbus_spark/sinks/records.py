"""The records sinks accept: already encoded, ready to send."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


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
