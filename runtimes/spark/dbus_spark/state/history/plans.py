"""A cluster member's history plans: written to ZooKeeper before they are read, so
the source's next owner can read again exactly what this one may have sent.

The merge (``dbus_spark.state.history``) holds a chunk's keys back to where the micro-
batch that read it ended, the same in every attempt of that batch. A runtime alone
gets that from Spark's offset log, which replays an interrupted batch as it was
planned. A source that moves goes to another runtime with another offset log, so
its owner writes each plan (the batch's end and its chunks) to ``plans/<source>``
first (``dbus_fn.coordination.PlanLog``), and reads no chunk it could not record.
A new owner takes the plans whose chunks are not in the committed history and
reads each again in a micro-batch capped at that plan's end, before anything new.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dbus_spark.state.history.records import HistoryTask, PlannedChunk, task_id


def _done(tasks: Mapping[str, HistoryTask], chunk: PlannedChunk) -> bool:
    task = tasks.get(chunk.task)
    return (
        task is None
        or task.run != chunk.run
        or any(upper == chunk.upper for upper, _, _ in task.done)
    )


def _tasks_of(section: Mapping[str, Any]) -> dict[str, HistoryTask]:
    tasks = (HistoryTask.from_json(t) for t in section.get("tasks", []))
    return {task_id(t.deployment, t.table): t for t in tasks}


def open_plans(plans: Sequence[Any], section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plans with a chunk that the committed history ``section`` does not have
    (a chunk of a task no longer there, or of an earlier run, counts as done)."""
    tasks = _tasks_of(section)
    return [
        plan for plan in plans
        if any(not _done(tasks, PlannedChunk.from_json(c)) for c in plan.get("chunks", []))
    ]  # fmt: skip


def replan(
    plans: Sequence[Any], tasks: Mapping[str, HistoryTask]
) -> tuple[dict[str, Any], list[PlannedChunk]] | None:
    """The first plan with chunks still to read again: its end (position JSON) and
    those chunks, in plan order."""
    for plan in plans:
        chunks = [PlannedChunk.from_json(c) for c in plan.get("chunks", [])]
        chunks = [c for c in chunks if not _done(tasks, c)]
        if chunks:
            return plan["end"], chunks
    return None


__all__ = ["open_plans", "replan"]
