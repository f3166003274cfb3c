"""A detached deployment's own read: the binlog from its position, through its
functions alone, to its own sinks (see ``dbus_spark.state.progress``).

It runs as a task of its own in the micro-batch, beside the shared read, and writes
as it reads: it reads for ``READ_FOR`` of its ``seconds`` (to a transaction boundary)
and gives its sinks until ``SETTLED_BY``, so that it ends before the shared read
beside it and never holds the batch, and with it the other deployments. It reports
how far its sinks took everything (a transaction boundary) and whether it reached
the batch's end; a read its sinks did not take, or a position the server no longer
has, reports why, and its position holds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from dbus_fn.capture import position_from_json, replica_id_for
from dbus_fn.errors import DbusError
from dbus_spark.config.runtime import SourceBinding
from dbus_spark.reads.history_chunks import SETTLED_BY, OwnRead, one_deployment, read_own
from dbus_spark.reads.task import ReadTask
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.stage.shipment import Shipment
from dbus_spark.stage.worker import worker_reader
from dbus_spark.state.history import Gate
from dbus_spark.state.progress import caught_up_to, not_taken
from dbus_spark.state.records import position_order

# Share of its time a catch-up read reads for; by ``SETTLED_BY`` its sinks have taken
# it all: it ends before the shared read beside it does, so it never holds the batch.
READ_FOR = 0.4


@dataclass(frozen=True)
class CatchUpRange(InputPartition):  # type: ignore[misc]
    """Read ``source`` for ``deployment`` from ``start`` (exclusive) towards the batch's
    end ``end`` (its offset), for at most ``seconds``."""

    shipment: Shipment
    source: str
    deployment: str
    start: dict[str, Any]
    end: dict[str, Any]
    seconds: float
    gate: dict[str, Any] | None = None
    """The source's history ``Gate`` as JSON: a deployment bootstrapping while detached
    gets on its own read only what its chunks do not bring (as on the shared read)."""


def read_catch_up(partition: CatchUpRange) -> Iterator[pa.RecordBatch]:
    # Never longer than its batch's time: the stream goes on meanwhile.
    return one_deployment(partition, _catch_up, paced=True, lane="")


def _catch_up(
    partition: CatchUpRange,
    stage: FunctionStage,
    binding: SourceBinding,
    task: ReadTask,
) -> None:
    counts, began = task.counts, task.began
    name, source = partition.deployment, partition.source
    gate = Gate.from_json(partition.gate) if partition.gate else None
    reader = worker_reader(binding, replica_id_for(f"{binding.replica_id}/catch-up/{name}"))
    start, stop = position_from_json(partition.start), position_from_json(partition.end)
    read = OwnRead(dict(partition.start))
    problem: str | None = None
    if position_order(start) < position_order(stop):
        try:
            read = read_own(
                task, reader, partition.start, stop, name,
                lambda change: stage.process_only(name, change, counts, gate=gate),
                more=lambda: time.monotonic() - began < partition.seconds * READ_FOR,
                undecoded=lambda rows: stage.undecoded(rows, counts, name),
            )  # fmt: skip
        except DbusError as exc:  # a position the server no longer has, say
            problem = f"its own read from {start} failed: {exc}"
    ends = began + partition.seconds * SETTLED_BY
    failed = task.settle(max(0.5, ends - time.monotonic()))
    task.read_done()  # and settled
    problem = problem or failed.get(name)
    if problem is not None:
        counts.progress.append(not_taken(source, name, problem))
    else:
        counts.progress.append(
            caught_up_to(source, name, read.reached, read.commit_time, read.ended)
        )


__all__ = ["CatchUpRange", "read_catch_up"]
