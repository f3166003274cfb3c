"""What history work is made of: a task (one table read for one deployment), a
replay, a chunk as a micro-batch plans it and as its read reports it. Plain data,
kept in the ``HistoryStore`` (``tasks``) and carried in offsets and stage counts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import Any

from pydantic import model_serializer, model_validator
from pydantic.dataclasses import dataclass

from dbus_fn.capture import position_from_json
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.state.records import position_order

KeyJson = list[Any] | None

CHUNK_SECONDS = 0.75
"""How long a chunk's read should take (see ``HistoryTask.chunk_rows``)."""
FIRST_CHUNK_ROWS = 2_000
"""A task's first chunk, before its read rate is known."""
MIN_CHUNK_ROWS = 200
MAX_BACKOFF = 30.0
"""The longest wait before a read its deployment's sinks did not take is tried again."""


def backoff(failures: int) -> float:
    """Seconds before a read refused ``failures`` times in a row is tried again: 1 s,
    doubling up to ``MAX_BACKOFF``."""
    return min(MAX_BACKOFF, 2.0 ** (max(1, failures) - 1))


def task_id(deployment: str, table: str) -> str:
    return f"{deployment}:{table}"


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class PlannedChunk(JsonForm):
    """One chunk of one task, as a micro-batch's offset names it: in its JSON, the list
    ``[task, lower, upper, run]``, as offsets have always held it."""

    task: str
    lower: KeyJson
    upper: KeyJson
    run: int = 1

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, data: Any) -> Any:
        if isinstance(data, list | tuple):
            return dict(zip(("task", "lower", "upper", "run"), data, strict=False))
        return data

    @model_serializer
    def _as_list(self) -> list[Any]:
        return [self.task, self.lower, self.upper, self.run]


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class ChunkDone(JsonForm):
    """What a chunk's read reports to the driver: where its rows are exact, how many."""

    source: str
    task: str
    lower: KeyJson
    upper: KeyJson
    position: dict[str, Any]
    rows: int
    seq: int
    """Its place in the micro-batch's plan: chunks of one task are recorded in order."""
    run: int = 1
    since: dict[str, Any] = field(default_factory=dict)
    """The position the stream's micro-batch that read it ends at: the same in every
    attempt of that batch, and at or before every position the chunk was read at."""
    seconds: float = 0.0
    """How long its rows took past its first (read, through the functions, records
    out): what a chunk's size costs, without what every chunk costs however small
    (its query's start, its sinks' lane and transaction opened by its first record).
    0: a chunk of one row or none, which tells no rate."""

    @model_validator(mode="before")
    @classmethod
    def _since_position(cls, data: Any) -> Any:
        """Reported before it had ``since``: its own position stands in."""
        if isinstance(data, Mapping) and not data.get("since") and "position" in data:
            return {**data, "since": data["position"]}
        return data


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class ReplayPart(JsonForm):
    """What a replay part's read reports to the driver: where it started and stopped
    (a binlog position, or a Kafka source's offsets per topic), how many rows it
    sent, and whether it reached the replay's end."""

    source: str
    deployment: str
    run: int
    start: dict[str, Any]
    stop: dict[str, Any]
    rows: int
    ended: bool


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class Refusal(JsonForm):
    """A history read (a chunk, a replay part) its deployment's sinks did not take,
    and why: that deployment's history is read again after a backoff."""

    source: str
    deployment: str
    reason: str


