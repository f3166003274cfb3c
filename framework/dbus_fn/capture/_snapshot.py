"""The snapshot start: the tables as they are now, then the binlog from that moment.

MariaDB's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` pins both the rows a
transaction sees and the binlog position they correspond to
(``binlog_snapshot_file``/``binlog_snapshot_position``), without locking any
table; MySQL holds a global read lock for the moment it takes to start the
transaction and read the binlog's end (``begin_consistent_snapshot``). Every
row of every captured table is read inside that transaction and handed out as an
insert at the snapshot position; the binlog then continues from
exactly that position, so nothing is missed and nothing is read twice.

Values are turned into the forms capture documents (``dbus_fn.columns``), equal
to what the binlog decoder gives for the same row; column types are the declared
ones, named as the binlog decoder names them (``_declared_types``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pymysql
import pymysql.connections
import pymysql.cursors

from dbus_fn._zero_dates import DateKind, zero_date_from_select
from dbus_fn.capture._column_readers import vector_values
from dbus_fn.capture._positions import neutral_boundary
from dbus_fn.capture._reader_view import ReaderView
from dbus_fn.capture._table_map import VECTOR
from dbus_fn.capture._text_rows import read_natively
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    Row,
    RowChange,
    TransactionCommit,
)

log = logging.getLogger("dbus_fn.capture")

# PyMySQL decodes a value of a type it does not know as ASCII text; a VECTOR's
# (MySQL 9) is float32 bytes. Among its binary-capable types, a binary collation
# (which a VECTOR has) gives the bytes.
pymysql.connections.TEXT_TYPES.add(VECTOR)

@dataclass(frozen=True, slots=True)
class SnapshotTable:
    database: str
    table: str
    columns: tuple[str, ...]
    column_types: Row
    primary_key: tuple[str, ...]


_CALENDAR_KINDS: Mapping[str, DateKind] = {
    "date": "date",
    "datetime": "datetime",
    "timestamp": "timestamp",
}


def _calendar_value(kind: DateKind) -> Callable[[Any], Any]:
    """A SELECTed DATE/DATETIME/TIMESTAMP as capture holds it. PyMySQL returns a
    zero or partial date as SELECT's text (``"2015-05-00 10:11:12.500"``): it becomes
    the text the binlog decoder gives (``dbus_fn._zero_dates``)."""

    def convert(value: Any) -> Any:
        if isinstance(value, str):
            return zero_date_from_select(value, kind) or value
        if kind == "timestamp":
            return value.replace(tzinfo=UTC)
        return value

    return convert


def _set_value(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(part for part in value.split(",") if part)
    return frozenset(value)


def _converter(column_type: str) -> Callable[[Any], Any] | None:
    """How a SELECT value of this type becomes capture's value (None: as it is)."""
    base = column_type.split("(", 1)[0].split(" ", 1)[0]
    if base in _CALENDAR_KINDS:
        return _calendar_value(_CALENDAR_KINDS[base])
    if base == "set":
        return _set_value
    if base == "bit":
        return lambda v: int.from_bytes(v, "big")
    if base == "json":
        return json.loads
    if base == "vector":
        return vector_values
    return None


def captured_values(
    table: SnapshotTable, columns: Sequence[str], values: Sequence[Any]
) -> tuple[Any, ...]:
    """SELECTed values of ``columns`` of ``table`` as capture gives them (a chunk
    boundary is compared with binlog keys, so a zero date must be the same text)."""
    converted = []
    for name, value in zip(columns, values, strict=True):
        convert = _converter(table.column_types[name])
        converted.append(value if value is None or convert is None else convert(value))
    return tuple(converted)


def snapshot_rows(
    table: SnapshotTable,
    rows: Iterator[tuple[Any, ...]],
    *,
    source: str,
    position: BinlogPosition,
    commit_time: datetime,
    server_id: str,
    first_index: int,
    op: Operation = Operation.INSERT,
) -> Iterator[RowChange]:
    """Each SELECTed row of ``table`` as an ``op`` at the snapshot ``position``.

    Inserts are numbered from ``first_index``; snapshot rows all have index 0, as
    their key, not their place, tells them apart (see ``dbus_fn.cloudevent``).
    """
    converters = [_converter(table.column_types[name]) for name in table.columns]
    # A plain dict: each change copies its types, and a dict copies fastest.
    column_types = dict(table.column_types.items())
    index = first_index
    step = 0 if op is Operation.SNAPSHOT else 1
    for values in rows:
        after = {
            name: (None if value is None else convert(value) if convert else value)
            for name, value, convert in zip(table.columns, values, converters, strict=True)
        }
        yield RowChange(
            source=source,
            database=table.database,
            table=table.table,
            op=op,
            before=None,
            after=after,
            primary_key=table.primary_key,
            position=position,
            commit_time=commit_time,
            server_id=server_id,
            row_index=index,
            column_types=column_types,
        )
        index += step


