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

The function stage runs inside the read (see ``dbus_spark.stage``): each output
row is one encoded record (a CloudEvent in the Kafka binary binding and where it
goes), sent to Spark as Arrow batches; the last row of a partition carries the
stage's counters (``RecordType.STATS``). In a cluster member the first row names
the epoch the source was held at (``RecordType.HOLD``): the writer's Kafka
transactions are fenced by it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from dbus_fn.capture import (
    BinlogReader,
    ChunkRead,
    Shard,
    SourceSpec,
    key_from_json,
    position_from_json,
    position_to_json,
    read_chunk,
    replica_id_for,
)
from dbus_fn.events import (
    BinlogPosition,
    Operation,
    RowChange,
    SchemaChange,
    TransactionCommit,
)
from dbus_fn.manifest import Destination, Manifest, load_manifest
from dbus_spark.config import RuntimeConfig, SourceBinding, load_config
from dbus_spark.history import (
    ChunkDone,
    Gate,
    HistoryStore,
    HistoryTask,
    PlannedChunk,
    chunked_of,
    plan_chunks,
    position_order,
    store_path,
)
from dbus_spark.history.requests import take_requests
from dbus_spark.history.tasks import key_of_text
from dbus_spark.logs import runtime_logger
from dbus_spark.sinks.records import IndexAction, KafkaRecord, RecordType
from dbus_spark.stage import FunctionStage, StageCounts, StageRecord

log = logging.getLogger(__name__)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), False),
        pa.field("record_type", pa.string(), False),  # a RecordType
        pa.field("deployment", pa.string(), False),
        pa.field("destination", pa.string(), False),  # a topic or an index
        # A KafkaRecord; the payload of a control row is its value.
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.map_(pa.string(), pa.binary())),
        # An IndexAction; its document is JSON (null: a delete).
        pa.field("doc_id", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("document", pa.binary()),
        pa.field("column_types", pa.string()),  # JSON
        pa.field("dead_letter", pa.string()),
        pa.field("change", pa.binary()),
    ]
)
SCHEMA = from_arrow_schema(ARROW_SCHEMA)
BATCH_ROWS = 2048
# A range smaller than this is read by one task: a shard costs a replication
# connection and a task (~10-20 ms), worth it only when decoding takes longer.
SHARD_MIN_BYTES = 256 * 1024

_stages: dict[tuple[str, float], tuple[RuntimeConfig, FunctionStage]] = {}
_readers: dict[tuple[SourceSpec, int], BinlogReader] = {}


def worker_stage(config_path: str) -> tuple[RuntimeConfig, FunctionStage]:
    """The configuration and function stage of this worker process, loaded once.

    A changed configuration file (new deployments) is picked up at the next read.
    """
    key = (config_path, os.stat(config_path).st_mtime)
    found = _stages.get(key)
    if found is None:
        _stages.clear()
        config = load_config(config_path)
        found = (config, FunctionStage(config.deployments, type_prefix=config.type_prefix))
        _stages[key] = found
        known = {b.spec for b in config.sources}
        for spec, replica_id in list(_readers):
            if spec not in known:
                _readers.pop((spec, replica_id)).close()  # a source gone, or changed
    return found


def worker_reader(binding: SourceBinding, replica_id: int) -> BinlogReader:
    """This worker's reader of a source, kept between micro-batches.

    A reader checks the server once and keeps a control connection; a new one per
    batch would redo that each time (about a third of a small batch's read).
    """
    key = (binding.spec, replica_id)  # the whole spec: its tables decide what is read
    reader = _readers.get(key)
    if reader is None:
        reader = _readers[key] = BinlogReader(binding.spec, replica_id=replica_id)
    return reader


def _drop_reader(reader: BinlogReader) -> None:
    for key, known in list(_readers.items()):
        if known is reader:
            del _readers[key]
    reader.close()


