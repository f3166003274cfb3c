"""Row changes: the value every function receives.

A ``RowChange`` is one inserted, updated or deleted row, as read from a binlog,
with where it was read (``BinlogPosition``) so that a replay yields the same event
id. Column values are typed Python values; ``dbus_fn.columns`` documents the
mapping from every MySQL type and the JSON form used on the wire.
"""

from __future__ import annotations

import enum
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn

from dbus_fn.errors import ReadOnlyRowError


class Operation(enum.StrEnum):
    """What happened to the row.

    ``SNAPSHOT`` is not a change: it is the row as a snapshot of its table read it
    (a deployment's bootstrap or backfill), with ``before`` ``None``. It carries
    the binlog position the snapshot was consistent with, so every change after it
    has a greater position.
    """

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    SNAPSHOT = "snapshot"


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


class Row(Mapping[str, Any]):
    """A read-only row image: column name to typed value, in table column order.

    Functions share one event, so a projection must not change its input: every
    mutating call raises ``ReadOnlyRowError`` (a ``TypeError``). Build a new dict
    instead, ``{**event.after, "total": 0}`` or ``row | {"total": 0}``. ``set``
    values are frozen into ``frozenset``; ``json`` values (dicts, lists) are shared
    as they are, so leave them unchanged too.

    Unlike ``types.MappingProxyType`` a ``Row`` pickles (Spark ships events
    between processes by pickling them).
    """

    __slots__ = ("_columns",)

    _columns: dict[str, Any]

    def __init__(self, columns: Mapping[str, Any] | None = None, /) -> None:
        values = dict(columns) if columns is not None else {}
        for value in values.values():
            if isinstance(value, set):  # rare: freeze them all in one pass, then stop looking
                values = {n: frozenset(v) if isinstance(v, set) else v for n, v in values.items()}
                break
        object.__setattr__(self, "_columns", values)

    def __getitem__(self, column: str) -> Any:
        return self._columns[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __contains__(self, column: object) -> bool:
        return column in self._columns

    # The dict's own views: read-only, and much faster than the Mapping defaults.
    def keys(self) -> KeysView[str]:
        return self._columns.keys()

    def items(self) -> ItemsView[str, Any]:
        return self._columns.items()

    def values(self) -> ValuesView[Any]:
        return self._columns.values()

    def get(self, column: str, default: Any = None) -> Any:
        return self._columns.get(column, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Row):
            return self._columns == other._columns
        if isinstance(other, Mapping):
            return self._columns == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, so unhashable like them

    def __repr__(self) -> str:
        return f"Row({self._columns!r})"

    def __reduce__(self) -> tuple[type[Row], tuple[dict[str, Any]]]:
        return (Row, (self._columns,))

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        """``row | {...}``: a new plain dict with ``other`` merged over this row."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**self._columns, **other}

    def __ror__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**other, **self._columns}

    def to_dict(self) -> dict[str, Any]:
        """A new, mutable ``dict`` copy of the row, to change and return."""
        return dict(self._columns)

    def _refuse(self, action: str, column: str | None = None) -> NoReturn:
        target = f" column {column!r}" if column is not None else ""
        raise ReadOnlyRowError(
            f"cannot {action}{target}: rows of a RowChange are read-only, because other "
            "functions see the same event; return a new dict instead, e.g. "
            "{**event.after, 'name': value} or event.after.to_dict()",
            column=column,
            action=action,
        )

    def __setitem__(self, column: str, value: Any) -> NoReturn:
        self._refuse("set", column)

    def __delitem__(self, column: str) -> NoReturn:
        self._refuse("delete", column)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        self._refuse(f"set attribute {name!r} on")

    def __delattr__(self, name: str) -> NoReturn:
        self._refuse(f"delete attribute {name!r} of")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._refuse("update")

    def pop(self, column: str, *default: Any) -> NoReturn:
        self._refuse("pop", column)

    def popitem(self) -> NoReturn:
        self._refuse("popitem")

    def clear(self) -> NoReturn:
        self._refuse("clear")

    def setdefault(self, column: str, default: Any = None) -> NoReturn:
        self._refuse("setdefault", column)


def _as_row(image: Mapping[str, Any] | None) -> Row | None:
    if image is None or isinstance(image, Row):
        return image
    return Row(image)


@dataclass(frozen=True, slots=True, init=False)
class RowChange:
    """One row change of one table, read from one source.

    ``before`` is ``None`` for an insert and ``after`` is ``None`` for a delete.
    ``position`` is the binlog position of the rows event and ``row_index`` the
    row's place inside it: together with ``server_id`` they name the change
    uniquely and deterministically.

    ``before`` and ``after`` may be given as any mapping; they are stored as
    read-only ``Row`` values. ``column_types`` maps each column to its lowercase
    MySQL ``COLUMN_TYPE`` (see ``dbus_fn.columns``); it makes the JSON form of the
    change lossless.
    """

    source: str
    database: str
    table: str
    op: Operation
    before: Row | None
    after: Row | None
    primary_key: tuple[str, ...]
    position: BinlogPosition
    commit_time: datetime
    server_id: str
    row_index: int = 0
    transaction_id: str | None = None
    column_types: Mapping[str, str] = field(default_factory=dict)
    schema_version: int = 0

    def __init__(
        self,
        source: str,
        database: str,
        table: str,
        op: Operation,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        primary_key: tuple[str, ...],
        position: BinlogPosition,
        commit_time: datetime,
        server_id: str,
        row_index: int = 0,
        transaction_id: str | None = None,
        column_types: Mapping[str, str] | None = None,
        schema_version: int = 0,
    ) -> None:
        # Written out so type checkers accept plain dicts for the row images; the
        # stored values are read-only Rows and a private copy of the types.
        setter = object.__setattr__
        setter(self, "source", source)
        setter(self, "database", database)
        setter(self, "table", table)
        setter(self, "op", op if type(op) is Operation else Operation(op))
        setter(self, "before", _as_row(before))
        setter(self, "after", _as_row(after))
        setter(self, "primary_key", tuple(primary_key))
        setter(self, "position", position)
        setter(self, "commit_time", commit_time)
        setter(self, "server_id", server_id)
        setter(self, "row_index", row_index)
        setter(self, "transaction_id", transaction_id)
        setter(self, "column_types", dict(column_types or {}))
        setter(self, "schema_version", schema_version)

    @property
    def row(self) -> Row:
        """The row as it is now: ``after``, or ``before`` for a delete."""
        image = self.after if self.after is not None else self.before
        assert image is not None, "a row change has at least one image"
        return image

    @property
    def key(self) -> tuple[Any, ...]:
        """The primary-key values of the row, in key-column order; for a table without
        a primary key, every value of the row, which is then its own key (shards and
        history reads tell rows apart by it; it never leaves dbus as a key)."""
        row = self.row
        if not self.primary_key:
            return tuple(row.values())
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


@dataclass(frozen=True, slots=True)
class UndecodedRows:
    """Rows of one rows event the capture could not decode, from ``row_index`` to the
    event's end: the read goes on past them, and they go to the dead letters of the
    deployments that read the table, by position, with ``error`` saying why and
    ``images`` holding the rows as the binlog wrote them (clipped, see
    ``dbus_fn.deadletter``). The rows before ``row_index`` were read as changes."""

    source: str
    database: str
    table: str
    op: Operation
    position: BinlogPosition
    commit_time: datetime
    server_id: str
    row_index: int
    error_type: str
    error: str
    images: bytes
    transaction_id: str | None = None

    @property
    def qualified_table(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def reason(self) -> str:
        """Why the rows did not decode: the error's type and message."""
        return f"{self.error_type}: {self.error}"


CaptureItem = RowChange | SchemaChange | TransactionCommit
"""What a binlog read yields and the SDK writes as CloudEvents."""

ReadItem = CaptureItem | UndecodedRows
"""What a binlog read yields: its items, and the rows it could not decode."""
