"""A ``SourceRange``, one source's binlog between two positions as the driver plans it
(``dbus_spark.planning.source``), and its read on an executor: the source's binlog
from the range's start, every change through the function stage to the sinks as it
is read, handed to the read carried across batches where it may be
(``dbus_spark.reads.open_read``), else read open by the task itself; Spark gets its counts."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from dbus_fn.capture import Shard, coordinates, position_to_json
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.reads import open_read, open_read_control
from dbus_spark.reads.shared_read import SharedItems, change_order, read_events
from dbus_spark.reads.task import ReadTask, planned_here, reading
from dbus_spark.sinks.writer import paces
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.stage.shipment import Shipment
from dbus_spark.stage.worker import offset_to_position, worker_reader
from dbus_spark.state.history import Gate
from dbus_spark.state.progress import Admission

log = logging.getLogger("dbus_spark.planning.source")


@dataclass(frozen=True)
class SourceRange(InputPartition):  # type: ignore[misc]
    """Read one source from ``start`` (exclusive) to ``end`` (inclusive)."""

    shipment: Shipment
    source: str
    start: dict[str, Any]
    end: dict[str, Any]
    shard: int = 0
    shards: int = 1
    gate: dict[str, Any] | None = None
    """The history tasks' ``Gate`` as JSON, when any task of the source needs one."""
    admission: dict[str, Any] | None = None
    """Which deployments the read serves from where (``progress.Admission`` as JSON),
    when some are not with the stream."""


def read_source_range(
    partition: SourceRange,
    config: RuntimeConfig,
    stage: FunctionStage,
    reports: str | None,
    run: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Read one source's range (or its key shard) and hand Spark the read's counts;
    none if the query ``run`` that planned it stopped (``open_read.mark_stopped``)."""
    if not planned_here(config, partition.source, partition.end):
        # Or this runtime lost sight of it. The batch's position is not committed.
        log.info("dbus_binlog: %s moved away since this batch was planned", partition.source)
        yield from ReadTask(partition.source).rows()
        return
    binding = config.source(partition.source)
    shard = Shard(partition.shard, partition.shards)
    # Every replication connection needs its own id.
    reader = worker_reader(binding, binding.reader_replica_id(shard.index))
    gate = Gate.from_json(partition.gate) if partition.gate else None
    if open_read_control.carries(config, partition, gate, shard.count):
        yield from open_read.read_open(partition, config, stage, reader, reports, run)
        return
    open_read.refuse_if_stopped(config.checkpoint_dir, partition.source, run)
    handed = open_read.quiet(config.checkpoint_dir, partition.source)
    task = ReadTask(partition.source)
    counts, began = task.counts, task.began
    counts.positions[partition.source] = str(offset_to_position(partition.end))
    handed.add_to(task.batcher)  # counted once, and read on from where it got
    # Read open past the planned end when this task alone reads the source, no
    # history merges with it and no fence holds its writes back.
    is_open = (
        config.open_read_seconds > 0
        and shard.count == 1
        and gate is None
        and config.fencing is None
    )
    # The read writes to the sinks itself, as it reads (``writer.Output``); with a
    # detach bound, one deployment's sink that does not answer is that deployment's
    # alone (with one deployment, detaching it would free no other: its sinks are
    # waited for).
    paced = paces(config, stage)
    task.deliver_to(config, stage, paced=paced, lane="" if shard.count == 1 else None)
    planned_end = offset_to_position(partition.end)
    items = SharedItems(
        partition.source, stage, counts, planned_end,
        admission=Admission.from_json(partition.admission), paced=paced, began=began,
        gate=gate, count_ddl=not shard.index,  # every shard sees it; count it once
    )  # fmt: skip
    with reading(reader):
        task.deliver(reader.read(
            handed.past(offset_to_position(partition.start))
            if shard.count == 1
            else offset_to_position(partition.start),
            stop=planned_end,
            shard=shard,
            until=began + config.open_read_seconds if is_open else None,
            catch_up=began + open_read.CATCH_UP * config.open_read_seconds if is_open else None,
        ), items, order=change_order)  # fmt: skip
    task.read_done()
    # Acknowledged up to here: the next batch may start past it (for a
    # deployment its sinks did not take, from its own start again).
    # The bound counts from the read's start: what it handed over first has
    # waited since, and the changes committed meanwhile wait for the next batch.
    bound = config.detach_seconds - (time.monotonic() - began)
    failed = task.settle(max(1.0, bound))
    counts.progress += read_events(partition, items.admission, failed, counts)
    reached = items.reached
    if coordinates(reached) > coordinates(planned_end):
        counts.reached[partition.source] = position_to_json(reached)
        counts.positions[partition.source] = str(reached)
    yield from task.rows()