def describe_table(
    database: str,
    table: str,
    columns: Sequence[tuple[str, str]],
    primary_key: list[str],
) -> SnapshotTable:
    """A table's columns (name, ``declared_type`` in order) and key, as capture names them."""
    names = tuple(name for name, _ in columns)
    types: Mapping[str, str] = dict(columns)
    return SnapshotTable(
        database=database,
        table=table,
        columns=names,
        column_types=Row(types),
        primary_key=tuple(primary_key),  # empty without one (RowChange.key: the row)
    )


__all__ = ["SnapshotTable", "captured_values", "describe_table", "snapshot_rows"]


def begin_consistent_snapshot(
    reader: ReaderView, connection: Any
) -> tuple[BinlogPosition, datetime]:
    """Start a consistent-snapshot transaction on ``connection``: what it reads from
    now on is the tables exactly as of the returned binlog position (and when).

    MariaDB gives the snapshot's binlog position with the snapshot. MySQL does not: a
    global read lock (``FLUSH TABLES WITH READ LOCK``, which waits for the writes
    under way) is held from just before the snapshot until its position and GTID set
    are read, a moment in which no commit can come between them."""
    info = reader.server_info()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        if info.is_mariadb:
            cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
            status = {str(k).lower(): str(v) for k, v in cursor.fetchall()}
            file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            # At once: the sooner after the snapshot, the likelier no commit came since,
            # and the GTID is read without scanning the binlog file (``gtid_at``).
            gtid = reader.gtid_at(file, pos)
        else:
            cursor.execute("FLUSH TABLES WITH READ LOCK")
            try:
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cursor.execute(info.binlog_status_sql)
                (row,) = cursor.fetchall()  # the connection's cursors are unbuffered
            finally:
                cursor.execute("UNLOCK TABLES")
            file, pos = str(row[0]), int(row[1])
            gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        (now,) = cursor.fetchall()[0]
    if reader.spec.fails_over:  # a source of several servers (``_positions``)
        return neutral_boundary(gtid), now.replace(tzinfo=UTC)
    return BinlogPosition(file, pos, gtid), now.replace(tzinfo=UTC)


def read_snapshot(reader: ReaderView) -> Iterator[CaptureItem]:
    """Every row of the captured tables as it is now, then where the binlog goes on.

    The rows are inserts at one position (the snapshot's), in table order; a
    ``TransactionCommit`` at that position ends the snapshot, so a reader that
    resumes from it misses nothing the snapshot did not hold. MariaDB's consistent
    snapshot gives rows and position together; MySQL's is taken under a global read
    lock held for a moment (``begin_consistent_snapshot``).
    """
    info = reader.server_info()
    tables = snapshot_tables(reader)
    connection = reader._connect(cursorclass=pymysql.cursors.SSCursor)
    try:
        position, taken = begin_consistent_snapshot(reader, connection)
        log.info("source %s: snapshot of %d table(s) at %s", reader.spec.name, len(tables),
                 position)  # fmt: skip
        count = 0
        for table in tables:
            columns = ", ".join(f"`{c.replace('`', '``')}`" for c in table.columns)
            quoted = ".".join(f"`{n.replace('`', '``')}`" for n in (table.database,
                                                                     table.table))  # fmt: skip
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT {columns} FROM {quoted}")
                read_natively(cursor)
                for change in snapshot_rows(
                    table, iter(cursor), source=reader.spec.name, position=position,
                    commit_time=taken, server_id=info.identity, first_index=count,
                ):  # fmt: skip
                    count += 1
                    yield change
        with connection.cursor() as cursor:
            cursor.execute("COMMIT")
    except pymysql.err.MySQLError as exc:
        raise reader._translate(exc, doing="taking a snapshot") from None
    finally:
        connection.close()
    yield TransactionCommit(
        source=reader.spec.name,
        position=position,
        commit_time=taken,
        server_id=info.identity,
        rows=count,
    )


def snapshot_tables(reader: ReaderView) -> list[SnapshotTable]:
    rows = reader._sql(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
        "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
        "('mysql', 'information_schema', 'performance_schema', 'sys') "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME",
        doing="listing tables for a snapshot",
    )
    return [
        table_description(reader, str(database), str(table))
        for database, table in rows
        if reader.spec.matches(str(database), str(table))
    ]


def table_description(reader: ReaderView, database: str, table: str) -> SnapshotTable:
    """One table's columns and key as capture names them."""
    columns = reader._declared_types_of(database, table, fresh=True)
    key = reader._sql(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
        doing="reading the primary key for a snapshot",
    )
    return describe_table(
        database,
        table,
        columns,
        [str(name) for (name,) in key],
    )
