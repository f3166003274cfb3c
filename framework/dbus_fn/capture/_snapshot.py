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
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dbus_fn.events import BinlogPosition, Operation, Row, RowChange

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
) -> Iterator[RowChange]:
    """Each SELECTed row of ``table`` as an insert at the snapshot ``position``."""
    converters = [_converter(table.column_types[name]) for name in table.columns]
    index = first_index
    for values in rows:
        after = {
            name: (None if value is None else convert(value) if convert else value)
            for name, value, convert in zip(table.columns, values, converters, strict=True)
        }
        yield RowChange(
            source=source,
            database=table.database,
            table=table.table,
            op=Operation.INSERT,
            before=None,
            after=after,
            primary_key=table.primary_key,
            position=position,
            commit_time=commit_time,
            server_id=server_id,
            row_index=index,
            column_types=table.column_types,
        )
        index += 1


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
        name: binlog_column_type(kind, is_json=name in json_columns) for name, kind in columns
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
