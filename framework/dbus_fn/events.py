"""Row changes: the value every function receives.

A ``RowChange`` is one inserted, updated or deleted row, as read from a binlog,
with where it was read (``BinlogPosition``) so that a replay yields the same event
id. Column values are typed Python values; ``dbus_fn.columns`` documents the
mapping from every MySQL type and the JSON form used on the wire.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


class Operation(str, enum.Enum):
    """What happened to the row."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """A place in a server's binlog.

    ``file``/``pos`` locate an event; ``gtid`` is the global transaction id of the
    transaction the event belongs to (MariaDB ``domain-server-seq`` or MySQL
    ``uuid:n``), when the server has GTIDs on.
    """

    file: str
    pos: int
    gtid: str | None = None

    def __str__(self) -> str:
        text = f"{self.file}:{self.pos}"
        return f"{text} ({self.gtid})" if self.gtid else text


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row change of one table, read from one source.

    ``before`` is ``None`` for an insert and ``after`` is ``None`` for a delete.
    ``position`` is the binlog position of the rows event and ``row_index`` the
    row's place inside it: together with ``server_id`` they name the change
    uniquely and deterministically.
    """

    source: str
    database: str
    table: str
    op: Operation
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    primary_key: tuple[str, ...]
    position: BinlogPosition
    commit_time: datetime
    server_id: str
    row_index: int = 0
    transaction_id: str | None = None
    column_types: Mapping[str, str] = field(default_factory=dict)
    schema_version: int = 0

    @property
    def row(self) -> Mapping[str, Any]:
        """The row as it is now: ``after``, or ``before`` for a delete."""
        image = self.after if self.after is not None else self.before
        assert image is not None, "a row change has at least one image"
        return image

    @property
    def key(self) -> tuple[Any, ...]:
        """The primary-key values of the row, in key-column order."""
        row = self.row
        return tuple(row[name] for name in self.primary_key)

    @property
    def qualified_table(self) -> str:
        return f"{self.database}.{self.table}"


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """A DDL statement read from the binlog (``ALTER``, ``RENAME``, ``CREATE``...).

    ``table`` is ``None`` when the statement names no single table.
    """

    source: str
    database: str
    table: str | None
    statement: str
    position: BinlogPosition
    commit_time: datetime
    server_id: str


@dataclass(frozen=True, slots=True)
class TransactionCommit:
    """The end of a transaction: ``position`` is where a reader resumes after it."""

    source: str
    position: BinlogPosition
    commit_time: datetime
    server_id: str
    transaction_id: str | None = None
    rows: int = 0


CaptureItem = RowChange | SchemaChange | TransactionCommit
