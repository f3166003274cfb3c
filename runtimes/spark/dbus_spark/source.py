"""The binlog streaming source: a PySpark Python data source named ``dbus_binlog``.

Offsets are one binlog position per source, always at a transaction boundary, as
JSON (``{"shop": {"file": "...", "pos": 4, "gtid": "0-1-7"}}``). The driver asks
each source for its newest committed position to plan a micro-batch; each source
with new data becomes one input partition, read in commit order by one task, so
several sources are read in parallel by executors.

Each output row is one captured item, pickled whole (``change``), with the
columns Spark needs to route or repartition it.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from dbus_fn.capture import BinlogReader
from dbus_fn.events import BinlogPosition, RowChange, SchemaChange
from dbus_spark.config import SourceBinding, load_config

log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("source", StringType(), False),
        StructField("kind", StringType(), False),  # "row" or "ddl"
        StructField("db", StringType(), True),
        StructField("tbl", StringType(), True),
        StructField("op", StringType(), True),
        StructField("file", StringType(), False),
        StructField("pos", LongType(), False),
        StructField("row_index", IntegerType(), False),
        StructField("change", BinaryType(), False),
    ]
)


def position_to_offset(position: BinlogPosition) -> dict[str, Any]:
    return {"file": position.file, "pos": position.pos, "gtid": position.gtid or ""}


def offset_to_position(offset: dict[str, Any]) -> BinlogPosition:
    return BinlogPosition(offset["file"], int(offset["pos"]), offset.get("gtid") or None)


@dataclass(frozen=True)
class SourceRange(InputPartition):  # type: ignore[misc]
    """Read one source from ``start`` (exclusive) to ``end`` (inclusive)."""

    config_path: str
    source: str
    start: dict[str, Any]
    end: dict[str, Any]


class BinlogDataSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("dbus_binlog").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_binlog"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BinlogStreamReader(self.options["config"])


class BinlogStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, config_path: str) -> None:
        self._config_path = config_path
        self._config = load_config(config_path)
        self._readers: dict[str, BinlogReader] = {}

    def _reader(self, binding: SourceBinding) -> BinlogReader:
        reader = self._readers.get(binding.spec.name)
        if reader is None:
            # The driver's reader only asks for positions; it never streams.
            reader = BinlogReader(binding.spec, server_id=binding.server_id)
            self._readers[binding.spec.name] = reader
        return reader

    def initialOffset(self) -> dict[str, Any]:
        return {
            b.spec.name: position_to_offset(self._reader(b).resolve_start(b.start))
            for b in self._config.sources
        }

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        return {
            b.spec.name: position_to_offset(self._reader(b).master_position())
            for b in self._config.sources
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[SourceRange]:
        return [
            SourceRange(self._config_path, name, start[name], end[name])
            for name in end
            if name in start and _moved(start[name], end[name])
        ]

    def read(self, partition: SourceRange) -> Iterator[tuple[Any, ...]]:
        config = load_config(partition.config_path)
        binding = config.source(partition.source)
        reader = BinlogReader(binding.spec, server_id=binding.server_id)
        try:
            for item in reader.read(
                offset_to_position(partition.start), stop=offset_to_position(partition.end)
            ):
                if isinstance(item, RowChange):
                    yield (
                        item.source,
                        "row",
                        item.database,
                        item.table,
                        item.op.value,
                        item.position.file,
                        item.position.pos,
                        item.row_index,
                        pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL),
                    )
                elif isinstance(item, SchemaChange):
                    yield (
                        item.source,
                        "ddl",
                        item.database,
                        item.table,
                        None,
                        item.position.file,
                        item.position.pos,
                        0,
                        pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL),
                    )
        finally:
            reader.close()

    def commit(self, end: dict[str, Any]) -> None:
        log.info("dbus_binlog: committed %s", end)

    def stop(self) -> None:
        for reader in self._readers.values():
            reader.close()


def _moved(start: dict[str, Any], end: dict[str, Any]) -> bool:
    return (start["file"], int(start["pos"])) != (end["file"], int(end["pos"]))
