"""The frame every read task runs in, whatever reads its items (a binlog stream, a
chunk's SELECT, a Kafka consumer): whether the batch that planned it still holds its
source, its stage counts, its output to the sinks, the one loop that hands each
item's records to them (``deliver``), how long it read, and the rows Spark gets
back, the counts last.

A read is two things passed to ``deliver``: where its items come from, and what
each item is to it (its records; None where the read stops: a planned end, a share
of the batch's time, a row cap). Its sinks refusing its deployment stops it too.

A read is planned for the source as this runtime held it then (``hold``: its epoch
and generation in a cluster). Read after the source moved away, it reads nothing
and records nothing (``planned_here``): whoever holds the source now reads from the
committed position, and nothing stale reaches the sinks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import pyarrow as pa

from dbus_fn.capture import BinlogReader
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.sinks.writer import Output, WorkerSinks
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage, StageRecord
from dbus_spark.stage.worker import Batcher, drop_reader, hold

Item = TypeVar("Item")


def planned_here(config: RuntimeConfig, source: str, end: dict[str, Any]) -> bool:
    """Whether this runtime still holds ``source`` as when the batch whose offset is
    ``end`` was planned."""
    return config.reads(source, *hold(end))


class ReadTask:
    """One read's counts (``counts``), output (``out``, once ``deliver_to`` made it),
    clock (``began``) and rows for Spark (``rows``, or ``take`` across processes)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.batcher = Batcher(source)
        self.counts = StageCounts(started=time.time())
        self.began = time.monotonic()
        self._out: Output | None = None

    def deliver_to(
        self,
        config: RuntimeConfig,
        stage: FunctionStage,
        *,
        paced: bool,
        bound: float | None = None,
        sinks: WorkerSinks | None = None,
        lane: str | None = None,
    ) -> Output:
        """Where the read's records go (``writer.Output``): the worker's sinks, or
        ``sinks`` of its own; each deployment's writes bounded when ``paced``;
        ``lane``: it reads its source in order, whole (then ``deliver`` is given each
        item's ``order``): "" for the source's changes, else the part it reads (a Kafka
        source's partition; ``WorkerSinks.start``)."""
        self._out = Output(config, self.batcher, stage.routes, paced=paced, bound=bound,
                           sinks=sinks, lane=lane)  # fmt: skip
        return self._out

    @property
    def out(self) -> Output:
        assert self._out is not None, "deliver_to first"
        return self._out

    def deliver(
        self,
        items: Iterable[Item],
        records: Callable[[Item], Iterable[StageRecord] | None],
        *,
        refused_by: str | None = None,
        order: Callable[[Item], int | None] | None = None,
    ) -> bool:
        """Hand each item's ``records`` to the sinks as it is read: whether the read
        went through its items, not stopped by ``records`` (None) or by the sinks of
        deployment ``refused_by`` refusing what it put. ``order``: each item's place in
        its source (``shared_read.change_order``), for sinks that write in lanes."""
        put, out = self.out.put, self.out
        sinks = out.sinks
        at = order if order is not None and sinks.in_lanes else None
        for item in items:
            produced = records(item)
            if produced is None:
                return False
            if at is not None:
                sinks.order = at(item)
            for record in produced:
                put(record)
            if refused_by is not None and out.refused(refused_by):
                return False
        return True

    def read_done(self) -> float:
        """Note how long the read read (``StageCounts.read_seconds``), and return it."""
        self.counts.read_seconds = time.monotonic() - self.began
        return self.counts.read_seconds

    def settle(self, within: float | None = None) -> dict[str, str]:
        """Wait for what the read put, counted from its start (``Output.settle``)."""
        return self.out.settle(self.began, within)

    def rows(self) -> Iterator[pa.RecordBatch]:
        """The read's rows for Spark, its counts last."""
        self.batcher.add_stats(self.counts)
        last = self.batcher.flush()
        if last is not None:
            yield last

    def take(self) -> list[tuple[str, bytes]]:
        """The read's rows, its counts last, as (kind, value) to send to the process
        whose task hands them to Spark (``dbus_spark.reads.open_read``)."""
        self.batcher.add_stats(self.counts)
        return self.batcher.take()


@contextlib.contextmanager
def reading(reader: BinlogReader) -> Iterator[None]:
    """A read of ``reader`` that fails drops it: the next attempt starts from a fresh
    connection."""
    try:
        yield
    except BaseException:
        drop_reader(reader)
        raise


__all__ = ["ReadTask", "planned_here", "reading"]
