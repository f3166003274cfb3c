"""The gate: which binlog changes of a table being read for a deployment it receives.

See ``dbus_spark.state.history.tasks`` for the merge this implements: a change of key
``k`` goes through only once ``k``'s chunk is read, and only if it is newer than
where the stream stood when that chunk was read (the end of its micro-batch).

In a cluster member, functions are deployed while the query runs: the stage may
run a new deployment (or a version with new tables) before the driver has
planned its history. Until it has (``considered``), the deployment receives
nothing of those tables: a change sent before its bootstrap began would stand in
its sink like a snapshot row that no gate protects, and a later delete the gate
holds back would never reach it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from datetime import date, datetime
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from dbus_fn.capture import key_from_json, key_to_json, position_from_json
from dbus_fn.columns import to_json_value
from dbus_fn.events import RowChange
from dbus_spark.state.records import position_order

if TYPE_CHECKING:
    from dbus_spark.state.history.records import HistoryTask


def _comparable(key: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """A chunk key whose dates compare with zero dates: a DATE or DATETIME is its
    text (``dbus_fn.columns``), in the server's order, as zero and partial dates,
    which capture holds as that text (``"2015-05-00"``), already are."""
    return None if key is None else tuple(_comparable_value(v) for v in key)


def _comparable_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else to_json_value(value, "datetime(6)")
    if isinstance(value, date):
        return to_json_value(value, "date")
    return value


class Gate:
    """Which binlog changes of a task's table its deployment receives (module docstring)."""

    def __init__(
        self, tasks: Iterable[HistoryTask], considered: Mapping[str, list[str]] | None = None
    ) -> None:
        self._considered = None if considered is None else dict(considered)
        """Per deployment, the table patterns whose history was planned (None: all)."""
        self._seen: dict[tuple[str, str], bool] = {}
        self._tasks: dict[tuple[str, str], tuple[tuple[str, ...], list[Any], list[int]]] = {}
        for task in tasks:
            uppers = [_comparable(key_from_json(upper)) for upper, _, _ in task.done]
            positions = [position_order(position_from_json(since)) for _, _, since in task.done]
            self._tasks[(task.deployment, task.table)] = (task.key, uppers, positions)

    def __bool__(self) -> bool:
        return bool(self._tasks) or self._considered is not None

    def tables(self) -> set[str]:
        return {table for _, table in self._tasks}

    def _considers(self, deployment: str, table: str) -> bool:
        assert self._considered is not None
        seen = self._seen.get((deployment, table))
        if seen is None:
            patterns = self._considered.get(deployment, ())
            seen = self._seen[(deployment, table)] = any(fnmatchcase(table, p) for p in patterns)
        return seen

    def admits(self, deployment: str, change: RowChange) -> bool:
        if self._considered is not None and not self._considers(
            deployment, change.qualified_table
        ):
            return False  # its history is not planned yet (module docstring)
        found = self._tasks.get((deployment, change.qualified_table))
        if found is None:
            return True
        key_columns, uppers, positions = found
        if not uppers:
            return False  # no chunk read yet: the first one holds this change
        row = change.row
        key = _comparable(tuple(row[column] for column in key_columns))
        # The first chunk whose upper bound is at or above the key (None: unbounded).
        bounded = len(uppers) - (1 if uppers[-1] is None else 0)
        index = bisect.bisect_left(uppers, key, 0, bounded)
        if index == len(uppers):
            return False  # past every chunk read so far: a later chunk holds it
        return position_order(change.position) > positions[index]

    def to_json(self) -> dict[str, Any]:
        return {
            "tasks": [
                [deployment, table, list(key), [key_to_json(u) for u in uppers], positions]
                for (deployment, table), (key, uppers, positions) in self._tasks.items()
            ],
            "considered": self._considered,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Gate:
        gate = cls((), data.get("considered"))
        for deployment, table, key, uppers, positions in data["tasks"]:
            gate._tasks[(deployment, table)] = (
                tuple(key),
                [_comparable(key_from_json(u)) for u in uppers],
                list(positions),
            )
        return gate


__all__ = ["Gate"]
