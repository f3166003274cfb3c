"""The binlog streaming source: a PySpark Python data source named ``dbus_binlog``.

Offsets are one binlog position per source, always at a transaction boundary, as
JSON (``{"shop": {"file": "...", "pos": 4, "gtid": "0-1-7"}}``). The driver asks
each source for its newest committed position to plan a micro-batch; each source
with new data becomes one input partition, read in commit order by one task, so
several sources are read in parallel by executors.

One busy source is read by several tasks at once: a range of at least
``SHARD_MIN_BYTES`` becomes up to ``shards`` partitions (the reader option;
one per two Spark cores by default, shared among the sources that moved), each
reading the whole range and keeping only the rows of its key shard
(``dbus_fn.capture.Shard``). Decoding and the function stage, the costly part,
are split; every key's changes stay in one task, in commit order, so per-key
order in Kafka holds with no merge.

Every read task writes each change to the sinks itself as it reads it
(``writer.Output``, the sinks of the read task's worker), then hands Spark only its
counters (``RecordType.STATS`` and ``DELIVERED``). A source one task reads (and no
history merges with, and no fence holds) is read *open*: the task reads on past the
planned end for ``open_read_seconds``. Once the sinks acknowledged it all, the
batch's commit notes how far the task got (``checkpoint.record_reached``) and the
next batch starts there. A batch replayed after a crash reads from its planned
start, or from further where a carried read noted its sinks had everything
(``checkpoint.take_delivered``, at a run's first plan): at least once, as always,
never less. A Spark micro-batch costs a few hundred
milliseconds of planning and commits; with every deployment with the stream, the
open read goes on in the meantime and the next task takes it over
(``dbus_spark.reads.open_read``), so no change waits for the next batch. Otherwise (a
deployment left out or taken back) the task's read ends with it. A read still
behind the server when its time is up reads on while it is, up to
``open_read.CATCH_UP`` times its time: a batch costs cores a backlog needs.

Every deployment goes at its own pace (``dbus_spark.state.progress``): with a detach bound
(``RuntimeConfig.detach_seconds``) a deployment whose sinks do not take its records
within the bound, or whose functions take most of the read's time, is left out from
its position on, and the plan gives it a read of its own
(``progress.catchup.CatchUpRange``) until it rejoins the shared one.

The function stage runs inside the read (see ``dbus_spark.stage.functions``): each output is
one encoded record (a CloudEvent in the Kafka binary binding and where it goes). In
a cluster member the task's Kafka transactions are fenced by the epoch the source
was held at when the batch was planned.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from kazoo.exceptions import KazooException
from pyspark.sql.datasource import (
    DataSourceStreamReader,
)

from dbus_fn.capture import (
    BinlogReader,
    coordinates,
    position_from_json,
    position_to_json,
)
from dbus_fn.coordination import PlanLog
from dbus_fn.errors import DbusError, HistoryError, SourceError, SourceUnreachableError
from dbus_fn.events import (
    BinlogPosition,
)
from dbus_fn.manifest import Manifest
from dbus_spark.config.kafka_source import KAFKA, OUTAGE_SECONDS, KafkaSource
from dbus_spark.config.kafka_source import ranges as kafka_ranges
from dbus_spark.config.runtime import ConfigFile, RuntimeConfig, SourceBinding, WriteFencing
from dbus_spark.planning.kafka_planner import KafkaPlanner, kafka_shards, start_offsets
from dbus_spark.planning.request_models import Answer, PaceRequest
from dbus_spark.planning.requests import take_requests
from dbus_spark.reads import open_read, open_read_control
from dbus_spark.reads.catchup import CatchUpRange, read_catch_up
from dbus_spark.reads.history_chunks import (
    ChunkRange,
    ReplayRange,
    own_read_seconds,
    read_chunk_range,
    read_replay_range,
)
from dbus_spark.reads.kafka_read import KafkaRange, read_kafka_range, read_kafka_replay
from dbus_spark.reads.range_read import SourceRange, read_source_range
from dbus_spark.reads.shared_read import (
    POSITION_KEYS,
    admission_of,
    caught_up_with,
)
from dbus_spark.sinks.writer import detaches, sink_settings, worker_sinks
from dbus_spark.stage.shipment import Shipment, Shipper
from dbus_spark.stage.worker import (
    Batcher,
    hold,
    offset_to_position,
    position_to_offset,
    publish_functions,
    worker_stage,
)
from dbus_spark.state.checkpoint import load_reached, progress_path, take_delivered
from dbus_spark.state.history import HistoryStore, PlannedChunk, plan_chunks
from dbus_spark.state.history.plans import open_plans
from dbus_spark.state.progress import (
    ProgressBook,
    rejoined,
)

log = logging.getLogger(__name__)

# A range smaller than this is read by one task: a shard costs a replication
# connection and a task (~10-20 ms), worth it only when decoding takes longer.
SHARD_MIN_BYTES = 256 * 1024
HURRIED_SECONDS = 2.0
"""How long the planner waits for each answer of a source that did not answer lately
(its server's greeting and login, its brokers' offsets): every source's micro-batch
waits for the planning, and a read carried across batches that no task takes over
for a while ends (``reads.open_read``); a server far away still logs in within it."""


class BinlogSourceReader(DataSourceStreamReader):  # type: ignore[misc]
    """Spark's reader of the ``dbus_binlog`` source: plans each micro-batch's positions
    and partitions on the driver, and reads a partition on an executor."""

    def __init__(
        self,
        config_path: str,
        *,
        shards: int = 1,
        chunk_tasks: int = 1,
        reports: str | None = None,
        run: str | None = None,
    ) -> None:
        self._config_file = ConfigFile(config_path)
        self._reports = reports
        """Where the workers publish their functions' counts (None: metrics off)."""
        self._run = run
        """This start of the query (``job``): a task of it that outlives its stop
        reads nothing (``open_read.mark_stopped``). None: not known."""
        self._shards = max(1, shards)
        self._chunk_tasks = max(1, chunk_tasks)
        self._config = self._config_file.current()
        self._readers: dict[str, BinlogReader] = {}
        self._planners: dict[str, KafkaPlanner] = {}
        """Per Kafka source (``dbus_spark.config.kafka_source``), what asks its cluster."""
        self._history = HistoryStore(progress_path(self._config.checkpoint_dir))
        self._manifests = _manifests(self._config)
        self._plan_log: PlanLog | None = None
        self._shipper = Shipper()
        self._book = ProgressBook(self._config.checkpoint_dir)
        self._took_delivered = False
        """Whether this run took what the last one's carried reads delivered
        (``checkpoint.take_delivered``): at its first plan."""
        self._unanswered: dict[str, float] = {}
        """Per source whose server does not answer the planner, since when
        (``_unanswered_offset``)."""

    def _current(self) -> RuntimeConfig:
        """The configuration as the runtime last wrote it (sources come and go in a cluster)."""
        config = self._config_file.current()
        if config is not self._config:
            self._config = config
            self._manifests = _manifests(config)
            for name in set(self._readers) - {b.spec.name for b in config.sources}:
                self._readers.pop(name).close()
            for name in set(self._planners) - {k.name for k in config.kafka_sources}:
                self._planners.pop(name).close()
        return config

    def _planner(self, source: KafkaSource) -> KafkaPlanner:
        planner = self._planners.get(source.name)
        if planner is None:
            planner = self._planners[source.name] = KafkaPlanner(source)
        return planner

    def _reader(self, binding: SourceBinding) -> BinlogReader:
        reader = self._readers.get(binding.spec.name)
        if reader is None:
            # The driver's reader only asks for positions; it never streams.
            reader = BinlogReader(binding.spec, replica_id=binding.replica_id)
            self._readers[binding.spec.name] = reader
        return reader

    def initialOffset(self) -> dict[str, Any]:
        config = self._current()
        offsets = {
            b.spec.name: position_to_offset(self._reader(b).resolve_start(b.start), b)
            for b in config.sources
        }
        for source in config.kafka_sources:
            offsets[source.name] = {KAFKA: start_offsets(source, self._planner(source))}
        return offsets

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        config = self._current()
        self._history.reload()
        for binding in config.sources:
            if binding.history is not None and self._history.adopt(  # a source a member gained
                binding.spec.name, binding.taken, binding.history
            ):
                self._book.adopt(binding.spec.name, binding.history.get("pace") or {})
        take_requests(
            config.checkpoint_dir, self._history,
            {b.spec.name: self._reader(b) for b in config.sources}, self._manifests,
            (lambda r, only: self._pace(r, start, only)) if detaches(config) else None,
            {k.name: self._planner(k) for k in config.kafka_sources},
        )  # fmt: skip
        latest, planned = {}, False
        book = self._book.load() if detaches(config) else {}
        names = {manifest.name for manifest in self._manifests}
        now = time.time()
        for binding in config.sources:
            reader = self._reader(binding)
            name = binding.spec.name
            last = (start or {}).get(name)
            # Whose history waits: paused, or detached with sinks that refused its own
            # catch-up read (which tries them again first, at less cost to the others).
            held = {d for d, b in book.get(name, {}).items() if b.paused or b.failures}
            # Every question to the server is in here: one that stops answering after
            # where its binlog ends (a table's definition, a chunk's bounds) is waited
            # out as one that did not answer that, and fails no plan.
            try:
                if name in self._unanswered:
                    reader.probe(HURRIED_SECONDS)
                offset = position_to_offset(reader.master_position(), binding)
                # A deployment a cluster member was given (`dbus fn deploy`); alone, the
                # preflight considered them already (and refused what cannot be read).
                self._history.consider(reader, self._manifests, strict=False)
                if last is not None and hold(last) == hold(offset):
                    self._history.settle(name, offset_to_position(last), {
                        d: position_from_json(b.position) for d, b in book.get(name, {}).items()
                    })  # fmt: skip
                again = self._history.next_replan(name) if config.fencing is not None else None
                if again is not None:
                    # What the last owner may have sent: read again as it planned it.
                    offset = position_to_offset(position_from_json(again[0]), binding)
                    chunks = again[1]
                else:
                    chunks = plan_chunks(
                        reader, self._history.due(name, now, held),
                        chunk_rows=config.chunk_rows, budget=self._chunk_tasks,
                    )  # fmt: skip
                    chunks, offset = self._quiet(binding, last, offset, chunks)
            except SourceUnreachableError as exc:
                latest[name] = self._unanswered_offset(binding, last, exc)
                continue
            self._answered(name)
            if chunks and config.fencing is not None:
                if not self._record_plan(config.fencing, binding, offset, chunks):
                    chunks = []  # unrecorded, a next owner could not read it again
                elif again is not None:
                    self._history.replanned(name)
            if chunks:
                offset["chunks"] = [chunk.to_json() for chunk in chunks]
                planned = True
            replays = self._history.due_replays(name, now, held)
            if replays:
                offset["replays"] = [[r.deployment, r.run, r.cursor] for r in replays]
                planned = True
            behind = {d: b for d, b in book.get(name, {}).items() if d in names}
            level = [d for d, b in behind.items() if caught_up_with(b, offset)]
            if level:
                # Caught up with the server itself: with the stream again, no read needed.
                self._book.apply([rejoined(name, d) for d in level])
                log.info("dbus_binlog: %s with the stream of %s again", ", ".join(level), name)
                behind = {d: b for d, b in behind.items() if d not in level}
                # A batch, even one that reads nothing, commits the rejoin where the
                # source's position goes (a cluster's ZooKeeper); without one it waited
                # for the source's next change.
                planned = True
            if behind:
                # Spark's offset log keeps every deployment's position (``progress``);
                # a retry is a new offset (its attempt), planned while the source idles.
                offset["behind"] = {
                    d: {"position": b.position, "caught_up": b.caught_up,
                        "paused": b.paused, "due": b.due(now), "attempt": b.failures}
                    for d, b in sorted(behind.items())
                }  # fmt: skip
                # A deployment due a read of its own, or one the shared read takes back.
                planned = planned or any(
                    b.due(now) or (b.caught_up and not b.paused) for b in behind.values()
                )
            latest[name] = offset
        for source in config.kafka_sources:
            previous = (start or {}).get(source.name, {}).get(KAFKA)
            try:
                ends = self._planner(source).latest(
                    previous, timeout=HURRIED_SECONDS if source.name in self._unanswered else None
                )
            except SourceUnreachableError as exc:
                if previous is None:
                    raise  # never read: nowhere to wait at
                self._waits(source.name, exc, OUTAGE_SECONDS, "brokers")
                latest[source.name] = {KAFKA: previous}  # no range, no replay
                continue
            self._answered(source.name)
            offset = {KAFKA: ends}
            replays = self._history.due_replays(source.name, now)
            if replays:  # what the topics keep, through one deployment (``kafka_read``)
                offset["replays"] = [[r.deployment, r.run, r.cursor] for r in replays]
                planned = True
            latest[source.name] = offset
        if start is not None and not planned and _same_positions(start, latest):
            return start  # nothing to read: no micro-batch
        return latest

    def _unanswered_offset(
        self, binding: SourceBinding, previous: dict[str, Any] | None, error: DbusError
    ) -> dict[str, Any]:
        """The offset of a source whose server does not answer: where the last batch
        ended, so this batch reads none of it and the runtime's other sources go on. As
        its reads do, it waits up to its reader's ``reconnect_for`` for the server to
        come back, and then stops the runtime; so does a source never read yet, or one
        this runtime no longer holds as it did (a cluster moved it)."""
        if previous is None or hold(previous) != (binding.epoch, binding.generation):
            raise error
        self._waits(binding.spec.name, error, self._reader(binding).reconnect_for, "server")
        return position_to_offset(offset_to_position(previous), binding)

    def _waits(self, name: str, error: DbusError, limit: float, who: str) -> None:
        """Source ``name``'s ``server`` or ``brokers`` (``who``) do not answer the
        planner: the outage is logged once, when it begins; past ``limit`` seconds of it
        the runtime stops, with one line that names the source and how to go on."""
        now = time.monotonic()
        if name not in self._unanswered:
            self._unanswered[name] = now
            log.warning("dbus_binlog: %s; its changes wait, the other sources go on", error)
        if now - self._unanswered[name] > limit:
            raise SourceError(
                f"source {name!r}: its {who} did not answer for {limit:.0f}s ({error}); "
                f"start the runtime again once the {who} {'are' if who.endswith('s') else 'is'}"
                " back: it resumes where the source's last batch ended",
                source=name,
            ) from None

    def _answered(self, name: str) -> None:
        """Source ``name``'s server or cluster answered the planner (again)."""
        since = self._unanswered.pop(name, None)
        if since is not None:
            log.warning("dbus_binlog: source %r answers again after %.0fs; its changes go on",
                        name, time.monotonic() - since)  # fmt: skip

    def _pace(self, request: PaceRequest, start: dict[str, Any] | None,
              only: str | None = None) -> Answer:  # fmt: skip
        """Pause a deployment where the stream stands (the last batch's end), or let a
        paused one catch up (``dbus_spark.state.progress``): on source ``only``, or on all."""
        name = request.deployment
        names = sorted(manifest.name for manifest in self._manifests)
        if name not in names:
            return Answer.refused(HistoryError(
                f"no deployment {name!r} runs in this runtime; it runs {', '.join(names)}"
            ))  # fmt: skip
        if not request.pause:
            resumed = self._book.resume(name, only)
            return Answer(True, f"{name} resumed: it catches up on its own read, then rejoins"
                          if resumed else f"{name} was not paused")  # fmt: skip
        if not start or (only is not None and only not in start):
            return Answer.refused(HistoryError(
                "the runtime has not committed its first micro-batch yet; ask again in a moment"
            ))  # fmt: skip
        positions = {
            source: {key: offset[key] for key in POSITION_KEYS if key in offset}
            for source, offset in start.items()
            if only in (None, source)
        }
        if open_read_control.local_executors():
            # A read going on between batches delivered past the last batch: it ends,
            # and the deployment is paused where it got.
            for source, position in positions.items():
                reached = open_read_control.end_read(self._config.checkpoint_dir, source)
                if reached is not None and coordinates(reached) > coordinates(
                    position_from_json(position)
                ):
                    positions[source] = position_to_json(reached)
        self._book.pause(name, positions)
        at = ", ".join(f"{s} {p['file']}:{p['pos']}" for s, p in sorted(positions.items()))
        return Answer(True, f"{name} paused at {at}; `dbus fn resume {name}` lets it catch up")

    def _quiet(
        self,
        binding: SourceBinding,
        previous: dict[str, Any] | None,
        offset: dict[str, Any],
        chunks: list[PlannedChunk],
    ) -> tuple[list[PlannedChunk], dict[str, Any]]:
        """A backfill's or a repair's chunks go into a micro-batch that reads none of
        the source's binlog (``HistoryTask.bootstrap`` says why): then every change
        before the chunk's read is in an earlier batch, and every one after it is
        sent after it. Such batches take turns with the binlog's."""
        tasks = self._history.tasks(binding.spec.name)
        quiet = [(t := tasks.get(c.task)) is not None and not t.bootstrap for c in chunks]
        if not any(quiet):
            return chunks, offset
        if (
            previous is None
            or hold(previous) != hold(offset)
            or (previous.get("quiet") and _moved(previous, offset))
        ):
            return [c for c, q in zip(chunks, quiet, strict=True) if not q], offset  # binlog's turn
        held = position_to_offset(offset_to_position(previous), binding)
        held["quiet"] = True
        return chunks, held

    def _record_plan(
        self,
        fencing: WriteFencing,
        binding: SourceBinding,
        offset: dict[str, Any],
        chunks: Sequence[PlannedChunk],
    ) -> bool:
        """Write the batch's history plan to ZooKeeper (``history.plans``), with the
        plans still open; False if this runtime may not (not the owner, no answer)."""
        if self._plan_log is None:
            self._plan_log = PlanLog(fencing.zookeeper, fencing.runtime_id)
        name = binding.spec.name
        try:
            plans = open_plans(self._plan_log.read(name), self._plan_log.committed_history(name))
        except (DbusError, KazooException):
            return False
        plan = {
            "end": position_to_json(offset_to_position(offset)),
            "chunks": [chunk.to_json() for chunk in chunks],
        }
        return self._plan_log.write(name, binding.epoch, [*plans, plan])

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[SourceRange | ChunkRange | ReplayRange | CatchUpRange]:
        config = self._current()
        shipment = self._shipper.ship(config)
        self._history.reload()
        if not self._took_delivered:
            self._took_delivered = True
            take_delivered(config.checkpoint_dir, (d.name for d in config.deployments))
        reached = load_reached(config.checkpoint_dir)
        kafka = {name: upto for name, upto in end.items() if KAFKA in upto}
        end = {name: upto for name, upto in end.items() if name not in kafka}
        moved = []
        for name, upto in end.items():
            begin = start.get(name)
            if begin is None or hold(begin) != hold(upto):
                # Gained (or regained) in a cluster: resume where the last owner
                # committed, not where this runtime's own checkpoint left off.
                binding = next((b for b in config.sources if b.spec.name == name), None)
                if binding is None or not isinstance(binding.start, BinlogPosition):
                    continue
                begin = position_to_offset(binding.start, binding)
            elif name in reached:
                begin = _past_open_read(begin, upto, reached[name])
            begin, admission = admission_of(begin, upto.get("behind", {}))
            if _moved(begin, upto):
                moved.append((name, begin, upto, admission))
        split = max(1, self._shards // max(1, len(moved)))
        ranges: list[SourceRange | ChunkRange | ReplayRange | CatchUpRange] = []
        for name, begin, upto, admission in moved:
            # Exactly once, a source is read whole: its lanes' marks are per key shard,
            # and a read again with other shards could not tell what each one had.
            count = (
                split if _span(begin, upto) >= SHARD_MIN_BYTES and not config.exactly_once else 1
            )
            gate = self._history.gate(name, fenced=config.fencing is not None)
            ranges += [
                SourceRange(
                    shipment,
                    name,
                    begin,
                    upto,
                    index,
                    count,
                    gate.to_json() if gate else None,
                    admission.to_json() if admission else None,
                )
                for index in range(count)
            ]
        seconds = own_read_seconds(config)
        for name, upto in end.items():
            gate = self._history.gate(name, fenced=config.fencing is not None)
            for deployment, behind in upto.get("behind", {}).items():
                if behind["due"]:
                    ranges.append(
                        CatchUpRange(
                            shipment,
                            name,
                            deployment,
                            behind["position"],
                            upto,
                            seconds,
                            gate.to_json() if gate else None,
                        )
                    )
        for name, upto in end.items():
            for deployment, run, cursor in upto.get("replays", ()):
                replay = self._history.replays(name).get(deployment)
                if replay is None or replay.run != run:
                    continue
                ranges.append(
                    ReplayRange(shipment, name, upto, deployment, run, cursor,
                                replay.end, replay.route, replay.since, replay.until,
                                replay.started)
                )  # fmt: skip
            tasks = self._history.tasks(name)
            for seq, data in enumerate(upto.get("chunks", ())):
                chunk = PlannedChunk.from_json(data)
                task = tasks.get(chunk.task)
                if task is None:
                    continue
                ranges.append(
                    ChunkRange(
                        shipment,
                        name,
                        upto,
                        data,
                        seq,
                        task.deployment,
                        task.table,
                        task.unchunked,
                        task.where,
                        tuple(task.deletes),
                        task.started,
                    )
                )
        ranges += self._kafka_ranges(config, shipment, start, kafka)
        return ranges

    def _kafka_ranges(
        self,
        config: RuntimeConfig,
        shipment: Shipment,
        start: dict[str, Any],
        kafka: dict[str, Any],
    ) -> list[KafkaRange | ReplayRange]:
        """Each Kafka source's partitions with messages, a big one split by key among
        ``kafka_shards`` tasks so the cores share the work, and the parts of its replays
        (``dbus_spark.reads.kafka_read``)."""
        found, replays = [], []
        for name, upto in kafka.items():
            begin = start.get(name, {}).get(KAFKA)
            if begin is None:  # a source new to this checkpoint
                source = config.kafka_source(name)
                begin = start_offsets(source, self._planner(source))
            found += [(name, *r) for r in kafka_ranges(begin, upto[KAFKA])]
            for deployment, run, cursor in upto.get("replays", ()):
                replay = self._history.replays(name).get(deployment)
                if replay is not None and replay.run == run:
                    replays.append(ReplayRange(shipment, name, upto, deployment, run, cursor,
                                               replay.end, replay.route, replay.since,
                                               replay.until, replay.started))  # fmt: skip
        return [
            KafkaRange(shipment, name, topic, partition, first, last, shard, count)
            for name, topic, partition, first, last in found
            # Exactly once, a partition is read whole (its lanes are per partition).
            for count in [
                1 if config.exactly_once
                else kafka_shards(last - first, len(found), self._chunk_tasks)
            ]
            for shard in range(count)
        ] + replays

    def read(
        self, partition: SourceRange | ChunkRange | ReplayRange | CatchUpRange | KafkaRange
    ) -> Iterator[pa.RecordBatch]:
        config, stage = worker_stage(partition.shipment)
        publish_functions(self._reports, stage)
        if self._reports is not None:
            worker_sinks(sink_settings(config)).publisher.use(self._reports)
        if isinstance(partition, ChunkRange):
            if partition.end.get("quiet"):  # nothing of the binlog comes while it reads
                handed = open_read.quiet(config.checkpoint_dir, partition.source)
                batcher = Batcher(partition.source)
                handed.add_to(batcher)
                rows = batcher.flush()
                if rows is not None:
                    yield rows
            yield from read_chunk_range(partition)
            return
        if isinstance(partition, CatchUpRange):
            yield from read_catch_up(partition)
            return
        if isinstance(partition, KafkaRange):
            yield from read_kafka_range(partition, config, stage)
            return
        if isinstance(partition, ReplayRange):
            if KAFKA in partition.start:
                yield from read_kafka_replay(partition, config, stage)
            else:
                yield from read_replay_range(partition)
            return
        yield from read_source_range(partition, config, stage, self._reports, self._run)

    def commit(self, end: dict[str, Any]) -> None:
        log.info("dbus_binlog: committed %s", end)

    def stop(self) -> None:
        for reader in self._readers.values():
            reader.close()
        for planner in self._planners.values():
            planner.close()
        if self._plan_log is not None:
            self._plan_log.close()


def _manifests(config: RuntimeConfig) -> list[Manifest]:
    return [deployment.manifest() for deployment in config.deployments]


def _same_positions(start: dict[str, Any], end: dict[str, Any]) -> bool:
    """Whether no source moved or changed hands between two offsets."""
    if set(start) != set(end):
        return False
    return all(
        start[name] == end[name] if KAFKA in end[name]
        else not _moved(start[name], end[name]) and hold(start[name]) == hold(end[name])
        for name in end
    )  # fmt: skip


def _past_open_read(
    begin: dict[str, Any], upto: dict[str, Any], reached: dict[str, Any]
) -> dict[str, Any]:
    """Where a range really starts: past what an open read already delivered beyond
    ``begin`` (up to ``upto`` at most; all of it delivered reads nothing)."""
    delivered = coordinates(position_from_json(reached))
    if delivered <= coordinates(position_from_json(begin)):
        return begin
    if delivered >= coordinates(position_from_json(upto)):
        return upto
    kept = {key: value for key, value in begin.items() if key not in ("file", "pos", "gtid")}
    return {**kept, **reached}


def _span(start: dict[str, Any], end: dict[str, Any]) -> float:
    """Binlog bytes between two offsets (unknown, so unbounded, across files)."""
    if start["file"] != end["file"]:
        return float("inf")
    return int(end["pos"]) - int(start["pos"])


def _moved(start: dict[str, Any], end: dict[str, Any]) -> bool:
    """Whether the server wrote between two offsets (a change of place, not an order)."""
    return (start["file"], int(start["pos"])) != (end["file"], int(end["pos"]))
