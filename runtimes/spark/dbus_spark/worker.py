"""What a Spark Python worker keeps between tasks of the ``dbus_binlog`` source, and
the rows it hands Spark.

A worker loads the runtime's configuration and function stage once per shipment
(``dbus_spark.shipment``: what each task carries of the driver's) and keeps one
binlog reader per source and replication id; its output rows are typed records
and control rows, batched into Arrow record batches of ``ARROW_SCHEMA``. Offsets
are a source's position and the hold it was read under.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from dbus_fn.capture import (
    BinlogReader,
    SourceSpec,
    position_from_json,
    position_to_json,
)
from dbus_fn.events import BinlogPosition
from dbus_spark.config import RuntimeConfig, SourceBinding
from dbus_spark.metrics.live import Publisher
from dbus_spark.shipment import Shipment, unpacked
from dbus_spark.sinks.clusters import Routes
from dbus_spark.sinks.records import IndexAction, KafkaRecord, RecordType
from dbus_spark.stage import FunctionStage, StageCounts, StageRecord

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
BATCH_ROWS = 2048

_stages: dict[str, tuple[RuntimeConfig, FunctionStage]] = {}
_readers: dict[tuple[SourceSpec, int], BinlogReader] = {}
_functions = Publisher("functions", dict)


def publish_functions(reports: str | None, stage: FunctionStage) -> None:
    """When metrics are on (``reports``), publish this worker's function counts
    (``dbus_spark.metrics.live``)."""
    if reports is not None:
        _functions.use(reports, stage.function_stats)


def worker_stage(shipment: Shipment) -> tuple[RuntimeConfig, FunctionStage]:
    """The configuration and function stage a task was planned with, loaded once per
    shipment by this worker process (``dbus_spark.shipment``)."""
    found = _stages.get(shipment.key)
    if found is None:
        _stages.clear()
        config = unpacked(shipment)
        found = (config, FunctionStage(config.deployments, type_prefix=config.type_prefix))
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
    """Collects stage records into Arrow record batches of bounded size."""

    def __init__(self, source: str, routes: Routes | None = None) -> None:
        self.source = source
        self._columns: list[list[Any]] = [[] for _ in ARROW_SCHEMA]
        self._types: dict[tuple[tuple[str, str], ...], str] = {}
        if routes:  # the writer's sinks learn where these deployments write first
            self._add_marker(RecordType.ROUTES, json.dumps(routes).encode())

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

    def add_delivered(self, counts: dict[str, Any]) -> None:
        """What the read task's own sinks delivered (``TaskReport.counts``)."""
        self._add_marker(RecordType.DELIVERED, json.dumps(counts).encode())

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


def hold(offset: dict[str, Any]) -> tuple[int, int]:
    return int(offset.get("epoch", 0)), int(offset.get("generation", 0))


def offset_to_position(offset: dict[str, Any]) -> BinlogPosition:
    return position_from_json(offset)