@dataclass(config=JSON_FORM)
class HistoryTask(JsonForm):
    """One table of one deployment being (or having been) read, and how far it got."""

    deployment: str
    table: str
    key: tuple[str, ...]
    splittable: bool
    unchunked: bool = False
    done: list[tuple[KeyJson, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    """The chunks read, in key order: each one's upper bound, the position its rows
    are exact at, and the position the stream had reached when it was planned (what
    the gate holds changes back to; see ``gate``)."""
    rows: int = 0
    started: float = 0.0
    finished: float = 0.0
    """When its last chunk was read (0: not yet)."""
    live: bool = False
    """Finished, and the stream is past every chunk's position: no gate needed."""
    run: int = 1
    """Which read of this table for this deployment (a backfill starts a new one)."""
    where: str | None = None
    """A backfill's condition: only the rows it holds are read (and nothing is gated)."""
    estimated_rows: int = 0
    """The server's estimate of the table's rows when the task began (for an ETA)."""
    deletes: list[tuple[str, str]] = field(default_factory=list)
    """A repair's (destination, key text) pairs to delete if the read finds no such row."""
    repair: bool = False
    """A repair: a few keys, read as one chunk (``where`` names them)."""
    rate: float = 0.0
    """Rows per second its chunks were read at lately (0: none read yet)."""
    bootstrap: bool = False
    """A deployment's first read of the table, into sinks that hold nothing of it:
    the gate merges it with the stream. Any other read (a backfill, a repair) goes
    to sinks that already hold rows, where a change the gate held back could be a
    delete that no chunk sends again; so nothing is held back, and its chunks are
    read in micro-batches where the source's binlog does not move (see
    ``dbus_spark.planning.source``)."""

    @property
    def gated(self) -> bool:
        """Whether the live stream of the table waits for the chunks (see ``gate``):
        only for a bootstrap (see ``bootstrap``)."""
        return self.bootstrap and not self.live

    @property
    def id(self) -> str:
        return task_id(self.deployment, self.table)

    @property
    def kind(self) -> str:
        """What the read is for: ``bootstrap``, ``backfill`` or ``repair``."""
        return "repair" if self.repair else "bootstrap" if self.bootstrap else "backfill"

    @property
    def chunks(self) -> int:
        return len(self.done)

    @property
    def cursor(self) -> KeyJson:
        """Where the next chunk starts (the last upper bound read)."""
        return self.done[-1][0] if self.done else None

    @property
    def planned_all(self) -> bool:
        return bool(self.done) and self.done[-1][0] is None

    def chunk_rows(self, most: int) -> int:
        """Rows for its next chunk: as many as are read in about ``CHUNK_SECONDS`` at
        the rate its chunks' rows were read at so far, at most ``most``. A micro-batch
        ends with its slowest partition, so a chunk's read time is what the live stream
        waits for at worst. The rate leaves out what every chunk costs however small
        (``ChunkDone.seconds``): counted in, a chunk that costs more to open (an exactly
        once lane's transaction) read smaller and smaller chunks, more of them, and so
        more of that cost."""
        if self.rate <= 0:
            return min(most, FIRST_CHUNK_ROWS)
        return min(most, max(MIN_CHUNK_ROWS, int(self.rate * CHUNK_SECONDS)))

    def highest_position(self) -> int:
        return max((position_order(position_from_json(s)) for _, _, s in self.done), default=0)

    @model_validator(mode="before")
    @classmethod
    def _bootstrap_then(cls, data: Any) -> Any:
        """Written before ``bootstrap`` was: a task was one when it was the first read
        of its table, of every row, and no repair."""
        if isinstance(data, Mapping) and "bootstrap" not in data:
            first = int(data.get("run", 1)) == 1 and data.get("where") is None
            return {**data, "bootstrap": first and not data.get("repair")}
        return data


@dataclass(config=JSON_FORM)
class ReplayTask(JsonForm):
    """One deployment's current version run again over a range of retained binlog."""

    deployment: str
    start: dict[str, Any]
    """Where the replay starts (exclusive), as position JSON."""
    end: dict[str, Any]
    """Where it ends (inclusive): a position, at most the source's end when asked."""
    route: str | None = None
    """Every delivery goes here instead (a shadow topic, say); None: the deployment's own."""
    since: float | None = None
    """Only transactions committed at or after this time (epoch seconds)."""
    until: float | None = None
    """Only transactions committed at or before this time."""
    cursor: dict[str, Any] | None = None
    """Where the last committed part of the replay stopped."""
    rows: int = 0
    run: int = 1
    started: float = 0.0
    finished: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.deployment}:replay"


def progress_text(tasks: Iterable[HistoryTask | ReplayTask]) -> dict[str, str]:
    """Per task, what the batch log shows: rows (and chunks) read, or done."""
    return {
        task.id: f"{task.rows} rows"
        + (f", {task.chunks} chunks" if isinstance(task, HistoryTask) else "")
        + (", done" if task.finished else "")
        for task in tasks
    }


__all__ = [
    "CHUNK_SECONDS",
    "MAX_BACKOFF",
    "ChunkDone",
    "HistoryTask",
    "KeyJson",
    "PlannedChunk",
    "Refusal",
    "ReplayPart",
    "ReplayTask",
    "backoff",
    "progress_text",
    "task_id",
]