class _Batcher:
    """Collects stage records into Arrow record batches of bounded size."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._columns: list[list[Any]] = [[] for _ in ARROW_SCHEMA]
        self._types: dict[tuple[tuple[str, str], ...], str] = {}

    def add(self, record: StageRecord) -> pa.RecordBatch | None:
        out = record.record
        if type(out) is KafkaRecord:
            self._append(
                RecordType.KAFKA, record.deployment, out.topic, out.key, out.value, out.headers
            )
        else:
            assert type(out) is IndexAction
            document = None if out.document is None else json.dumps(out.document).encode()
            self._append(
                RecordType.ELASTICSEARCH, record.deployment, out.index, None, None, None,
                out.doc_id, out.version, document, self._types_json(out.column_types),
                out.dead_letter, out.change,
            )  # fmt: skip
        return self.flush() if len(self._columns[0]) >= BATCH_ROWS else None

    def _types_json(self, types: Mapping[str, str]) -> str:
        """The JSON of a table's column types, written once per table shape."""
        shape = tuple(types.items())
        text = self._types.get(shape)
        if text is None:
            text = self._types[shape] = json.dumps(types)
        return text

    def _append(self, *row: Any) -> None:
        """One row: the source, then the given columns in schema order, then nulls."""
        columns = self._columns
        columns[0].append(self.source)
        for column, value in zip(columns[1:], row, strict=False):
            column.append(value)
        for column in columns[1 + len(row) :]:
            column.append(None)

    def add_stats(self, counts: StageCounts) -> None:
        self._add_marker(RecordType.STATS, counts.to_json())

    def add_hold(self, epoch: int) -> None:
        """First row of a cluster member's partition: the epoch its source was read
        at, which the writer's Kafka transactions are fenced by."""
        self._add_marker(RecordType.HOLD, json.dumps({"epoch": epoch}).encode())

    def _add_marker(self, record_type: RecordType, value: bytes) -> None:
        self._append(record_type, "", "", None, value)

    def flush(self) -> pa.RecordBatch | None:
        if not self._columns[0]:
            return None
        batch = pa.RecordBatch.from_arrays(
            [pa.array(c, type=f.type) for c, f in zip(self._columns, ARROW_SCHEMA, strict=True)],
            schema=ARROW_SCHEMA,
        )
        self._columns = [[] for _ in ARROW_SCHEMA]
        return batch


def position_to_offset(
    position: BinlogPosition, binding: SourceBinding | None = None
) -> dict[str, Any]:
    """A source's offset: its position, and the hold (epoch, generation) it was read under."""
    return {
        **position_to_json(position),
        "epoch": binding.epoch if binding else 0,
        "generation": binding.generation if binding else 0,
    }


def _hold(offset: dict[str, Any]) -> tuple[int, int]:
    return int(offset.get("epoch", 0)), int(offset.get("generation", 0))


def offset_to_position(offset: dict[str, Any]) -> BinlogPosition:
    return position_from_json(offset)


@dataclass(frozen=True)
class SourceRange(InputPartition):  # type: ignore[misc]
    """Read one source from ``start`` (exclusive) to ``end`` (inclusive)."""

    config_path: str
    source: str
    start: dict[str, Any]
    end: dict[str, Any]
    shard: int = 0
    shards: int = 1
    gate: list[Any] | None = None
    """The history tasks' ``Gate`` as JSON, when any task of the source needs one."""


@dataclass(frozen=True)
class ChunkRange(InputPartition):  # type: ignore[misc]
    """Read one chunk of a history task (see ``dbus_spark.history``)."""

    config_path: str
    source: str
    end: dict[str, Any]
    """The source's offset of the batch: the hold the chunk was planned under."""
    chunk: list[Any]
    """A ``PlannedChunk`` as JSON."""
    seq: int
    deployment: str
    table: str
    unchunked: bool
    where: str | None = None
    deletes: tuple[tuple[str, str], ...] = ()
    """A repair's (destination, key text) pairs to delete if the read finds no row."""


class BinlogDataSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("dbus_binlog").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_binlog"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BinlogSourceReader(
            self.options["config"],
            shards=int(self.options.get("shards", 1)),
            chunk_tasks=int(self.options.get("chunk_tasks", 1)),
        )


