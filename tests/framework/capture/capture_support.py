"""Helpers shared by the capture tests."""

from __future__ import annotations

from typing import Any

from dbus_fn import BinlogPosition, RowChange, SchemaChange, TransactionCommit
from dbus_fn.capture import BinlogReader


def execute(connection: Any, *statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def read_all(
    reader: BinlogReader, start: str | BinlogPosition, stop: BinlogPosition | None = None
) -> list[Any]:
    """Every item from ``start`` up to the source's current end (or ``stop``)."""
    end = stop or reader.master_position()
    return list(reader.read(start, stop=end, idle_timeout=10))


def rows(items: list[Any]) -> list[RowChange]:
    return [item for item in items if isinstance(item, RowChange)]


def commits(items: list[Any]) -> list[TransactionCommit]:
    return [item for item in items if isinstance(item, TransactionCommit)]


def schema_changes(items: list[Any]) -> list[SchemaChange]:
    return [item for item in items if isinstance(item, SchemaChange)]


def row_ids(items: list[Any], column: str = "id") -> list[tuple[str, Any]]:
    return [(change.op.value, change.row[column]) for change in rows(items)]
