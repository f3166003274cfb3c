"""The typed records the function stage hands its sinks, and the closed set of row types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from dbus_fn.capture import TRANSACTION_END, coordinates, is_neutral
from dbus_fn.events import BinlogPosition


class RecordType(StrEnum):
    """What a read task's row to Spark holds (``dbus_spark.stage.worker.Batcher``)."""

    STATS = "stats"
    """The stage's counters, the last row of a partition."""
    DELIVERED = "delivered"
    """What a read task's sinks delivered as it read (``dbus_spark.sinks.writer.Output``)."""


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
    document: Mapping[str, Any] | None = None
    column_types: Mapping[str, str] = field(default_factory=dict)
    dead_letter: str = ""
    """The Kafka topic a document the server refuses goes to, as a dead letter."""
    change: bytes = b""
    """The delivered ``RowChange``, pickled: what a refusal's dead letter is built
    from. It is decoded only then."""
    size: int = 0
    """The document's bytes as JSON, for the sink's metrics (0: not known)."""
    refusal_mark: tuple[Any, int] | None = None
    """Exactly once: the lane and order a refusal's dead letter is written with
    (``dbus_spark.sinks.writer``), so a read again does not send it twice."""

    @property
    def op(self) -> Literal["index", "delete"]:
        return "delete" if self.document is None else "index"


_FILE_BITS, _POS_BITS, _ROW_BITS = 20, 30, 13


_TOTAL_BITS = 38
"""A server-neutral position's transaction place (2.7e11 transactions)."""


def position_order(position: BinlogPosition) -> int:
    """The one order of positions (``dbus_fn.capture.coordinates``: file number, then
    offset; a server-neutral position's transaction place, then place inside it)
    packed into one number, for comparisons made per row; ``document_version`` at
    row 0."""
    return document_version(position, 0)


def document_version(position: BinlogPosition, row_index: int) -> int:
    """A version that orders writes by binlog position: file number, offset, row.

    Fits Elasticsearch's signed 64-bit version: 20 bits of file number, 30 of
    offset (binlog files are at most 1 GiB) and 13 of row index inside one rows
    event (at most 8 KiB by default). A server-neutral position (a source of several
    servers, ``dbus_fn.capture``) is 38 bits of transaction place and 25 of change
    inside the transaction: its offset, the rows before its event, plus the row index.
    """
    number, offset = coordinates(position)  # the one order of positions
    if is_neutral(position):
        inside = offset + row_index
        if number >= 1 << _TOTAL_BITS or inside > TRANSACTION_END:
            raise ValueError(f"position {position} row {row_index} is out of the version range")
        return (number << TRANSACTION_END.bit_length()) | inside
    if number < 0:
        raise ValueError(f"binlog file name {position.file!r} has no numeric suffix")
    if number >= 1 << _FILE_BITS or offset >= 1 << _POS_BITS or row_index >= 1 << _ROW_BITS:
        raise ValueError(f"binlog position {position} row {row_index} is out of the version range")
    return (number << (_POS_BITS + _ROW_BITS)) | (offset << _ROW_BITS) | row_index
