"""Chunked snapshot reads: a table in key order, a chunk at a time, without locks.

A chunk is the rows whose chunk key lies in ``(lower, upper]`` (``None`` is
unbounded). Each chunk is read in its own MariaDB consistent snapshot, which
names the binlog position the rows are exact at: every change committed before
it is in the rows, every change after it has a greater position. That position
is what lets a bootstrap merge the chunk with the live stream per key (see
``dbus_spark.bootstrap``) with no watermark writes on the source.

The chunk key is the primary key, else a unique key whose columns are all
``NOT NULL``. A table with neither cannot be split and is read as one chunk only
when asked for (``unchunked``). Boundaries are found by an index-only query (the
``rows``-th key after the previous boundary), so planning the next chunk costs a
few milliseconds whatever the table's size.

Boundaries are compared in Python against keys read from the binlog, so only keys
whose Python order is the server's order are split: integers, decimals, dates and
times, binary strings and strings in a binary collation. Boundaries are in
capture's form (a zero date is its text, ``dbus_fn._zero_dates``), which the
server also reads back as the date it names. A key of another type
(a case-insensitive string, say) is read as one chunk, which is exact too.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pymysql
import pymysql.cursors

from dbus_fn.capture._snapshot import (
    SnapshotTable,
    begin_consistent_snapshot,
    captured_values,
    snapshot_rows,
    table_description,
)
from dbus_fn.capture._text_rows import read_natively
from dbus_fn.errors import HistoryError
from dbus_fn.events import BinlogPosition, Operation, RowChange

if TYPE_CHECKING:
    from dbus_fn.capture._reader import BinlogReader

KeyValues = tuple[Any, ...]

_ORDERED_TYPES = (
    "tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "numeric",
    "date", "datetime", "binary", "varbinary",
)  # fmt: skip
_STRING_TYPES = ("char", "varchar")


@dataclass(frozen=True, slots=True)
class ChunkedTable:
    """A table as a chunked read sees it: its columns, and the key it is split by."""

    table: SnapshotTable
    key: tuple[str, ...]
    """The chunk key's columns; empty: the table is read as one chunk."""
    splittable: bool
    """Whether chunks may be bounded (the key's Python order is the server's)."""

    @property
    def name(self) -> str:
        return f"{self.table.database}.{self.table.table}"

    def key_of(self, change: RowChange) -> KeyValues:
        row = change.row
        return tuple(row[column] for column in self.key)


def chunked_table(
    reader: BinlogReader, database: str, table: str, *, unchunked: bool = False
) -> ChunkedTable:
    """``database.table`` with its chunk key; a table without one is refused unless
    ``unchunked`` (then it is read as one chunk)."""
    name = f"{database}.{table}"
    found = reader._sql(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND TABLE_TYPE = 'BASE TABLE'",
        (database, table),
        doing="looking up a table for a snapshot",
    )
    if not found or not found[0][0]:
        raise HistoryError(
            f"source {reader.spec.name!r} has no table {name}; name an existing table",
            table=name,
        )
    description = table_description(reader, database, table)
    rows = reader._sql(
        "SELECT s.INDEX_NAME, s.COLUMN_NAME, c.IS_NULLABLE, c.DATA_TYPE, c.COLLATION_NAME "
        "FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c "
        "ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME "
        "AND c.COLUMN_NAME = s.COLUMN_NAME WHERE s.TABLE_SCHEMA = %s AND s.TABLE_NAME = %s "
        "AND s.NON_UNIQUE = 0 ORDER BY s.INDEX_NAME = 'PRIMARY' DESC, s.INDEX_NAME, "
        "s.SEQ_IN_INDEX",
        (database, table),
        doing="reading a table's keys for a snapshot",
    )
    indexes: dict[str, list[tuple[str, bool, str, str | None]]] = {}
    for index, column, nullable, data_type, collation in rows:
        indexes.setdefault(str(index), []).append(
            (str(column), str(nullable) == "YES", str(data_type).lower(),
             None if collation is None else str(collation).lower())
        )  # fmt: skip
    for columns in indexes.values():
        if any(nullable for _, nullable, _, _ in columns):
            continue  # NULLs are not ordered by comparison: no boundary can hold them
        return ChunkedTable(
            description,
            tuple(column for column, _, _, _ in columns),
            all(_ordered(data_type, collation) for _, _, data_type, collation in columns),
        )
    if not unchunked:
        raise HistoryError(
            f"table {name} has neither a primary key nor a unique key on NOT NULL columns, "
            "so it cannot be read in chunks; add a key, or read it as one chunk "
            "(unchunked: one consistent read of the whole table)",
            table=name,
        )
    return ChunkedTable(description, (), False)


def _ordered(data_type: str, collation: str | None) -> bool:
    if data_type in _ORDERED_TYPES:
        return True
    return data_type in _STRING_TYPES and collation is not None and collation.endswith("_bin")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ranges(
    key: Sequence[str], values: KeyValues, *, above: bool
) -> tuple[str, list[Any]]:
    """SQL for "key > values" (``above``) or "key <= values", as OR'ed ranges, which
    the range optimizer reads as such."""
    terms, args = [], []
    for i, column in enumerate(key):
        equal = [f"{_quoted(c)} = %s" for c in key[:i]]
        terms.append(
            "(" + " AND ".join([*equal, f"{_quoted(column)} {'>' if above else '<'} %s"]) + ")"
        )
        args += [*values[:i], values[i]]
    if not above:
        terms.append("(" + " AND ".join(f"{_quoted(c)} = %s" for c in key) + ")")
        args += list(values)
    return "(" + " OR ".join(terms) + ")", args


