"""The function-stage writer: a PySpark Python streaming sink named ``dbus_functions``.

``write()`` runs in each task on an executor: it feeds the task's changes through
the function stage and the sinks, and returns only after Kafka and Elasticsearch
have acknowledged everything (or raises, so Spark retries the task). Spark calls
``commit()`` on the driver only when every task of the micro-batch has returned,
and records the batch's end offsets after that: a position is committed only
once every sink of every deployment has the data.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from dbus_fn.events import RowChange
from dbus_fn.manifest import Destination
from dbus_spark.config import RuntimeConfig, load_config
from dbus_spark.sinks.elasticsearch import ElasticsearchSink
from dbus_spark.sinks.kafka import KafkaSink
from dbus_spark.sinks.records import IndexAction, KafkaRecord
from dbus_spark.stage import FunctionStage

log = logging.getLogger("dbus.runtime")


@dataclass
class TaskReport(WriterCommitMessage):  # type: ignore[misc]
    """What one task did; the driver sums these into the batch's metrics."""

    rows: int = 0
    ddl: int = 0
    kafka: int = 0
    elasticsearch: int = 0
    seconds: float = 0.0
    per_source: Counter[str] = field(default_factory=Counter)
    delivered: Counter[str] = field(default_factory=Counter)
    filtered: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)


class _Worker:
    """Everything a Python worker process keeps between tasks: functions and clients."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.stage = FunctionStage(config.deployments, type_prefix=config.type_prefix)
        self.kafka = KafkaSink(config.kafka_bootstrap, topic_partitions=config.topic_partitions)
        self._refused: list[KafkaRecord] = []
        self.elasticsearch = ElasticsearchSink(
            config.elasticsearch_url, on_refused=self._on_refused
        )

    def _on_refused(self, action: IndexAction, reason: str) -> None:
        change: RowChange = action.origin
        for deployment in self.stage.deployments:
            if deployment.subscribes(change.qualified_table):
                destination = Destination.parse(deployment.manifest.dead_letter_route)
                self._refused.append(self.stage.refused(action, reason, destination))

    def run(self, rows: Iterator[Any]) -> TaskReport:
        started = time.monotonic()
        report = TaskReport()
        self.stage.counts.__init__()  # type: ignore[misc]
        for row in rows:
            report.per_source[row.source] += 1
            if row.kind != "row":
                report.ddl += 1
                continue
            report.rows += 1
            change: RowChange = pickle.loads(row.change)
            for record in self.stage.process(change):
                if isinstance(record, KafkaRecord):
                    self.kafka.write(record)
                else:
                    self.elasticsearch.write(record)
        # Elasticsearch first: documents it refuses become dead letters for Kafka.
        report.elasticsearch = self.elasticsearch.flush()
        for record in self._refused:
            self.kafka.write(record)
        self._refused.clear()
        report.kafka = self.kafka.flush()
        counts = self.stage.counts
        report.delivered, report.filtered, report.dead = (
            counts.delivered,
            counts.filtered,
            counts.dead,
        )
        report.seconds = time.monotonic() - started
        return report


_workers: dict[tuple[str, float], _Worker] = {}


def _worker(config_path: str) -> _Worker:
    key = (config_path, os.stat(config_path).st_mtime)
    worker = _workers.get(key)
    if worker is None:
        _workers.clear()
        worker = _Worker(load_config(config_path))
        _workers[key] = worker
    return worker


class FunctionSinkDataSource(DataSource):  # type: ignore[misc]
    """``df.writeStream.format("dbus_functions").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_functions"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return FunctionStageWriter(self.options["config"])


class FunctionStageWriter(DataSourceStreamWriter):  # type: ignore[misc]
    def __init__(self, config_path: str) -> None:
        self._config_path = config_path

    def write(self, iterator: Iterator[Any]) -> TaskReport:
        return _worker(self._config_path).run(iterator)

    def commit(self, messages: list[TaskReport | None], batchId: int) -> None:
        reports = [m for m in messages if m is not None]
        total = TaskReport()
        for report in reports:
            total.rows += report.rows
            total.ddl += report.ddl
            total.kafka += report.kafka
            total.elasticsearch += report.elasticsearch
            total.seconds = max(total.seconds, report.seconds)
            total.per_source.update(report.per_source)
            total.delivered.update(report.delivered)
            total.filtered.update(report.filtered)
            total.dead.update(report.dead)
        if total.rows or total.ddl:
            log.info(
                "batch %d: rows=%d ddl=%d kafka=%d es=%d sources=%s delivered=%s "
                "filtered=%s dead=%s task_seconds=%.3f",
                batchId,
                total.rows,
                total.ddl,
                total.kafka,
                total.elasticsearch,
                dict(total.per_source),
                dict(total.delivered),
                dict(total.filtered),
                dict(total.dead),
                total.seconds,
            )

    def abort(self, messages: list[TaskReport | None], batchId: int) -> None:
        log.warning("batch %d aborted; it will be replayed from its start positions", batchId)