class BinlogSourceReader(DataSourceStreamReader):  # type: ignore[misc]
    """Spark's reader of the ``dbus_binlog`` source: plans each micro-batch's positions
    and partitions on the driver, and reads a partition on an executor."""

    def __init__(self, config_path: str, *, shards: int = 1, chunk_tasks: int = 1) -> None:
        self._config_path = config_path
        self._shards = max(1, shards)
        self._chunk_tasks = max(1, chunk_tasks)
        self._config_mtime = os.stat(config_path).st_mtime
        self._config = load_config(config_path)
        self._readers: dict[str, BinlogReader] = {}
        self._history = HistoryStore(store_path(self._config.checkpoint_dir))
        self._manifests = _manifests(self._config)

    def _current(self) -> RuntimeConfig:
        """The configuration as the runtime last wrote it (sources come and go in a cluster)."""
        mtime = os.stat(self._config_path).st_mtime
        if mtime != self._config_mtime:
            self._config = load_config(self._config_path)
            self._config_mtime = mtime
            self._manifests = _manifests(self._config)
            for name in set(self._readers) - {b.spec.name for b in self._config.sources}:
                self._readers.pop(name).close()
        return self._config

    def _reader(self, binding: SourceBinding) -> BinlogReader:
        reader = self._readers.get(binding.spec.name)
        if reader is None:
            # The driver's reader only asks for positions; it never streams.
            reader = BinlogReader(binding.spec, replica_id=binding.replica_id)
            self._readers[binding.spec.name] = reader
        return reader

    def initialOffset(self) -> dict[str, Any]:
        return {
            b.spec.name: position_to_offset(self._reader(b).resolve_start(b.start), b)
            for b in self._current().sources
        }

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        config = self._current()
        self._history.reload()
        if config.fencing is None:
            take_requests(
                config.checkpoint_dir, self._history,
                {b.spec.name: self._reader(b) for b in config.sources}, self._manifests,
            )  # fmt: skip
        latest, planned = {}, False
        for binding in config.sources:
            reader = self._reader(binding)
            offset = position_to_offset(reader.master_position(), binding)
            name = binding.spec.name
            if config.fencing is None:
                # A cluster member does not read history yet: its progress would
                # have to move with the source (ZooKeeper), not stay in this runtime.
                self._history.consider(reader, self._manifests)
            if start and name in start and _hold(start[name]) == _hold(offset):
                self._history.settle(name, offset_to_position(start[name]))
            chunks = plan_chunks(
                reader, self._history.active(name), chunk_rows=config.chunk_rows,
                budget=self._chunk_tasks,
            )  # fmt: skip
            if chunks:
                offset["chunks"] = [chunk.to_json() for chunk in chunks]
                planned = True
            replays = [r for r in self._history.replays(name).values() if not r.finished]
            if replays:
                offset["replays"] = [[r.deployment, r.run, r.cursor] for r in replays]
                planned = True
            latest[name] = offset
        if start is not None and not planned and _same_positions(start, latest):
            return start  # nothing to read: no micro-batch
        return latest

    def partitions(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Sequence[SourceRange | ChunkRange | ReplayRange]:
        config = self._current()
        self._history.reload()
        moved = []
        for name, upto in end.items():
            begin = start.get(name)
            if begin is None or _hold(begin) != _hold(upto):
                # Gained (or regained) in a cluster: resume where the last owner
                # committed, not where this runtime's own checkpoint left off.
                binding = next((b for b in config.sources if b.spec.name == name), None)
                if binding is None or not isinstance(binding.start, BinlogPosition):
                    continue
                begin = position_to_offset(binding.start, binding)
            if _moved(begin, upto):
                moved.append((name, begin, upto))
        split = max(1, self._shards // max(1, len(moved)))
        ranges: list[SourceRange | ChunkRange | ReplayRange] = []
        for name, begin, upto in moved:
            count = split if _span(begin, upto) >= SHARD_MIN_BYTES else 1
            gate = Gate(self._history.gated(name))
            ranges += [
                SourceRange(
                    self._config_path,
                    name,
                    begin,
                    upto,
                    index,
                    count,
                    gate.to_json() if gate else None,
                )
                for index in range(count)
            ]
        for name, upto in end.items():
            for deployment, run, cursor in upto.get("replays", ()):
                replay = self._history.replays(name).get(deployment)
                if replay is None or replay.run != run:
                    continue
                ranges.append(
                    ReplayRange(self._config_path, name, upto, deployment, run, cursor,
                                replay.end, replay.route, replay.since, replay.until)
                )  # fmt: skip
            tasks = self._history.tasks(name)
            for seq, data in enumerate(upto.get("chunks", ())):
                chunk = PlannedChunk.from_json(data)
                task = tasks.get(chunk.task)
                if task is None:
                    continue
                ranges.append(
                    ChunkRange(
                        self._config_path,
                        name,
                        upto,
                        data,
                        seq,
                        task.deployment,
                        task.table,
                        task.unchunked,
                        task.where,
                        tuple(task.deletes),
                    )
                )
        return ranges

    def read(self, partition: SourceRange | ChunkRange | ReplayRange) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChunkRange):
            yield from _read_chunk(partition)
            return
        if isinstance(partition, ReplayRange):
            yield from _read_replay(partition)
            return
        config, stage = worker_stage(partition.config_path)
        if not config.reads(partition.source, *_hold(partition.end)):
            # Planned before a cluster moved the source away (or before this runtime
            # lost sight of it): read nothing, so nothing stale reaches the sinks. The
            # batch's position is not committed; whoever holds the source now reads
            # the range from the committed position.
            log.info("dbus_binlog: %s moved away since this batch was planned", partition.source)
            batcher = _Batcher(partition.source)
            batcher.add_stats(StageCounts())
            last = batcher.flush()
            if last is not None:
                yield last
            return
        binding = config.source(partition.source)
        shard = Shard(partition.shard, partition.shards)
        # Every replication connection needs its own id.
        reader = worker_reader(binding, binding.reader_replica_id(shard.index))
        counts = StageCounts(started=time.time())
        counts.positions[partition.source] = str(offset_to_position(partition.end))
        batcher = _Batcher(partition.source)
        if binding.epoch:
            batcher.add_hold(binding.epoch)
        gate = Gate.from_json(partition.gate) if partition.gate else None
        began = time.monotonic()
        try:
            for item in reader.read(
                offset_to_position(partition.start),
                stop=offset_to_position(partition.end),
                shard=shard,
            ):
                if type(item) is RowChange:
                    for record in stage.process(item, counts, gate):
                        batch = batcher.add(record)
                        if batch is not None:
                            yield batch
                elif type(item) is TransactionCommit:
                    counts.last_commit[partition.source] = item.commit_time.timestamp()
                elif isinstance(item, SchemaChange) and not shard.index:
                    counts.ddl += 1  # every shard sees it; count it once
        except BaseException:
            _drop_reader(reader)  # the next attempt starts from a fresh connection
            raise
        counts.read_seconds = time.monotonic() - began
        batcher.add_stats(counts)
        last = batcher.flush()
        if last is not None:
            yield last

    def commit(self, end: dict[str, Any]) -> None:
        log.info("dbus_binlog: committed %s", end)

    def stop(self) -> None:
        for reader in self._readers.values():
            reader.close()


@dataclass(frozen=True)
class ReplayRange(InputPartition):  # type: ignore[misc]
    """Read a part of a replay: one deployment over retained binlog (``history``)."""

    config_path: str
    source: str
    end: dict[str, Any]
    """The source's offset of the batch: the hold the part was planned under."""
    deployment: str
    run: int
    start: dict[str, Any]
    stop: dict[str, Any]
    route: str | None
    since: float | None
    until: float | None


REPLAY_ROWS = 20_000
"""Rows a replay reads per micro-batch at most (it stops at the next commit)."""


def _read_replay(partition: ReplayRange) -> Iterator[pa.RecordBatch]:
    """A part of a replay: retained binlog through one deployment only."""
    return _one_deployment(partition, _replay_part)


def _replay_part(
    partition: ReplayRange,
    stage: FunctionStage,
    binding: SourceBinding,
    batcher: _Batcher,
    counts: StageCounts,
) -> Iterator[pa.RecordBatch]:
    reader = worker_reader(binding, replica_id_for(
        f"{binding.replica_id}/replay/{partition.deployment}"))  # fmt: skip
    start, stop = position_from_json(partition.start), position_from_json(partition.stop)
    route = None if partition.route is None else Destination.parse(partition.route)
    reached, rows, ended = partition.start, 0, True
    began = time.monotonic()
    if not stop.file or not start.file or position_order(start) < position_order(stop):
        items = reader.read(start, stop=stop)
        try:
            for item in items:
                if type(item) is RowChange:
                    moment = item.commit_time.timestamp()
                    if partition.since is not None and moment < partition.since:
                        continue
                    if partition.until is not None and moment > partition.until:
                        break
                    rows += 1
                    for record in stage.process_only(partition.deployment, item, counts,
                                                     route):  # fmt: skip
                        batch = batcher.add(record)
                        if batch is not None:
                            yield batch
                elif type(item) is TransactionCommit:
                    reached = position_to_json(item.position)
                    if rows >= REPLAY_ROWS and (
                        not stop.file or position_order(item.position) < position_order(stop)
                    ):
                        ended = False
                        break
        except BaseException:
            _drop_reader(reader)
            raise
        finally:
            items.close()
    counts.read_seconds = time.monotonic() - began
    counts.replays.append({
        "source": partition.source, "deployment": partition.deployment,
        "run": partition.run, "start": partition.start, "stop": reached, "rows": rows,
        "ended": ended,
    })  # fmt: skip


def _read_chunk(partition: ChunkRange) -> Iterator[pa.RecordBatch]:
    """One history chunk, through its deployment's functions only."""
    return _one_deployment(partition, _chunk_rows)


def _chunk_rows(
    partition: ChunkRange,
    stage: FunctionStage,
    binding: SourceBinding,
    batcher: _Batcher,
    counts: StageCounts,
) -> Iterator[pa.RecordBatch]:
    reader = worker_reader(binding, binding.replica_id)
    chunk = PlannedChunk.from_json(partition.chunk)
    task = HistoryTask(partition.deployment, partition.table, (), False,
                       unchunked=partition.unchunked)  # fmt: skip
    began = time.monotonic()
    position: dict[str, Any] = {}
    rows = 0
    found: set[str] = set()
    read: ChunkRead | None = None
    try:
        for item in read_chunk(
            reader, chunked_of(reader, task), key_from_json(chunk.lower),
            key_from_json(chunk.upper), where=partition.where,
        ):  # fmt: skip
            if type(item) is ChunkRead:
                position = position_to_json(item.position)
                read = item
                continue
            assert type(item) is RowChange
            rows += 1
            if partition.deletes:
                found.update(stage.sink_keys(item))
            for record in stage.process_snapshot(partition.deployment, item, counts):
                batch = batcher.add(record)
                if batch is not None:
                    yield batch
        if read is not None:
            for record in _repair_deletes(partition, stage, read, found, counts, reader):
                batch = batcher.add(record)
                if batch is not None:
                    yield batch
    except BaseException:
        _drop_reader(reader)
        raise
    counts.read_seconds = time.monotonic() - began
    runtime_logger().info(
        "history: read chunk %s of %s for %s: %d rows at %s in %.3fs",
        _bounds(chunk), partition.table, partition.deployment, rows,
        position_from_json(position) if position else "-", counts.read_seconds,
    )  # fmt: skip
    counts.chunks.append(
        ChunkDone(
            partition.source,
            chunk.task,
            chunk.lower,
            chunk.upper,
            position,
            rows,
            partition.seq,
            chunk.run,
            position_to_json(offset_to_position(partition.end)),
        ).to_json()
    )


def _one_deployment(
    partition: Any, read: Callable[..., Iterator[pa.RecordBatch]]
) -> Iterator[pa.RecordBatch]:
    """A partition read for one deployment, its stage counts last. Planned before the
    source moved away or the deployment went, it reads nothing and records nothing,
    so its work is planned again where it is read now."""
    config, stage = worker_stage(partition.config_path)
    batcher = _Batcher(partition.source)
    counts = StageCounts(started=time.time())
    if config.reads(partition.source, *_hold(partition.end)) and stage.has_deployment(
        partition.deployment
    ):
        binding = config.source(partition.source)
        if binding.epoch:
            batcher.add_hold(binding.epoch)
        yield from read(partition, stage, binding, batcher, counts)
    batcher.add_stats(counts)
    last = batcher.flush()
    if last is not None:
        yield last


def _repair_deletes(
    partition: ChunkRange,
    stage: FunctionStage,
    read: ChunkRead,
    found: set[str],
    counts: StageCounts,
    reader: BinlogReader,
) -> Iterator[StageRecord]:
    """Deletes of the keys a repair named that its read did not find, as of its position."""
    missing = [(d, text) for d, text in partition.deletes if text not in found]
    if not missing:
        return
    chunked = chunked_of(reader, HistoryTask(partition.deployment, partition.table, (), False))
    info = reader.server_info()
    database, table = partition.table.split(".", 1)
    for destination, text in missing:
        key = key_of_text(text, len(chunked.key))
        if key is None:
            continue
        image = dict(zip(chunked.key, key, strict=True))
        change = RowChange(
            source=partition.source, database=database, table=table, op=Operation.DELETE,
            before=image, after=None, primary_key=chunked.key, position=read.position,
            commit_time=read.taken, server_id=info.identity,
        )  # fmt: skip
        counts.delivered[partition.deployment] += 1
        yield stage.deletion(partition.deployment, destination, change)


def _bounds(chunk: PlannedChunk) -> str:
    lower, upper = key_from_json(chunk.lower), key_from_json(chunk.upper)
    low = "-inf" if lower is None else list(lower)
    return f"({low}, {'+inf' if upper is None else list(upper)}]"


def _manifests(config: RuntimeConfig) -> list[Manifest]:
    return [load_manifest(path) for path in config.deployments]


def _same_positions(start: dict[str, Any], end: dict[str, Any]) -> bool:
    """Whether no source moved or changed hands between two offsets."""
    if set(start) != set(end):
        return False
    return all(
        not _moved(start[name], end[name]) and _hold(start[name]) == _hold(end[name])
        for name in end
    )


def _span(start: dict[str, Any], end: dict[str, Any]) -> float:
    """Binlog bytes between two offsets (unknown, so unbounded, across files)."""
    if start["file"] != end["file"]:
        return float("inf")
    return int(end["pos"]) - int(start["pos"])


def _moved(start: dict[str, Any], end: dict[str, Any]) -> bool:
    return (start["file"], int(start["pos"])) != (end["file"], int(end["pos"]))
