"""History's state: what a deployment's sinks are brought up to its tables with.

``records`` says what a task, a replay and a chunk are; ``tasks`` holds what is
read for whom and how far it got (bootstrap, backfill, replay); ``plans`` is what
a cluster member records before it reads; ``queries`` asks the source for chunks
and keys; ``gate`` merges what is read with the live stream per key. The chunks
and replay parts are read on executors by ``dbus_spark.reads.history_chunks``; the
requests a runtime takes are ``dbus_spark.planning.requests``; the `dbus fn` history
commands are ``dbus_spark.interfaces.history``.
"""

from __future__ import annotations

from dbus_spark.state.history.gate import Gate
from dbus_spark.state.history.queries import chunked_of, plan_chunks
from dbus_spark.state.history.records import (
    ChunkDone,
    HistoryTask,
    PlannedChunk,
    Refusal,
    ReplayPart,
    progress_text,
    task_id,
)
from dbus_spark.state.history.tasks import HistoryStore

__all__ = [
    "ChunkDone",
    "Gate",
    "HistoryStore",
    "HistoryTask",
    "PlannedChunk",
    "Refusal",
    "ReplayPart",
    "chunked_of",
    "plan_chunks",
    "progress_text",
    "task_id",
]
