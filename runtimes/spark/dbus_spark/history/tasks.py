"""History tasks: which tables are read for which deployment, and how far each got.

A deployment's sinks are brought up to its tables' current state (bootstrap).

A *history task* is one table read for one deployment: every row, in chunks of
its key (``dbus_fn.capture.read_chunk``), through that deployment's functions
only, as ``snapshot`` rows. Chunks are Spark input partitions of the same
micro-batches that carry the binlog, so the live stream never stops.

The merge with the live stream is exact per key, also when a read is retried.
A chunk is read in a consistent snapshot at binlog position ``P``, during a
micro-batch whose binlog part ends at ``E`` (fixed when the batch is planned, so
``E <= P`` in every attempt of the batch). For the deployment and table of a
task, a binlog change of key ``k`` goes through (the ``Gate``) only when ``k``'s
chunk is done and the change is after that chunk's ``E``; before, the change is
dropped, because every read of the chunk holds it. So a snapshot row is never
sent after a newer change of its key (micro-batches are written one after the
other), and a row deleted before its chunk is read is never brought back, not
even when a killed attempt had sent it: its delete, after ``E``, follows. Changes
between ``E`` and ``P`` are sent after the snapshot row that already holds them
(at least once); Elasticsearch's versions keep the newer document, and Kafka's
last value per key ends equal to the row.

Progress lives in the ``HistoryStore``, a file beside the checkpoint, written by
the driver when a micro-batch commits (chunks done, with their positions) and
when deployments are first seen (the tasks to run). A runtime killed mid-task
replays its uncommitted batch and goes on from the last committed chunk.
"""

from __future__ import annotations

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
    chunked_table,
    key_from_json,
    position_from_json,
)
from dbus_fn.capture._snapshot import snapshot_tables
from dbus_fn.errors import HistoryError
from dbus_fn.events import BinlogPosition
from dbus_fn.manifest import Manifest
from dbus_spark.history.gate import position_order
from dbus_spark.history.queries import (
    check_where,
    chunked_of,
    estimated_rows,
    is_empty,
    key_of_text,
    keys_where,
    plan_chunks,
)

log = logging.getLogger("dbus.runtime")

KeyJson = list[Any] | None

CHUNK_SECONDS = 0.75
"""How long a chunk's read should take (see ``HistoryTask.chunk_rows``)."""
FIRST_CHUNK_ROWS = 2_000
"""A task's first chunk, before its read rate is known."""
MIN_CHUNK_ROWS = 200


