"""History: a deployment's sinks brought up to its tables, and kept checkable.

``records`` says what a task, a replay and a chunk are; ``tasks`` holds what is
read for whom and how far it got (bootstrap, backfill, replay); ``plans`` is what
a cluster member records before it reads; ``queries`` asks the source for chunks
and keys; ``gate`` merges what is read with the live stream per key;
``partitions`` reads chunks and replay parts on executors; ``requests``,
``follow`` and ``target`` carry the `dbus fn` history commands to a running
runtime; ``verify`` and ``deadletters`` are those commands.
"""

from __future__ import annotations

from dbus_spark.history.gate import Gate
from dbus_spark.history.queries import chunked_of, plan_chunks
from dbus_spark.history.records import (
    ChunkDone,
    HistoryTask,
    PlannedChunk,
    progress_text,
    task_id,
)
from dbus_spark.history.tasks import HistoryStore, store_path

__all__ = [
    "ChunkDone",
    "Gate",
    "HistoryStore",
    "HistoryTask",
    "PlannedChunk",
    "chunked_of",
    "plan_chunks",
    "progress_text",
    "store_path",
    "task_id",
]
