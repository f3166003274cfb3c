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

Progress lives in the ``HistoryStore``, a section of the progress folder beside the
checkpoint (``dbus_spark.state.checkpoint.ProgressFolder``), written by
the driver when a micro-batch commits (chunks done, with their positions) and
when deployments are first seen (the tasks to run). A runtime killed mid-task
replays its uncommitted batch and goes on from the last committed chunk.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Set
from contextlib import contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from dbus_fn.capture import (
    BinlogReader,
    chunked_table,
    key_from_json,
)
from dbus_fn.capture._snapshot import snapshot_tables
from dbus_fn.errors import HistoryError
from dbus_fn.events import BinlogPosition
from dbus_fn.manifest import Manifest
from dbus_spark.state.checkpoint import ProgressFolder
from dbus_spark.state.history.gate import Gate
from dbus_spark.state.history.queries import (
    check_where,
    estimated_rows,
    is_empty,
    key_of_text,
    keys_where,
)
from dbus_spark.state.history.records import (
    ChunkDone,
    HistoryTask,
    KeyJson,
    PlannedChunk,
    Refusal,
    ReplayPart,
    ReplayTask,
    backoff,
    progress_text,
    task_id,
)
from dbus_spark.state.records import position_order

log = logging.getLogger("dbus.runtime")

