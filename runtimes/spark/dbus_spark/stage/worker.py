"""What a Spark Python worker keeps between tasks of the ``dbus_binlog`` source, and
the rows it hands Spark.

A worker loads the runtime's configuration and function stage once per shipment
(``dbus_spark.stage.shipment``: what each task carries of the driver's) and keeps one
binlog reader per source and replication id. A read task writes to the sinks
itself (``dbus_spark.sinks.writer.Output``); the rows it hands Spark are its counts only,
in one Arrow record batch of ``ARROW_SCHEMA`` (``Batcher``). Offsets are a source's
position and the hold it was read under.
"""

from __future__ import annotations

import array
from typing import Any

import pyarrow as pa

from dbus_fn.capture import (
    BinlogReader,
    SourceSpec,
    position_from_json,
    position_to_json,
)
from dbus_fn.events import BinlogPosition
from dbus_spark.config import logs
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding
from dbus_spark.stage.counts import SinkCounts, StageCounts
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.stage.shipment import Shipment, unpacked
from dbus_spark.state.live_counters import Publisher
from dbus_spark.state.records import RecordType

ARROW_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), False),
        pa.field("record_type", pa.string(), False),  # a RecordType
        pa.field("value", pa.binary()),  # its counts, as JSON
    ]
)

_stages: dict[str, tuple[RuntimeConfig, FunctionStage]] = {}
_readers: dict[tuple[SourceSpec, int], BinlogReader] = {}
_functions = Publisher("functions", dict)


def publish_functions(reports: str | None, stage: FunctionStage) -> None:
    """When metrics are on (``reports``), publish this worker's function counts
    (``dbus_spark.state.live_counters``)."""
    if reports is not None:
        _functions.use(reports, stage.function_stats)


def worker_stage(shipment: Shipment) -> tuple[RuntimeConfig, FunctionStage]:
    """The configuration and function stage a task was planned with, loaded once per
    shipment by this worker process (``dbus_spark.stage.shipment``)."""
    found = _stages.get(shipment.key)
    if found is None:
        if not _stages:
            logs.stacks_on_signal()  # this worker's first task
            logs.ignore_ctrl_c()
        _stages.clear()
        config = unpacked(shipment)
        stage = FunctionStage(
            config.deployments, type_prefix=config.type_prefix, window=config.preview_window
        )
        found = (config, stage)
        _stages[shipment.key] = found
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


def drop_reader(reader: BinlogReader) -> None:
    for key, known in list(_readers.items()):
        if known is reader:
            del _readers[key]
    reader.close()


class Batcher:
    """A read task's rows for Spark: what its stage counted and its sinks delivered."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._rows: list[tuple[RecordType, bytes]] = []

    def add_stats(self, counts: StageCounts) -> None:
        self._rows.append((RecordType.STATS, counts.to_bytes()))

    def add_delivered(self, counts: SinkCounts) -> None:
        """What the read task's own sinks took."""
        self._rows.append((RecordType.DELIVERED, counts.to_bytes()))

    def add(self, kind: str, value: bytes) -> None:
        """A row ``take`` gave (from another process: ``dbus_spark.reads.open_read``)."""
        self._rows.append((RecordType(kind), value))

    def take(self) -> list[tuple[str, bytes]]:
        """The rows so far, as (kind, value), without making them a record batch."""
        rows, self._rows = self._rows, []
        return [(str(kind), value) for kind, value in rows]

    def flush(self) -> pa.RecordBatch | None:
        if not self._rows:
            return None
        kinds, values = zip(*self._rows, strict=True)
        self._rows = []
        source = self.source.encode()
        return pa.RecordBatch.from_arrays(
            [
                _arrow_column(pa.string(), [source] * len(kinds)),
                _arrow_column(pa.string(), [kind.encode() for kind in kinds]),
                _arrow_column(pa.binary(), list(values)),
            ],
            schema=ARROW_SCHEMA,
        )


def _arrow_column(kind: pa.DataType, values: list[bytes]) -> pa.Array:
    """A string or binary column made from its buffers: ``pa.array`` on a Python list
    first asks whether it is a pandas object, which imports pandas (half a CPU second)
    into every read task's worker."""
    offsets = array.array("i", [0])
    for value in values:
        offsets.append(offsets[-1] + len(value))
    data = [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(values))]
    return pa.Array.from_buffers(kind, len(values), data)


def position_to_offset(
    position: BinlogPosition, binding: SourceBinding | None = None
) -> dict[str, Any]:
    """A source's offset: its position, and the hold (epoch, generation) it was read under."""
    return {
        **position_to_json(position),
        "epoch": binding.epoch if binding else 0,
        "generation": binding.generation if binding else 0,
    }


def hold(offset: dict[str, Any]) -> tuple[int, int]:
    return int(offset.get("epoch", 0)), int(offset.get("generation", 0))


def offset_to_position(offset: dict[str, Any]) -> BinlogPosition:
    return position_from_json(offset)
