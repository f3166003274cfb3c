"""The history partitions of the ``dbus_binlog`` source: a chunk of a table read for
one deployment (bootstrap, backfill, repair), and a part of a replay.

Each runs in a Spark Python worker beside the binlog partitions of the same
micro-batch, through one deployment's functions only (see ``dbus_spark.state.history``).
Where deployments go at their own pace (``dbus_spark.sinks.writer.paces``), it writes to
its deployment's sinks itself, bounded like the shared read: a read those sinks do
not take reports that it was refused (``StageCounts.refused``), records nothing
done, and is read again after a backoff, so it never holds the batch, and with it
the other deployments.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from dbus_fn.capture import (
    BinlogReader,
    ChunkRead,
    key_from_json,
    position_from_json,
    position_to_json,
    read_chunk,
    replica_id_for,
)
from dbus_fn.events import (
    BinlogPosition,
    Operation,
    ReadItem,
    RowChange,
    TransactionCommit,
    UndecodedRows,
)
from dbus_spark.config.logs import runtime_logger
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding
from dbus_spark.reads.replay_window import ReplayWindow
from dbus_spark.reads.shared_read import change_order
from dbus_spark.reads.task import ReadTask, planned_here, reading
from dbus_spark.sinks.writer import paces
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage, StageRecord
from dbus_spark.stage.shipment import Shipment
from dbus_spark.stage.worker import (
    offset_to_position,
    worker_reader,
    worker_stage,
)
from dbus_spark.state.history.queries import chunked_of, key_of_text
from dbus_spark.state.history.records import (
    ChunkDone,
    HistoryTask,
    PlannedChunk,
    Refusal,
    ReplayPart,
)
from dbus_spark.state.records import position_order


@dataclass(frozen=True)
class ChunkRange(InputPartition):  # type: ignore[misc]
    """Read one chunk of a history task (see ``dbus_spark.state.history``)."""

    shipment: Shipment
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
    started: float = 0.0
    """When its task began (``HistoryTask.started``): no other task's chunk shares its
    lane (``chunk_lane``)."""


@dataclass(frozen=True)
class ReplayRange(InputPartition):  # type: ignore[misc]
    """Read a part of a replay: one deployment over retained binlog (``history``)."""

    shipment: Shipment
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
    started: float = 0.0
    """When the replay began (``ReplayTask.started``): no other replay shares its lanes
    (``replay_lane``)."""


SETTLED_BY = 0.75
"""Share of its time by which a read for one deployment (a catch-up, a history read)
has its sinks take what it put: it ends before the shared read beside it does."""
OWN_READ_SECONDS = 2.0
"""A read for one deployment's time where open reads are off."""


def own_read_seconds(config: RuntimeConfig) -> float:
    """How long a read for one deployment takes at most: the open-read time."""
    return config.open_read_seconds or OWN_READ_SECONDS


def history_bound(config: RuntimeConfig) -> float:
    """Seconds a history read's deployment's sinks have to take a write, and what it
    put, where deployments go at their own pace (at most the detach bound): the share
    of a micro-batch a catch-up read gives its sinks, so a refused read (above all in
    a backfill's micro-batch, which reads no binlog) holds the others little longer."""
    return own_read_seconds(config) * SETTLED_BY


def read_replay_range(partition: ReplayRange) -> Iterator[pa.RecordBatch]:
    """A part of a replay: retained binlog through one deployment only, in the replay's
    lane (``replay_lane``)."""
    return one_deployment(partition, _replay_part, lane=replay_lane(partition))


def replay_lane(partition: ReplayRange, part: str = "") -> str:
    """The lane of one replay (exactly once), or of one ``part`` of it read in order
    apart (a Kafka source's partition): a part read again after its records were
    committed (a batch read again, a read its sinks refused) sends none of them, and
    a replay asked again is a lane of its own."""
    return f"replay/{partition.run}/{partition.started!r}" + (f"/{part}" if part else "")


def _replay_part(
    partition: ReplayRange,
    stage: FunctionStage,
    binding: SourceBinding,
    task: ReadTask,
) -> None:
    counts = task.counts
    reader = worker_reader(binding, replica_id_for(
        f"{binding.replica_id}/replay/{partition.deployment}"))  # fmt: skip
    start, stop = position_from_json(partition.start), position_from_json(partition.stop)
    window = ReplayWindow(stage, partition.deployment, counts, route=partition.route,
                          since=partition.since, until=partition.until)  # fmt: skip

    def process(change: RowChange) -> Iterable[StageRecord] | None:
        return None if window.past(change) else window.records(change)

    read = OwnRead(partition.start)
    if not stop.file or not start.file or position_order(start) < position_order(stop):
        read = read_own(task, reader, partition.start, stop, partition.deployment, process,
                        more=lambda: not window.full(),
                        undecoded=lambda item: stage.undecoded(item, counts,
                                                               partition.deployment))  # fmt: skip
    task.read_done()
    if _refused(partition, task):
        return
    counts.replays.append(ReplayPart(
        partition.source, partition.deployment, partition.run, partition.start, read.reached,
        window.rows, read.ended,
    ))  # fmt: skip


@dataclass
class OwnRead:
    """How far a read for one deployment got (``read_own``)."""

    reached: dict[str, Any]
    """The last transaction boundary read (a position, as JSON)."""
    commit_time: float = 0.0
    """Epoch seconds that transaction was committed (0: none read)."""
    ended: bool = True
    """It read up to its stop (else ``more`` stopped it at ``reached``)."""


