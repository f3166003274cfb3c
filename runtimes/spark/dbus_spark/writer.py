"""The sink writer: a PySpark Python streaming sink named ``dbus_functions``.

``write()`` runs in each task on an executor, over the Arrow batches of encoded
records the source's function stage produced: it hands each record to its sink
(Kafka or Elasticsearch) and returns only after both have acknowledged
everything, or raises so Spark retries the task. Spark calls ``commit()`` on the
driver only when every task of the micro-batch has returned, and records the
batch's end offsets after that: a position is committed only once every sink of
every deployment has the data.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from dbus_fn.events import BinlogPosition
from dbus_fn.kafka_binding import KafkaMessage
from dbus_spark.config import RuntimeConfig, load_config
from dbus_spark.sinks.elasticsearch import ElasticsearchSink, document_version
from dbus_spark.sinks.kafka import KafkaSink
from dbus_spark.sinks.records import IndexAction, KafkaRecord
from dbus_spark.stage import StageCounts, dead_letter_for_refusal

log = logging.getLogger("dbus.runtime")
if not log.handlers:
    # commit() runs in a Spark-managed Python process with no logging set up;
    # batch metrics must still reach the runtime's log (its stderr).
    _handler = logging.StreamHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False


@dataclass
class TaskReport(WriterCommitMessage):  # type: ignore[misc]
    """What one task did; the driver sums these into the batch's metrics."""

    records: int = 0
    kafka: int = 0
    elasticsearch: int = 0
    seconds: float = 0.0
    started: float = 0.0
    """Epoch seconds the task began writing."""
    per_source: Counter[str] = field(default_factory=Counter)
    stage: StageCounts = field(default_factory=StageCounts)


class _Sinks:
    """The sinks of one Python worker process, kept between tasks."""

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self.kafka = KafkaSink(config.kafka_bootstrap, topic_partitions=config.topic_partitions)
        self.elasticsearch = ElasticsearchSink(
            config.elasticsearch_url, on_refused=self._on_refused
        )
        self._refused: list[KafkaRecord] = []

    def _on_refused(self, action: IndexAction, reason: str) -> None:
        message, dead_letter = action.origin
        letter = dead_letter_for_refusal(
            message,
            sink=f"es://{action.index}",
            reason=reason,
            type_prefix=self.config.type_prefix,
        )
        topic = dead_letter.removeprefix("kafka://")
        self._refused.append(KafkaRecord(topic, letter.key, letter.value, tuple(letter.headers)))

    def run(self, batches: Iterator[pa.RecordBatch]) -> TaskReport:
        started = time.monotonic()
        report = TaskReport(started=time.time())
        for batch in batches:
            columns = batch.to_pydict()
            for source, kind, destination, dead_letter, key, value, headers in zip(
                columns["source"],
                columns["kind"],
                columns["destination"],
                columns["dead_letter"],
                columns["key"],
                columns["value"],
                columns["headers"],
                strict=True,
            ):
                if kind == "kafka":
                    self.kafka.write(KafkaRecord(destination, key, value, tuple(headers)))
                elif kind == "es":
                    self.elasticsearch.write(
                        index_action(destination, KafkaMessage(key, value, headers), dead_letter)
                    )
                elif kind == "stats":
                    report.stage.add_json(value)
                    continue
                report.records += 1
                report.per_source[source] += 1
        # Elasticsearch first: documents it refuses become dead letters for Kafka.
        report.elasticsearch = self.elasticsearch.flush()
        for record in self._refused:
            self.kafka.write(record)
        self._refused.clear()
        report.kafka = self.kafka.flush()
        report.seconds = time.monotonic() - started
        return report


def index_action(index: str, message: KafkaMessage, dead_letter: str) -> IndexAction:
    """The Elasticsearch write of one row change's CloudEvent (Kafka binary form).

    The document is the row image the event carries; its ``_id`` is the primary
    key (a one-column key as its plain value, a composite key as its JSON array);
    its version grows with the binlog position.
    """
    headers = dict(message.headers)
    data = json.loads(message.value)
    deleted = headers["ce_type"].endswith(b".deleted")
    if message.key is None:
        raise ValueError(f"a row of a table without a primary key cannot go to es://{index}")
    key = json.loads(message.key)
    single = len(key) == 1 and isinstance(key[0], int | str)
    doc_id = str(key[0]) if single else message.key.decode()
    position = BinlogPosition(headers["ce_binlogfile"].decode(), int(headers["ce_binlogpos"]))
    return IndexAction(
        index=index,
        doc_id=doc_id,
        version=document_version(position, int(headers["ce_rowindex"])),
        op="delete" if deleted else "index",
        document=None if deleted else data["after"],
        column_types=data["columns"],
        origin=(message, dead_letter),
    )


_sinks: dict[tuple[str, float], _Sinks] = {}


def _worker_sinks(config_path: str) -> _Sinks:
    key = (config_path, os.stat(config_path).st_mtime)
    sinks = _sinks.get(key)
    if sinks is None:
        _sinks.clear()
        sinks = _Sinks(load_config(config_path))
        _sinks[key] = sinks
    return sinks


class FunctionSinkDataSource(DataSource):  # type: ignore[misc]
    """``df.writeStream.format("dbus_functions").option("config", path)``."""

    @classmethod
    def name(cls) -> str:
        return "dbus_functions"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return SinkWriter(self.options["config"])


class SinkWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    def __init__(self, config_path: str) -> None:
        self._config_path = config_path

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return _worker_sinks(self._config_path).run(iterator)

    def commit(self, messages: list[TaskReport | None], batchId: int) -> None:
        total = TaskReport()
        for report in messages:
            if report is None:
                continue
            total.records += report.records
            total.kafka += report.kafka
            total.elasticsearch += report.elasticsearch
            total.seconds = max(total.seconds, report.seconds)
            began = [t for t in (total.started, report.started, report.stage.started) if t]
            total.started = min(began, default=0.0)
            total.per_source.update(report.per_source)
            total.stage.add(report.stage)
        stage = total.stage
        if stage.rows or stage.ddl or total.records:
            now = time.time()
            log.info(
                "batch %d: rows=%d ddl=%d records=%d kafka=%d es=%d per_source=%s "
                "delivered=%s filtered=%s dead=%s read_seconds=%.3f write_seconds=%.3f "
                "batch_seconds=%.3f positions=%s lag_seconds=%s",
                batchId,
                stage.rows,
                stage.ddl,
                total.records,
                total.kafka,
                total.elasticsearch,
                dict(total.per_source),
                dict(stage.delivered),
                dict(stage.filtered),
                dict(stage.dead),
                stage.read_seconds,
                total.seconds,
                now - total.started if total.started else 0.0,
                stage.positions,
                # How far behind its source each sink is as the batch commits: the
                # newest change it now holds was committed this long ago.
                {source: round(now - moment, 3) for source, moment in stage.last_commit.items()},
            )

    def abort(self, messages: list[TaskReport | None], batchId: int) -> None:
        log.warning("batch %d aborted; it will be replayed from its start positions", batchId)
