"""What history asks a source by SQL: the next chunks of a task, a backfill's
condition checked, the keys a repair names, whether a table is empty, how many
rows it holds."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from dbus_fn.capture import (
    BinlogReader,
    ChunkedTable,
    KeyValues,
    chunked_table,
    key_from_json,
    key_to_json,
    next_boundary,
)
from dbus_fn.errors import HistoryError, SourceError
from dbus_spark.state.history.records import PlannedChunk

if TYPE_CHECKING:
    from dbus_spark.state.history.records import HistoryTask


_NOT_IN_WHERE = re.compile(r";|--|/\*|#|\b(select|from|join|union|into|sleep|benchmark)\b", re.I)
_STRING = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"")


def check_where(reader: BinlogReader, table: str, where: str) -> None:
    """Refuse a condition that is not one boolean expression over ``table``'s own
    columns: a second statement, a subquery, another table, or what the server
    cannot parse."""
    bare = _STRING.sub("''", where)
    found = _NOT_IN_WHERE.search(bare)
    if not where.strip() or found:
        what = f"{found.group(0)!r}" if found else "nothing"
        raise HistoryError(
            f"--where {where!r} is not a condition on {table} alone (it has {what}); write "
            'an expression over the table\'s columns, e.g. --where "id > 1000"',
            table=table,
        )
    database, name = table.split(".", 1)
    quoted = ".".join("`" + part.replace("`", "``") + "`" for part in (database, name))
    try:
        reader._sql(f"EXPLAIN SELECT 1 FROM {quoted} WHERE ({where})", doing="checking --where")
    except SourceError as exc:
        raise HistoryError(
            f"--where {where!r} does not work on {table}: {exc}; fix the expression",
            table=table,
        ) from None


def key_of_text(text: str, columns: int) -> KeyValues | None:
    """The key values a sink's key text names: a JSON array (a Kafka key, a composite
    document id) or one plain value (a one-column document id)."""
    if text.startswith("["):
        try:
            values = json.loads(text)
        except ValueError:
            return None
        return tuple(values) if isinstance(values, list) and len(values) == columns else None
    return (text,) if columns == 1 else None


def keys_where(columns: Sequence[str], keys: Iterable[KeyValues]) -> str:
    """SQL that selects exactly these keys (values quoted by the client library)."""
    from pymysql.converters import escape_item

    names = ", ".join("`" + c.replace("`", "``") + "`" for c in columns)
    values = ", ".join(
        "(" + ", ".join(escape_item(v, "utf8mb4") for v in key) + ")" for key in keys
    )
    return f"({names}) IN ({values or '(NULL)'})"


def is_empty(reader: BinlogReader, table: str) -> bool:
    quoted = ".".join("`" + part.replace("`", "``") + "`" for part in table.split(".", 1))
    return not reader._sql(f"SELECT 1 FROM {quoted} LIMIT 1", doing=f"looking into {table}")


def estimated_rows(reader: BinlogReader, table: str) -> int:
    database, name = table.split(".", 1)
    found = reader._sql(
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_NAME = %s",
        (database, name),
        doing="estimating a table's rows",
    )
    return int(found[0][0] or 0) if found else 0


def plan_chunks(
    reader: BinlogReader, tasks: Iterable[HistoryTask], *, chunk_rows: int, budget: int
) -> list[PlannedChunk]:
    """The next chunks to read, at most ``budget``: in key order per task, each task's
    from where its last committed chunk ended, each of at most ``chunk_rows`` rows
    (fewer, when the task's chunks read slowly: ``HistoryTask.chunk_rows``)."""
    planned: list[PlannedChunk] = []
    for task in tasks:
        if task.planned_all:
            continue
        chunked = chunked_of(reader, task)
        lower = key_from_json(task.cursor)
        while len(planned) < budget:
            # A repair's few keys are one chunk: its where clause finds them by key.
            upper = (
                None if task.repair
                else next_boundary(reader, chunked, lower, task.chunk_rows(chunk_rows))
            )  # fmt: skip
            planned.append(PlannedChunk(task.id, key_to_json(lower), key_to_json(upper), task.run))
            if upper is None:
                break
            lower = upper
        if len(planned) >= budget:
            break
    return planned


def chunked_of(reader: BinlogReader, task: HistoryTask) -> ChunkedTable:
    database, name = task.table.split(".", 1)
    return chunked_table(reader, database, name, unchunked=task.unchunked)