def read_own(
    task: ReadTask,
    reader: BinlogReader,
    start: dict[str, Any],
    stop: BinlogPosition,
    deployment: str,
    process: Callable[[RowChange], Iterable[StageRecord] | None],
    more: Callable[[], bool],
    undecoded: Callable[[UndecodedRows], Iterable[StageRecord]],
) -> OwnRead:
    """Read the binlog from ``start`` (a position as JSON) to ``stop`` for
    ``deployment`` alone: each change's records (``process``; None: read no further)
    and the dead letters of rows it could not decode (``undecoded``) go to the
    task's sinks, until they refuse them or, at a transaction boundary before
    ``stop``, ``more()`` says no. A failed read drops the reader."""
    read = OwnRead(dict(start))

    def records(item: ReadItem) -> Iterable[StageRecord] | None:
        kind = type(item)
        if kind is RowChange:
            return process(cast(RowChange, item))
        if kind is UndecodedRows:
            return undecoded(cast(UndecodedRows, item))
        if kind is TransactionCommit:
            commit = cast(TransactionCommit, item)
            read.reached = position_to_json(commit.position)
            read.commit_time = commit.commit_time.timestamp()
            if not more() and (
                not stop.file or position_order(commit.position) < position_order(stop)
            ):
                read.ended = False
                return None
        return ()

    items = cast(Generator[ReadItem, None, None], reader.read(position_from_json(start), stop=stop))
    with reading(reader), contextlib.closing(items):
        task.deliver(items, records, refused_by=deployment, order=change_order)
    return read


def read_chunk_range(partition: ChunkRange) -> Iterator[pa.RecordBatch]:
    """One history chunk, through its deployment's functions only, in a lane of its
    own (``chunk_lane``)."""
    return one_deployment(partition, _chunk_rows, lane=chunk_lane(partition))


def chunk_lane(partition: ChunkRange) -> str:
    """The lane of one chunk of one task (exactly once): its records share one order,
    so a transaction carries all of them or none, and a chunk read again once they
    are committed sends none of them; its mark names the position they were read at,
    which the read again reports in place of its own (the merge with the stream
    counts from the snapshot the consumer has)."""
    chunk = PlannedChunk.from_json(partition.chunk)
    bounds = json.dumps([chunk.lower, chunk.upper], separators=(",", ":"))
    return f"chunk/{partition.table}/{partition.started!r}/{bounds}"


def _one_change(_item: Any) -> int:
    """A history chunk's order: the same for all of its rows (``chunk_lane``)."""
    return 0


def _chunk_rows(
    partition: ChunkRange,
    stage: FunctionStage,
    binding: SourceBinding,
    task: ReadTask,
) -> None:
    counts, out = task.counts, task.out
    reader = worker_reader(binding, binding.replica_id)
    chunk = PlannedChunk.from_json(partition.chunk)
    history = HistoryTask(partition.deployment, partition.table, (), False,
                          unchunked=partition.unchunked)  # fmt: skip
    position: dict[str, Any] = {}
    rows = 0
    found: set[str] = set()
    read: ChunkRead | None = None
    second_row_at = 0.0

    def records(item: RowChange | ChunkRead) -> Iterable[StageRecord]:
        nonlocal position, read, rows, second_row_at
        if type(item) is ChunkRead:
            position = position_to_json(item.position)
            read = item
            if out.sinks.in_lanes:
                out.sinks.read_at(partition.deployment, partition.source, position)
            return ()
        assert type(item) is RowChange
        rows += 1
        if rows == 2:  # the first row's records are out, and its lane's transaction open
            second_row_at = time.monotonic()
        if partition.deletes:
            found.update(stage.sink_keys(item))
        return stage.process_snapshot(partition.deployment, item, counts)

    with reading(reader):
        items = read_chunk(
            reader, chunked_of(reader, history), key_from_json(chunk.lower),
            key_from_json(chunk.upper), where=partition.where,
        )  # fmt: skip
        task.deliver(items, records, refused_by=partition.deployment, order=_one_change)
        rows_seconds = time.monotonic() - second_row_at if rows > 1 else 0.0
        if read is not None and not out.refused(partition.deployment):
            for record in _repair_deletes(partition, stage, read, found, counts, reader):
                out.put(record)
    task.read_done()
    if _refused(partition, task):
        return  # not done: the chunk is planned again, after a backoff
    # Read again after its records were committed (a batch read again): they stand,
    # and so does the position they were read at.
    position = out.sinks.committed_at(partition.deployment, partition.source) or position
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
            rows_seconds,
        )
    )


def one_deployment(
    partition: Any, read: Callable[..., None], *, paced: bool = False, lane: str | None = None
) -> Iterator[pa.RecordBatch]:
    """A partition read for one deployment, its stage counts last; ``paced``: it writes
    to its sinks itself, bounded, also where other reads do not (``Output``);
    ``lane``: it reads the deployment's changes of its source in order, in that lane
    (``Output``; a catch-up read's is the stream's). Planned
    before the source moved away or the deployment went, it reads nothing and records
    nothing, so its work is planned again where it is read now."""
    config, stage = worker_stage(partition.shipment)
    task = ReadTask(partition.source)
    if planned_here(config, partition.source, partition.end) and stage.has_deployment(
        partition.deployment
    ):
        task.deliver_to(config, stage, paced=paced or paces(config, stage),
                        bound=None if paced else history_bound(config),
                        lane=lane)  # fmt: skip
        read(partition, stage, config.source(partition.source), task)
    yield from task.rows()


def _refused(partition: Any, task: ReadTask) -> bool:
    """Settle what a history read put; whether its deployment's sinks refused it (then
    it is reported so, and nothing of it counts as read)."""
    reason = task.settle().get(partition.deployment)
    if reason is None:
        return False
    task.counts.refused.append(Refusal(partition.source, partition.deployment, reason))
    return True


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