def task_id(deployment: str, table: str) -> str:
    return f"{deployment}:{table}"


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """One chunk of one task, as a micro-batch's offset names it."""

    task: str
    lower: KeyJson
    upper: KeyJson
    run: int = 1

    def to_json(self) -> list[Any]:
        return [self.task, self.lower, self.upper, self.run]

    @classmethod
    def from_json(cls, data: list[Any]) -> PlannedChunk:
        return cls(data[0], data[1], data[2], int(data[3]))


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
    run: int = 1
    since: dict[str, Any] = field(default_factory=dict)
    """The position the stream's micro-batch that read it ends at: the same in every
    attempt of that batch, and at or before every position the chunk was read at."""
    seconds: float = 0.0
    """How long its read took (rows through the functions, records out)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "task": self.task, "lower": self.lower,
            "upper": self.upper, "position": self.position, "rows": self.rows,
            "seq": self.seq, "run": self.run, "since": self.since, "seconds": self.seconds,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChunkDone:
        return cls(
            data["source"], data["task"], data["lower"], data["upper"], data["position"],
            int(data["rows"]), int(data["seq"]), int(data.get("run", 1)),
            data.get("since") or data["position"], float(data.get("seconds", 0.0)),
        )  # fmt: skip


@dataclass
class HistoryTask:
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
    ``dbus_spark.source``)."""

    @property
    def gated(self) -> bool:
        """Whether the live stream of the table waits for the chunks (see ``gate``):
        only for a bootstrap (see ``bootstrap``)."""
        return self.bootstrap and not self.live

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

    def chunk_rows(self, most: int) -> int:
        """Rows for its next chunk: as many as are read in about ``CHUNK_SECONDS`` at
        the rate its chunks were read at so far, at most ``most``. A micro-batch ends
        with its slowest partition, so a chunk's read time is what the live stream
        waits for at worst."""
        if self.rate <= 0:
            return min(most, FIRST_CHUNK_ROWS)
        return min(most, max(MIN_CHUNK_ROWS, int(self.rate * CHUNK_SECONDS)))

    def highest_position(self) -> int:
        return max((position_order(position_from_json(s)) for _, _, s in self.done), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment, "table": self.table, "key": list(self.key),
            "splittable": self.splittable, "unchunked": self.unchunked,
            "done": [list(chunk) for chunk in self.done], "rows": self.rows,
            "started": self.started, "finished": self.finished, "live": self.live,
            "run": self.run, "where": self.where, "estimated_rows": self.estimated_rows,
            "deletes": [list(d) for d in self.deletes], "repair": self.repair,
            "rate": self.rate, "bootstrap": self.bootstrap,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryTask:
        return cls(
            deployment=data["deployment"],
            table=data["table"],
            key=tuple(data["key"]),
            splittable=bool(data["splittable"]),
            unchunked=bool(data.get("unchunked", False)),
            done=[(upper, position, since) for upper, position, since in data.get("done", [])],
            rows=int(data.get("rows", 0)),
            started=float(data.get("started", 0.0)),
            finished=float(data.get("finished", 0.0)),
            live=bool(data.get("live", False)),
            run=int(data.get("run", 1)),
            where=data.get("where"),
            estimated_rows=int(data.get("estimated_rows", 0)),
            deletes=[(d[0], d[1]) for d in data.get("deletes", [])],
            repair=bool(data.get("repair", False)),
            rate=float(data.get("rate", 0.0)),
            bootstrap=bool(data.get("bootstrap", (
                int(data.get("run", 1)) == 1 and data.get("where") is None
                and not data.get("repair")
            ))),
        )  # fmt: skip


@dataclass
class ReplayTask:
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

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment, "start": self.start, "end": self.end,
            "route": self.route, "since": self.since, "until": self.until,
            "cursor": self.cursor, "rows": self.rows, "run": self.run,
            "started": self.started, "finished": self.finished,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReplayTask:
        return cls(**{k: data.get(k) for k in (
            "deployment", "start", "end", "route", "since", "until", "cursor")},
            rows=int(data.get("rows", 0)), run=int(data.get("run", 1)),
            started=float(data.get("started", 0.0)), finished=float(data.get("finished", 0.0)),
        )  # fmt: skip


class HistoryStore:
    """The history tasks of one runtime, per source, in a private JSON file.

    Only the driver writes it: when deployments are first seen (``consider``),
    when a micro-batch commits (``record``) and when a task needs no gate any more.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._tasks: dict[str, dict[str, HistoryTask]] = {}
        self._considered: dict[str, dict[str, list[str]]] = {}
        self._replays: dict[str, dict[str, ReplayTask]] = {}
        self._adopted: dict[str, str] = {}
        self._from_binlog: set[str] = set()
        self._replans: dict[str, list[dict[str, Any]]] = {}
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
        sources = set(data.get("tasks", {})) | set(data.get("considered", {})) | set(
            data.get("replays", {})
        )
        self._tasks, self._considered, self._replays = {}, {}, {}
        for source in sources:
            self._load_section(source, {
                "tasks": data.get("tasks", {}).get(source, []),
                "considered": data.get("considered", {}).get(source, {}),
                "replays": data.get("replays", {}).get(source, []),
            })  # fmt: skip
        self._adopted = data.get("adopted", {})
        self._mtime = mtime

    def _load_section(self, source: str, section: Mapping[str, Any]) -> None:
        self._tasks[source] = {
            task_id(t["deployment"], t["table"]): HistoryTask.from_json(t)
            for t in section.get("tasks", [])
        }
        self._considered[source] = dict(section.get("considered", {}))
        self._replays[source] = {
            r["deployment"]: ReplayTask.from_json(r) for r in section.get("replays", [])
        }

    def section(self, source: str) -> dict[str, Any]:
        """Everything about ``source`` (its tasks, replays and the deployments whose
        tables were considered), as JSON: what a cluster commits with its position."""
        return {
            "tasks": [task.to_json() for task in self.tasks(source).values()],
            "considered": self._considered.get(source, {}),
            "replays": [replay.to_json() for replay in self.replays(source).values()],
        }

    def adopt(self, source: str, token: str, section: Mapping[str, Any]) -> bool:
        """Take ``source``'s history as its last owner committed it (a cluster member
        that gained the source), once per gain (``token``). A section marked
        ``from_binlog`` (a source first read from a given position) notes the
        deployments there now and reads nothing for them (see ``consider``)."""
        if self._adopted.get(source) == token:
            return False
        self._load_section(source, section)
        if section.get("from_binlog"):
            self._from_binlog.add(source)
        self._replans[source] = list(section.get("plans", []))
        self._adopted[source] = token
        self.save()
        log.info("history: %s's history taken over from its last owner: %s", source,
                 progress_text(self.active(source)) or "nothing being read")  # fmt: skip
        return True

    def next_replan(self, source: str) -> tuple[dict[str, Any], list[PlannedChunk]] | None:
        """What the source's last owner planned and may have sent, not committed: the
        first such plan's end and chunks, to read again now (``history.plans``)."""
        from dbus_spark.history.plans import replan

        plans = self._replans.get(source, [])
        found = replan(plans, self.tasks(source))
        if found is None:
            self._replans.pop(source, None)
        return found

    def replanned(self, source: str) -> None:
        """The first open plan was planned again: drop it."""
        from dbus_spark.history.plans import replan

        plans = self._replans.get(source, [])
        while plans and replan(plans[:1], self.tasks(source)) is None:
            plans.pop(0)
        if plans:
            plans.pop(0)

    def adopted(self, source: str) -> str | None:
        """Which gain of ``source`` this store took over last (see ``adopt``)."""
        return self._adopted.get(source)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "tasks": {
                source: [task.to_json() for task in tasks.values()]
                for source, tasks in self._tasks.items()
            },
            "considered": self._considered,
            "replays": {
                source: [replay.to_json() for replay in replays.values()]
                for source, replays in self._replays.items()
            },
            "adopted": self._adopted,
        }
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(partial, self.path)
        self._mtime = self.path.stat().st_mtime

    def tasks(self, source: str) -> dict[str, HistoryTask]:
        return self._tasks.get(source, {})

    def considered(self, source: str) -> dict[str, list[str]]:
        """Per deployment, the table patterns whose history was planned on ``source``."""
        return dict(self._considered.get(source, {}))

    def replays(self, source: str) -> dict[str, ReplayTask]:
        return self._replays.get(source, {})

    def replay(self, source: str, replay: ReplayTask) -> ReplayTask:
        """Start ``replay`` (checked by the caller); refused while one of the deployment runs."""
        running = self.replays(source).get(replay.deployment)
        if running is not None and not running.finished:
            raise HistoryError(
                f"a replay of {replay.deployment!r} is running ({running.rows} rows so far); "
                "wait for it to end, then ask again"
            )
        replay.run = (running.run + 1) if running else 1
        replay.started = time.time()
        replay.cursor = replay.start
        self._replays.setdefault(source, {})[replay.deployment] = replay
        self.save()
        return replay

    def record_replays(self, parts: Iterable[Mapping[str, Any]]) -> None:
        """Replay parts a committed micro-batch read: each moves its replay's cursor."""
        changed = False
        for part in parts:
            replay = self.replays(part["source"]).get(part["deployment"])
            if replay is None or replay.run != part["run"] or replay.cursor != part["start"]:
                continue  # replaced since, or a replayed batch already recorded
            replay.cursor = part["stop"]
            replay.rows += int(part["rows"])
            if part["ended"]:
                replay.finished = time.time()
                log.info("history: replay of %s ended: %d rows", replay.deployment, replay.rows)
            changed = True
        if changed:
            self.save()

    def active(self, source: str) -> list[HistoryTask]:
        """The tasks still reading chunks, or whose binlog changes still need the gate."""
        return [task for task in self.tasks(source).values() if not task.live]

    def gated(self, source: str) -> list[HistoryTask]:
        """The tasks whose table's binlog changes the gate holds back for now."""
        return [task for task in self.tasks(source).values() if task.gated]

    def consider(
        self,
        reader: BinlogReader,
        deployments: Iterable[Manifest],
        *,
        from_binlog: bool = False,
        strict: bool = True,
    ) -> list[HistoryTask]:
        """Start a task for every table a deployment asks history of and was not asked
        before: at its first run, every existing table it subscribes to; for a new
        version, the tables only its new patterns match. Returns the new tasks.

        Called after the runtime's start positions are pinned: a table empty now
        has all its rows in the binlog after them, so it needs no task. With
        ``from_binlog`` (a first run told to start at ``earliest`` or a position),
        the binlog is the history asked for: deployments are noted, nothing is read.
        A table that cannot be read in chunks raises ``HistoryError``; unless
        ``strict`` (a running runtime, which a deploy must not stop), then the error
        is logged and the deployment gets that table's changes only."""
        source = reader.spec.name
        considered = self._considered.setdefault(source, {})
        pending = [m for m in deployments if set(m.tables) - set(considered.get(m.name, []))]
        if source in self._from_binlog:
            self._from_binlog.discard(source)
            from_binlog = True
        if not pending:
            return []
        existing: list[str] | None = None
        tasks = self._tasks.setdefault(source, {})
        created = []
        for manifest in pending:
            old = considered.get(manifest.name, [])
            considered[manifest.name] = sorted(set(old) | set(manifest.tables))
            if (
                from_binlog
                or manifest.initial != "snapshot"
                or (manifest.sources and source not in manifest.sources)
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
                if is_empty(reader, table):
                    # Every row it will have is in the binlog after the runtime's start.
                    log.info("history: %s is empty; deployment %s gets its changes",
                             table, manifest.name)  # fmt: skip
                    continue
                database, name = table.split(".", 1)
                try:
                    chunked = chunked_table(reader, database, name)
                except HistoryError as exc:
                    refusal = HistoryError(
                        f"deployment {manifest.name!r} cannot be bootstrapped: {exc}; or set "
                        'initial = "none" in its dbus.toml',
                        table=table,
                    )
                    if strict:
                        raise refusal from None
                    log.error("history: %s (it gets the table's changes only)", refusal)
                    continue
                task = HistoryTask(
                    manifest.name, table, chunked.key, chunked.splittable, started=time.time(),
                    estimated_rows=estimated_rows(reader, table), bootstrap=True,
                )  # fmt: skip
                tasks[task.id] = task
                created.append(task)
                log.info("history: bootstrapping %s for deployment %s", table, manifest.name)
        self.save()
        return created

    def backfill(
        self,
        reader: BinlogReader,
        manifests: Iterable[Manifest],
        deployment: str,
        tables: Iterable[str],
        where: str | None = None,
    ) -> list[HistoryTask]:
        """Read ``tables`` (all the deployment's on this source if none) again for
        ``deployment``; refused (``HistoryError``) naming the problem, changing nothing."""
        source = reader.spec.name
        manifest = next((m for m in manifests if m.name == deployment), None)
        if manifest is None:
            names = ", ".join(sorted(m.name for m in manifests)) or "none"
            raise HistoryError(
                f"no deployment {deployment!r} runs here (it runs: {names}); name one of them"
            )
        existing = [f"{t.database}.{t.table}" for t in snapshot_tables(reader)]
        chosen = list(tables) or [t for t in existing if manifest.subscribes(t)]
        for table in chosen:
            if not manifest.subscribes(table):
                raise HistoryError(
                    f"deployment {deployment!r} does not subscribe to {table} (its tables: "
                    f"{', '.join(manifest.tables)}); name one of its tables",
                    table=table,
                )
            if table not in existing:
                raise HistoryError(
                    f"source {source!r} has no table {table}; name an existing table",
                    table=table,
                )
            running = self.tasks(source).get(task_id(deployment, table))
            if running is not None and not running.finished:
                raise HistoryError(
                    f"a backfill of {table} for {deployment!r} is running ({running.rows} rows, "
                    f"{running.chunks} chunks read); wait for it to end, then ask again",
                    table=table,
                )
        if where is not None:
            for table in chosen:
                check_where(reader, table, where)
        tasks = self._tasks.setdefault(source, {})
        created = []
        for table in chosen:
            database, name = table.split(".", 1)
            chunked = chunked_table(reader, database, name)
            before = tasks.get(task_id(deployment, table))
            task = HistoryTask(
                deployment, table, chunked.key, chunked.splittable, started=time.time(),
                run=(before.run + 1) if before else 1, where=where,
                estimated_rows=estimated_rows(reader, table),
            )  # fmt: skip
            tasks[task.id] = task
            created.append(task)
            log.info("history: backfilling %s for deployment %s%s", table, deployment,
                     f" where {where}" if where else "")  # fmt: skip
        self.save()
        return created

    def repair(
        self,
        reader: BinlogReader,
        manifests: Iterable[Manifest],
        deployment: str,
        table: str,
        keys: Iterable[KeyJson],
        deletes: Iterable[tuple[str, str]],
    ) -> HistoryTask:
        """Read ``keys`` of ``table`` again for ``deployment``, and delete each
        (destination, key text) of ``deletes`` the read does not find."""
        if not any(m.name == deployment for m in manifests):
            raise HistoryError(f"no deployment {deployment!r} runs here; name one that does")
        running = self.tasks(reader.spec.name).get(task_id(deployment, table))
        if running is not None and not running.finished:
            raise HistoryError(
                f"a backfill of {table} for {deployment!r} is running; wait for it to end, "
                "then repair"
            )
        database, name = table.split(".", 1)
        chunked = chunked_table(reader, database, name)
        wanted = [key_from_json(k) for k in keys] + [
            key_of_text(text, len(chunked.key)) for _, text in deletes
        ]
        task = HistoryTask(
            deployment, table, chunked.key, chunked.splittable, started=time.time(),
            run=(running.run + 1) if running else 1,
            where=keys_where(chunked.key, [k for k in wanted if k is not None]),
            estimated_rows=len(wanted), deletes=list(deletes), repair=True,
        )  # fmt: skip
        self._tasks.setdefault(reader.spec.name, {})[task.id] = task
        self.save()
        log.info("history: repairing %d key(s) of %s for deployment %s", len(wanted), table,
                 deployment)  # fmt: skip
        return task

    def record(self, done: Iterable[ChunkDone]) -> None:
        """Chunks a committed micro-batch read: they join their tasks' progress."""
        changed = False
        for chunk in sorted(done, key=lambda c: (c.source, c.seq)):
            task = self.tasks(chunk.source).get(chunk.task)
            if task is None or task.run != chunk.run:
                continue  # a chunk of an earlier read, replaced by a backfill since
            if task.cursor != chunk.lower or task.planned_all:
                # A replayed batch's chunk already recorded: its newer position wins.
                for i, (upper, _, since) in enumerate(task.done):
                    if upper == chunk.upper:
                        task.done[i] = (upper, chunk.position, since)
                        changed = True
                continue
            task.done.append((chunk.upper, chunk.position, chunk.since))
            task.rows += chunk.rows
            if chunk.seconds > 0 and chunk.rows:
                rate = chunk.rows / chunk.seconds
                task.rate = rate if task.rate <= 0 else (task.rate + rate) / 2
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
            if task.planned_all and (
                not task.bootstrap or task.highest_position() <= position_order(read_to)
            ):
                task.live = True
                changed = True
        if changed:
            self.save()


def progress_text(tasks: Iterable[HistoryTask | ReplayTask]) -> dict[str, str]:
    """Per task, what the batch log shows: rows (and chunks) read, or done."""
    return {
        task.id: f"{task.rows} rows"
        + (f", {task.chunks} chunks" if isinstance(task, HistoryTask) else "")
        + (", done" if task.finished else "")
        for task in tasks
    }


__all__ = [
    "ChunkDone",
    "HistoryStore",
    "HistoryTask",
    "PlannedChunk",
    "ReplayTask",
    "chunked_of",
    "plan_chunks",
    "progress_text",
    "store_path",
    "task_id",
]


def store_path(checkpoint_dir: str) -> Path:
    """Where a runtime's history progress lives: beside its checkpoint."""
    checkpoint = Path(checkpoint_dir)
    return checkpoint.parent / f"{checkpoint.name}.history.json"
