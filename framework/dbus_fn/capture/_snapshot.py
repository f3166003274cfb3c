"""The snapshot start: the tables as they are now, then the binlog from that moment.

MariaDB's ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` pins both the rows a
transaction sees and the binlog position they correspond to
(``binlog_snapshot_file``/``binlog_snapshot_position``), without locking any
table. Every row of every captured table is read inside that transaction and
handed out as an insert at the snapshot position; the binlog then continues from
exactly that position, so nothing is missed and nothing is read twice.

Values are turned into the forms capture documents (``dbus_fn.columns``), equal
to what the binlog decoder gives for the same row; column types are the
binlog's (integer display widths dropped, MariaDB JSON recognised by its check).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pymysql
import pymysql.cursors

from dbus_fn.errors import PositionError
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    Row,
    RowChange,
    TransactionCommit,
)

if TYPE_CHECKING:
    from dbus_fn.capture._reader import BinlogReader

log = logging.getLogger("dbus_fn.capture")

_DISPLAY_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|bigint|year)\(\d+\)")


@dataclass(frozen=True, slots=True)
class SnapshotTable:
    database: str
    table: str
    columns: tuple[str, ...]
    column_types: Row
    primary_key: tuple[str, ...]


def binlog_column_type(column_type: str, *, is_json: bool) -> str:
    """information_schema's COLUMN_TYPE in the form the binlog decoder names it."""
    if is_json:
        return "json"
    return _DISPLAY_WIDTH.sub(r"\1", column_type.strip().lower())


def _zero_date_as_none(value: Any) -> Any:
    # A zero date (0000-00-00) comes back as text; capture documents it as None.
    return None if isinstance(value, str) else value


def _set_value(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset(part for part in value.split(",") if part)
    return frozenset(value)


def _converter(column_type: str) -> Callable[[Any], Any] | None:
    """How a SELECT value of this type becomes capture's value (None: as it is)."""
    base = column_type.split("(", 1)[0].split(" ", 1)[0]
    if base == "timestamp":
        return lambda v: v.replace(tzinfo=UTC) if isinstance(v, datetime) else None
    if base in ("date", "datetime"):
        return _zero_date_as_none
    if base == "set":
        return _set_value
    if base == "bit":
        return lambda v: int.from_bytes(v, "big")
    if base == "json":
        return json.loads
    return None


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
            column_types=table.column_types,
        )
        index += step


def describe_table(
    database: str,
    table: str,
    columns: list[tuple[str, str]],
    primary_key: list[str],
    json_columns: frozenset[str],
) -> SnapshotTable:
    """A table's columns (name, COLUMN_TYPE in order) and key, as capture names them."""
    names = tuple(name for name, _ in columns)
    types: Mapping[str, str] = {
        name: binlog_column_type(declared, is_json=name in json_columns)
        for name, declared in columns
    }
    return SnapshotTable(
        database=database,
        table=table,
        columns=names,
        column_types=Row(types),
        # Capture's documented choice for a table without a primary key: all columns.
        primary_key=tuple(primary_key) if primary_key else names,
    )


__all__ = ["SnapshotTable", "binlog_column_type", "describe_table", "snapshot_rows"]


def begin_consistent_snapshot(
    reader: BinlogReader, connection: Any
) -> tuple[BinlogPosition, datetime]:
    """Start a consistent-snapshot transaction on ``connection``: what it reads from
    now on is the tables exactly as of the returned binlog position (and when)."""
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
        status = {str(k).lower(): str(v) for k, v in cursor.fetchall()}
        cursor.execute("SELECT UTC_TIMESTAMP(6)")
        (now,) = cursor.fetchall()[0]
    file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
    return BinlogPosition(file, pos, reader._gtid_at(file, pos)), now.replace(tzinfo=UTC)


def read_snapshot(reader: BinlogReader) -> Iterator[CaptureItem]:
    """Every row of the captured tables as it is now, then where the binlog goes on.

    The rows are inserts at one position (the snapshot's), in table order; a
    ``TransactionCommit`` at that position ends the snapshot, so a reader that
    resumes from it misses nothing the snapshot did not hold. No table is
    locked: MariaDB's consistent snapshot gives rows and position together.
    """
    info = reader.server_info()
    if not info.is_mariadb:
        raise PositionError(
            f"source {reader.spec.name!r}: a snapshot start needs MariaDB's consistent "
            "snapshot position, which this server does not give; use --from earliest "
            "or --from latest",
            source=reader.spec.name,
            position="snapshot",
            choices=("earliest", "latest"),
        )
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


def snapshot_tables(reader: BinlogReader) -> list[SnapshotTable]:
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


def table_description(reader: BinlogReader, database: str, table: str) -> SnapshotTable:
    """One table's columns and key as capture names them."""
    columns = reader._sql(
        "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
        doing="reading columns for a snapshot",
    )
    key = reader._sql(
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
        doing="reading the primary key for a snapshot",
    )
    return describe_table(
        database,
        table,
        [(str(name), str(declared)) for name, declared in columns],
        [str(name) for (name,) in key],
        reader._json_columns_of(database, table),
    )