def _after(key: Sequence[str], values: KeyValues) -> tuple[str, list[Any]]:
    return _ranges(key, values, above=True)


def _not_after(key: Sequence[str], values: KeyValues) -> tuple[str, list[Any]]:
    return _ranges(key, values, above=False)


def _from(table: SnapshotTable) -> str:
    return f"{_quoted(table.database)}.{_quoted(table.table)}"


def next_boundary(
    reader: BinlogReader, chunked: ChunkedTable, lower: KeyValues | None, rows: int
) -> KeyValues | None:
    """The upper bound of the chunk after ``lower``: its ``rows``-th key, or ``None``
    when fewer rows follow (the last chunk, unbounded, takes what comes later too)."""
    if not chunked.key or not chunked.splittable or rows <= 0:
        return None
    columns = ", ".join(_quoted(c) for c in chunked.key)
    where, args = ("", []) if lower is None else _after(chunked.key, lower)
    found = reader._sql(
        f"SELECT {columns} FROM {_from(chunked.table)}"
        + (f" WHERE {where}" if where else "")
        + f" ORDER BY {columns} LIMIT 1 OFFSET {int(rows) - 1}",
        args,
        doing=f"planning the next chunk of {chunked.name}",
    )
    return captured_values(chunked.table, chunked.key, found[0]) if found else None


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """One chunk as read: the position its rows are exact at, and the rows."""

    position: BinlogPosition
    taken: dt.datetime
    rows: Iterator[RowChange]


def read_chunk(
    reader: BinlogReader,
    chunked: ChunkedTable,
    lower: KeyValues | None,
    upper: KeyValues | None,
    *,
    where: str | None = None,
) -> Iterator[ChunkRead | RowChange]:
    """The rows of ``(lower, upper]`` (and ``where``), in key order, as snapshot rows.

    Yields one ``ChunkRead`` first (its ``rows`` is unused: the rows follow it),
    then the rows, streamed from an unbuffered cursor, so memory does not grow
    with the chunk. The consistent snapshot locks nothing.
    """
    table = chunked.table
    terms, args = [], []
    if lower is not None:
        sql, values = _after(chunked.key, lower)
        terms.append(sql)
        args += values
    if upper is not None:
        sql, values = _not_after(chunked.key, upper)
        terms.append(sql)
        args += values
    if where:
        terms.append(f"({where})")
    columns = ", ".join(_quoted(c) for c in table.columns)
    query = f"SELECT {columns} FROM {_from(table)}"
    if terms:
        query += " WHERE " + " AND ".join(terms)
    if chunked.key:
        query += " ORDER BY " + ", ".join(_quoted(c) for c in chunked.key)
    info = reader.server_info()
    connection = reader._connect(cursorclass=pymysql.cursors.SSCursor)
    try:
        position, taken = begin_consistent_snapshot(reader, connection)
        yield ChunkRead(position, taken, iter(()))
        with connection.cursor() as cursor:
            cursor.execute(query, args)
            read_natively(cursor)
            yield from snapshot_rows(
                table, iter(cursor), source=reader.spec.name, position=position,
                commit_time=taken, server_id=info.identity, first_index=0,
                op=Operation.SNAPSHOT,
            )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("COMMIT")
    except pymysql.err.MySQLError as exc:
        raise reader._translate(exc, doing=f"reading a chunk of {chunked.name}") from None
    finally:
        connection.close()


def key_to_json(values: KeyValues | None) -> list[Any] | None:
    """A chunk boundary as JSON (Spark offsets are JSON): each value tagged by type."""
    if values is None:
        return None
    out: list[Any] = []
    for value in values:
        if isinstance(value, bool | int):
            out.append(["i", int(value)])
        elif isinstance(value, Decimal):
            out.append(["d", str(value)])
        elif isinstance(value, dt.datetime):
            out.append(["t", value.isoformat()])
        elif isinstance(value, dt.date):
            out.append(["D", value.isoformat()])
        elif isinstance(value, bytes):
            out.append(["b", base64.b64encode(value).decode()])
        elif isinstance(value, str):
            out.append(["s", value])
        else:
            raise TypeError(f"a chunk key value of type {type(value).__name__} has no JSON form")
    return out


def key_from_json(data: list[Any] | None) -> KeyValues | None:
    if data is None:
        return None
    readers: dict[str, Any] = {
        "i": int, "d": Decimal, "t": dt.datetime.fromisoformat, "D": dt.date.fromisoformat,
        "b": base64.b64decode, "s": str,
    }  # fmt: skip
    return tuple(readers[tag](value) for tag, value in data)


__all__ = [
    "ChunkRead",
    "ChunkedTable",
    "KeyValues",
    "chunked_table",
    "key_from_json",
    "key_to_json",
    "next_boundary",
    "read_chunk",
]
