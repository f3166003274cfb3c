"""History: a deployment's sinks brought up to its tables' current state (bootstrap).

A *history task* is one table read for one deployment: every row, in chunks of
its key (``dbus_fn.capture.read_chunk``), through that deployment's functions
only, as ``snapshot`` rows. Chunks are Spark input partitions of the same
micro-batches that carry the binlog, so the live stream never stops.

The merge with the live stream is exact per key. A chunk is read in a consistent
snapshot at binlog position ``P``: its rows hold every change up to ``P``. So for
the deployment and table of a task, a binlog change of key ``k`` goes through
(the ``Gate``) only when ``k``'s chunk is done and the change is after that
chunk's ``P``; before the chunk is done the change is dropped, because the chunk,
read later, holds it. A snapshot row is thus never sent after a newer change of
its key (micro-batches are written one after the other), and a row deleted
before its chunk is read is never brought back. This holds for Kafka's
last-value-per-key as for Elasticsearch, whose versions also order them.

Progress lives in the ``HistoryStore``, a file beside the checkpoint, written by
the driver when a micro-batch commits (chunks done, with their positions) and
when deployments are first seen (the tasks to run). A runtime killed mid-task
replays its uncommitted batch and goes on from the last committed chunk.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from dbus_fn.capture import (
    BinlogReader,
    ChunkedTable,
    chunked_table,
    key_from_json,
    key_to_json,
    next_boundary,
    position_from_json,
)
from dbus_fn.capture._snapshot import snapshot_tables
from dbus_fn.errors import HistoryError
from dbus_fn.events import BinlogPosition, RowChange
from dbus_fn.manifest import Manifest
from dbus_spark.sinks.records import document_version

log = logging.getLogger("dbus.runtime")

KeyJson = list[Any] | None


def position_order(position: BinlogPosition) -> int:
    """An integer that orders binlog positions (file number, then offset)."""
    return document_version(position, 0)


def task_id(deployment: str, table: str) -> str:
    return f"{deployment}:{table}"


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """One chunk of one task, as a micro-batch's offset names it."""

    task: str
    lower: KeyJson
    upper: KeyJson

    def to_json(self) -> list[Any]:
        return [self.task, self.lower, self.upper]

    @classmethod
    def from_json(cls, data: list[Any]) -> PlannedChunk:
        return cls(data[0], data[1], data[2])


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """What a chunk's read reports to the driver: where its rows are exact, how many."""

    source: str
    task: str
    lower: KeyJson
    upper: KeyJson
    position: dict[str, Any]
    rows: int
    seq: int
    """Its place in the micro-batch's plan: chunks of one task are recorded in order."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "task": self.task, "lower": self.lower,
            "upper": self.upper, "position": self.position, "rows": self.rows,
            "seq": self.seq,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChunkDone:
        return cls(
            data["source"], data["task"], data["lower"], data["upper"], data["position"],
            int(data["rows"]), int(data["seq"]),
        )  # fmt: skip


@dataclass
class HistoryTask:
    """One table of one deployment being (or having been) read, and how far it got."""

    deployment: str
    table: str
    key: tuple[str, ...]
    splittable: bool
    unchunked: bool = False
    done: list[tuple[KeyJson, dict[str, Any]]] = field(default_factory=list)
    """The chunks read, in key order: each one's upper bound and position."""
    rows: int = 0
    started: float = 0.0
    finished: float = 0.0
    """When its last chunk was read (0: not yet)."""
    live: bool = False
    """Finished, and the stream is past every chunk's position: no gate needed."""

    @property
    def id(self) -> str:
        return task_id(self.deployment, self.table)

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

    def highest_position(self) -> int:
        return max((position_order(position_from_json(p)) for _, p in self.done), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment, "table": self.table, "key": list(self.key),
            "splittable": self.splittable, "unchunked": self.unchunked,
            "done": [[upper, position] for upper, position in self.done], "rows": self.rows,
            "started": self.started, "finished": self.finished, "live": self.live,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryTask:
        return cls(
            deployment=data["deployment"],
            table=data["table"],
            key=tuple(data["key"]),
            splittable=bool(data["splittable"]),
            unchunked=bool(data.get("unchunked", False)),
            done=[(upper, position) for upper, position in data.get("done", [])],
            rows=int(data.get("rows", 0)),
            started=float(data.get("started", 0.0)),
            finished=float(data.get("finished", 0.0)),
            live=bool(data.get("live", False)),
        )


class HistoryStore:
    """The history tasks of one runtime, per source, in a private JSON file.

    Only the driver writes it: when deployments are first seen (``consider``),
    when a micro-batch commits (``record``) and when a task needs no gate any more.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._tasks: dict[str, dict[str, HistoryTask]] = {}
        self._considered: dict[str, dict[str, list[str]]] = {}
        self._mtime = -1.0
        self.reload()

    def reload(self) -> None:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == self._mtime:
            return
        data = json.loads(self.path.read_text())
        self._tasks = {
            source: {t["deployment"] + ":" + t["table"]: HistoryTask.from_json(t) for t in tasks}
            for source, tasks in data.get("tasks", {}).items()
        }
        self._considered = data.get("considered", {})
        self._mtime = mtime

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "tasks": {
                source: [task.to_json() for task in tasks.values()]
                for source, tasks in self._tasks.items()
            },
            "considered": self._considered,
        }
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(partial, self.path)
        self._mtime = self.path.stat().st_mtime

    def tasks(self, source: str) -> dict[str, HistoryTask]:
        return self._tasks.get(source, {})

    def active(self, source: str) -> list[HistoryTask]:
        """The tasks whose binlog changes still need the gate."""
        return [task for task in self.tasks(source).values() if not task.live]

    def consider(self, reader: BinlogReader, deployments: Iterable[Manifest]) -> list[HistoryTask]:
        """Start a task for every table a deployment asks history of and was not asked
        before: at its first run, every existing table it subscribes to; for a new
        version, the tables only its new patterns match. Returns the new tasks."""
        source = reader.spec.name
        considered = self._considered.setdefault(source, {})
        pending = [m for m in deployments if set(m.tables) - set(considered.get(m.name, []))]
        if not pending:
            return []
        existing: list[str] | None = None
        tasks = self._tasks.setdefault(source, {})
        created = []
        for manifest in pending:
            old = considered.get(manifest.name, [])
            considered[manifest.name] = sorted(set(old) | set(manifest.tables))
            if manifest.initial != "snapshot" or (
                manifest.sources and source not in manifest.sources
            ):
                continue
            if existing is None:  # the source's captured tables, as they are now
                existing = [f"{t.database}.{t.table}" for t in snapshot_tables(reader)]
            for table in existing:
                new = any(fnmatchcase(table, p) for p in manifest.tables)
                if not new or any(fnmatchcase(table, p) for p in old):
                    continue
                if task_id(manifest.name, table) in tasks:
                    continue
                database, name = table.split(".", 1)
                try:
                    chunked = chunked_table(reader, database, name)
                except HistoryError as exc:
                    raise HistoryError(
                        f"deployment {manifest.name!r} cannot be bootstrapped: {exc}; or set "
                        'initial = "none" in its dbus.toml',
                        table=table,
                    ) from None
                task = HistoryTask(
                    manifest.name, table, chunked.key, chunked.splittable, started=time.time()
                )
                tasks[task.id] = task
                created.append(task)
                log.info("history: bootstrapping %s for deployment %s", table, manifest.name)
        self.save()
        return created

    def record(self, done: Iterable[ChunkDone]) -> None:
        """Chunks a committed micro-batch read: they join their tasks' progress."""
        changed = False
        for chunk in sorted(done, key=lambda c: (c.source, c.seq)):
            task = self.tasks(chunk.source).get(chunk.task)
            if task is None:
                continue
            if task.cursor != chunk.lower or task.planned_all:
                # A replayed batch's chunk already recorded: its newer position wins.
                for i, (upper, _) in enumerate(task.done):
                    if upper == chunk.upper:
                        task.done[i] = (upper, chunk.position)
                        changed = True
                continue
            task.done.append((chunk.upper, chunk.position))
            task.rows += chunk.rows
            if chunk.upper is None:
                task.finished = time.time()
                log.info(
                    "history: %s of deployment %s read: %d rows in %d chunks",
                    task.table, task.deployment, task.rows, task.chunks,
                )  # fmt: skip
            changed = True
        if changed:
            self.save()

    def settle(self, source: str, read_to: BinlogPosition) -> None:
        """Tasks whose every chunk is older than what the stream has read need no gate."""
        changed = False
        for task in self.active(source):
            if task.planned_all and task.highest_position() <= position_order(read_to):
                task.live = True
                changed = True
        if changed:
            self.save()


def plan_chunks(
    reader: BinlogReader, tasks: Iterable[HistoryTask], *, chunk_rows: int, budget: int
) -> list[PlannedChunk]:
    """The next chunks to read, at most ``budget``: in key order per task, each task's
    from where its last committed chunk ended."""
    planned: list[PlannedChunk] = []
    for task in tasks:
        if task.planned_all:
            continue
        chunked = chunked_of(reader, task)
        lower = key_from_json(task.cursor)
        while len(planned) < budget:
            upper = next_boundary(reader, chunked, lower, chunk_rows)
            planned.append(PlannedChunk(task.id, key_to_json(lower), key_to_json(upper)))
            if upper is None:
                break
            lower = upper
        if len(planned) >= budget:
            break
    return planned


def chunked_of(reader: BinlogReader, task: HistoryTask) -> ChunkedTable:
    database, name = task.table.split(".", 1)
    return chunked_table(reader, database, name, unchunked=task.unchunked)


class Gate:
    """Which binlog changes of a task's table its deployment receives (module docstring)."""

    def __init__(self, tasks: Iterable[HistoryTask]) -> None:
        self._tasks: dict[tuple[str, str], tuple[tuple[str, ...], list[Any], list[int]]] = {}
        for task in tasks:
            uppers = [key_from_json(upper) for upper, _ in task.done]
            positions = [position_order(position_from_json(p)) for _, p in task.done]
            self._tasks[(task.deployment, task.table)] = (task.key, uppers, positions)

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def tables(self) -> set[str]:
        return {table for _, table in self._tasks}

    def admits(self, deployment: str, change: RowChange) -> bool:
        found = self._tasks.get((deployment, change.qualified_table))
        if found is None:
            return True
        key_columns, uppers, positions = found
        if not uppers:
            return False  # no chunk read yet: the first one holds this change
        row = change.row
        key = tuple(row[column] for column in key_columns)
        # The first chunk whose upper bound is at or above the key (None: unbounded).
        bounded = len(uppers) - (1 if uppers[-1] is None else 0)
        index = bisect.bisect_left(uppers, key, 0, bounded)
        if index == len(uppers):
            return False  # past every chunk read so far: a later chunk holds it
        return position_order(change.position) > positions[index]

    def to_json(self) -> list[Any]:
        return [
            [deployment, table, list(key), [key_to_json(u) for u in uppers], positions]
            for (deployment, table), (key, uppers, positions) in self._tasks.items()
        ]

    @classmethod
    def from_json(cls, data: list[Any]) -> Gate:
        gate = cls(())
        for deployment, table, key, uppers, positions in data:
            gate._tasks[(deployment, table)] = (
                tuple(key),
                [key_from_json(u) for u in uppers],
                list(positions),
            )
        return gate


def progress_text(tasks: Iterable[HistoryTask]) -> dict[str, str]:
    """Per task, what the batch log shows: rows and chunks read, or done."""
    return {
        task.id: f"{task.rows} rows, {task.chunks} chunks" + (", done" if task.finished else "")
        for task in tasks
    }


__all__ = [
    "ChunkDone",
    "Gate",
    "HistoryStore",
    "HistoryTask",
    "PlannedChunk",
    "chunked_of",
    "plan_chunks",
    "position_order",
    "progress_text",
    "store_path",
    "task_id",
]


def store_path(checkpoint_dir: str) -> Path:
    """Where a runtime's history progress lives: beside its checkpoint."""
    checkpoint = Path(checkpoint_dir)
    return checkpoint.parent / f"{checkpoint.name}.history.json"
