"""The two data sources the runtime registers with Spark, and nothing else.

``dbus_binlog`` reads the sources (``dbus_spark.planning.source``); ``dbus_functions`` is the
sink whose tasks sum what the reads delivered (``dbus_spark.sinks.batch_commit``). Spark makes
these classes in Python processes of its own while a query starts (to look a
source up, to create it and learn its schema): they import only this module, and
the reader or writer's module (the capture, the stage, the sinks, Arrow) is
imported where the reader or writer is made, in the processes that use it.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

SCHEMA = StructType(
    [
        StructField("source", StringType(), False),
        StructField("record_type", StringType(), False),  # a sinks.records.RecordType
        StructField("value", BinaryType(), True),  # its counts, as JSON
    ]
)
"""The rows a read task hands Spark: its counts (``worker.ARROW_SCHEMA`` in Arrow)."""


class BinlogDataSource(DataSource):  # type: ignore[misc]
    """``spark.readStream.format("dbus_binlog").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_binlog"

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> Any:
        from dbus_spark.planning.source import BinlogSourceReader

        return BinlogSourceReader(
            self.options["config"],
            shards=int(self.options.get("shards", 1)),
            chunk_tasks=int(self.options.get("chunk_tasks", 1)),
            reports=self.options.get("reports"),
            run=self.options.get("run"),
        )


class FunctionSinkDataSource(DataSource):  # type: ignore[misc]
    """``df.writeStream.format("dbus_functions").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_functions"

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from dbus_spark.sinks.batch_commit import SinkWriter

        return SinkWriter(self.options["config"], self.options.get("reports"))