class HistoryStore:
    """The history tasks of one runtime, per source: the ``history`` section of its
    progress folder (``dbus_spark.state.checkpoint.ProgressFolder``).

    Only the driver writes it: when deployments are first seen (``consider``),
    when a micro-batch commits (``record``) and when a task needs no gate any more.
    """

    def __init__(self, path: str | Path | ProgressFolder) -> None:
        self._file = path if isinstance(path, ProgressFolder) else ProgressFolder(path)
        self.path = self._file.path
        self._tasks: dict[str, dict[str, HistoryTask]] = {}
        self._considered: dict[str, dict[str, list[str]]] = {}
        self._replays: dict[str, dict[str, ReplayTask]] = {}
        self._adopted: dict[str, str] = {}
        self._from_binlog: set[str] = set()
        self._replans: dict[str, list[dict[str, Any]]] = {}
        self._waits: dict[str, dict[str, dict[str, Any]]] = {}
        """Per source, per deployment whose sinks refused a history read: why, how many
        times in a row, and when it is read again (``refused``)."""
        self._stamp = -1
        self._seen: dict[str, Any] | None = None
        """The section as this store last read or wrote it."""
        self._held: bool | None = None
        """Inside ``saved_once``: whether a save waits for its end (None: outside)."""
        self.reload()

    def reload(self) -> None:
        stamp = self._file.stamp("history")
        if stamp == self._stamp:
            return
        data = self._file.read("history")
        self._stamp = stamp
        if data == self._seen:
            return  # the file changed in another section
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
        self._waits = data.get("waits", {})
        self._seen = data

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
        from dbus_spark.state.history.plans import replan

        plans = self._replans.get(source, [])
        while plans:
            found = replan(plans[:1], self.tasks(source))
            if found is not None:
                return found
            plans.pop(0)  # read since: nothing of it is left
        return None

    def replanned(self, source: str) -> None:
        """The plan ``next_replan`` gave was planned again: drop it."""
        plans = self._replans.get(source, [])
        if plans:
            plans.pop(0)

    def adopted(self, source: str) -> str | None:
        """Which gain of ``source`` this store took over last (see ``adopt``)."""
        return self._adopted.get(source)

    @contextmanager
    def saved_once(self) -> Iterator[None]:
        """Changes made inside are saved once, at the end (a batch's commit)."""
        self._held = False
        try:
            yield
        finally:
            pending, self._held = self._held, None
            if pending:
                self.save()

    def save(self) -> None:
        if self._held is not None:
            self._held = True
            return
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
            "waits": {source: waits for source, waits in self._waits.items() if waits},
        }
        # What the file holds is JSON: compare it with JSON, not with shared dicts.
        self._seen = json.loads(json.dumps(data))
        self._file.write("history", data)
        self._stamp = self._file.stamp("history")

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

    def record_replays(self, parts: Iterable[ReplayPart]) -> None:
        """Replay parts a committed micro-batch read: each moves its replay's cursor."""
        changed = False
        for part in parts:
            replay = self.replays(part.source).get(part.deployment)
            if replay is None or replay.run != part.run or replay.cursor != part.start:
                continue  # replaced since, or a replayed batch already recorded
            replay.cursor = part.stop
            replay.rows += part.rows
            self._taken(part.source, part.deployment)
            if part.ended:
                replay.finished = time.time()
                log.info("history: replay of %s ended: %d rows", replay.deployment, replay.rows)
            changed = True
        if changed:
            self.save()

    def refused(self, reads: Iterable[Refusal], now: float | None = None) -> None:
        """History reads a committed micro-batch's sinks did not take: that deployment's
        history is read again after a backoff, from where it stands."""
        now = time.time() if now is None else now
        once = {(read.source, read.deployment): read for read in reads}  # per batch
        for read in once.values():
            waits = self._waits.setdefault(read.source, {})
            failures = int(waits.get(read.deployment, {}).get("failures", 0)) + 1
            waits[read.deployment] = {
                "reason": read.reason, "failures": failures,
                "retry_at": now + backoff(failures),
            }  # fmt: skip
        self.save()

    def waiting(self, source: str) -> dict[str, dict[str, Any]]:
        """Per deployment whose sinks refused its last history read, why and when it is
        read again (see ``refused``)."""
        return dict(self._waits.get(source, {}))

    def due(self, source: str, now: float, held: Set[str] = frozenset()) -> list[HistoryTask]:
        """The active tasks whose chunks are planned now: not of a deployment ``held``
        (paused, or whose sinks refuse its stream: its own catch-up read tries them
        first), nor of one whose sinks refused its last history read, before its
        backoff ends."""
        return [task for task in self.active(source) if self._due(source, task, now, held)]

    def due_replays(
        self, source: str, now: float, held: Set[str] = frozenset()
    ) -> list[ReplayTask]:
        """The replays not finished whose next part is planned now (see ``due``)."""
        return [
            replay for replay in self.replays(source).values()
            if not replay.finished and self._due(source, replay, now, held)
        ]  # fmt: skip

    def _due(self, source: str, task: HistoryTask | ReplayTask, now: float,
             held: Set[str]) -> bool:  # fmt: skip
        wait = self._waits.get(source, {}).get(task.deployment, {})
        return task.deployment not in held and now >= wait.get("retry_at", 0.0)

    def _taken(self, source: str, deployment: str) -> None:
        """A history read of ``deployment`` its sinks took: it waits no more."""
        self._waits.get(source, {}).pop(deployment, None)

    def active(self, source: str) -> list[HistoryTask]:
        """The tasks still reading chunks, or whose binlog changes still need the gate."""
        return [task for task in self.tasks(source).values() if not task.live]

    def gated(self, source: str) -> list[HistoryTask]:
        """The tasks whose table's binlog changes the gate holds back for now."""
        return [task for task in self.tasks(source).values() if task.gated]

    def gate(self, source: str, *, fenced: bool) -> Gate:
        """What the history tasks hold back of ``source``'s binlog, for the shared read
        and for a deployment's own catch-up read alike; ``fenced``: a cluster member,
        whose deployments receive nothing of a table before its history is planned."""
        return Gate(self.gated(source), self.considered(source) if fenced else None)

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
                or not manifest.captures(source)
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
                    f"the {running.kind} of {table} for {deployment!r} is running "
                    f"({running.rows} rows, {running.chunks} chunks read); wait for it to "
                    "end, then ask again",
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
                f"the {running.kind} of {table} for {deployment!r} is running; wait for it "
                "to end, then repair"
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
            self._taken(chunk.source, task.deployment)
            if chunk.seconds > 0 and chunk.rows > 1:
                rate = (chunk.rows - 1) / chunk.seconds  # its rows past the first
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

    def settle(
        self,
        source: str,
        read_to: BinlogPosition,
        behind: Mapping[str, BinlogPosition] | None = None,
    ) -> None:
        """Tasks whose every chunk is older than what their deployment's stream has read
        need no gate: the shared read's ``read_to``, or where a deployment that is not
        with it (detached, paused) has read to on its own (``behind``). Its own read
        is behind the shared one, and without the gate it would send changes older
        than a chunk after that chunk's rows."""
        changed = False
        shared = position_order(read_to)
        for task in self.active(source):
            reached = shared
            if behind and task.deployment in behind:
                reached = min(reached, position_order(behind[task.deployment]))
            if task.planned_all and (not task.bootstrap or task.highest_position() <= reached):
                task.live = True
                changed = True
        if changed:
            self.save()


__all__ = ["HistoryStore"]
