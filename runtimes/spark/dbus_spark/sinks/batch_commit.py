"""A micro-batch's commit: what each of its tasks reports, and the ``dbus_functions``
sink's writer that sums those reports and commits the batch on the driver.

Spark makes the writer in Python processes of its own (to plan the write, to sum a
task's counts, to commit), which import this module and not the sinks: a read task
writes to its sinks itself (``dbus_spark.sinks.writer``) and hands Spark its counts
only (``dbus_spark.stage.worker.Batcher``). The writer's ``write()`` sums them in the
same task, and Spark calls ``commit()`` on the driver only when every task of the
micro-batch has returned, and records the batch's end offsets after that: a position
is committed only once every sink of every deployment that goes on with it has the
data.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import field

import pyarrow as pa
from pydantic import computed_field
from pydantic.dataclasses import dataclass
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from dbus_spark.config.json_form import JSON_FORM
from dbus_spark.config.logs import FIELDS, runtime_logger
from dbus_spark.config.runtime import load_config
from dbus_spark.stage.counts import SinkCounts, StageCounts
from dbus_spark.state.batch_reports import write_report
from dbus_spark.state.checkpoint import ProgressFolder
from dbus_spark.state.history import HistoryStore, progress_text
from dbus_spark.state.progress import Detached, ProgressBook, Rejoined
from dbus_spark.state.records import RecordType

# commit() runs in a Spark-managed Python process with no logging set up;
# batch metrics must still reach the runtime's log (its stderr).
log = runtime_logger()


@dataclass(config=JSON_FORM)
class TaskReport(SinkCounts, WriterCommitMessage):  # type: ignore[misc]
    """What one task did: what its sinks took and what its stage counted; the driver
    sums these into the batch's metrics, and its JSON is the batch's report
    (``state.batch_reports``)."""

    stage: StageCounts = field(default_factory=StageCounts)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def read_seconds(self) -> float:
        """The stage's read time, beside the sinks' (the metrics' read phase)."""
        return self.stage.read_seconds


def _history_text(store: HistoryStore, sources: set[str]) -> dict[str, str]:
    return {
        key: text
        for source in sorted(sources)
        for key, text in progress_text(
            [*store.tasks(source).values(), *store.replays(source).values()]
        ).items()
    }


def task_counts(batches: Iterator[pa.RecordBatch]) -> TaskReport:
    """What one read task counted and delivered, from the rows it handed Spark."""
    report = TaskReport()
    for batch in batches:
        columns = batch.to_pydict()
        for record_type, value in zip(columns["record_type"], columns["value"], strict=True):
            if record_type == RecordType.STATS:
                report.stage.add_bytes(value)
            elif record_type == RecordType.DELIVERED:
                report.add_sinks(SinkCounts.from_bytes(value))
    return report


class SinkWriter(DataSourceStreamArrowWriter):  # type: ignore[misc]
    """Made on the driver, from the runtime's configuration file. Its tasks sum what
    each read task counted and delivered; ``commit()`` records a batch's history and
    progress and logs it, on the driver."""

    def __init__(self, config_path: str, reports: str | None = None) -> None:
        config = load_config(config_path, with_secrets=False)  # it needs no source
        self._checkpoint_dir = config.checkpoint_dir
        self._reports = reports
        """Where ``commit()`` leaves each batch's counters for the driver's metrics
        (``dbus_spark.observe``); None: metrics are off."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskReport:
        return task_counts(iterator)

    def commit(self, messages: list[TaskReport | None], batchId: int) -> None:
        total = TaskReport()
        for report in messages:
            if report is None:
                continue
            total.add_sinks(report)
            began = [t for t in (total.started, report.stage.started) if t]
            total.started = min(began, default=0.0)  # or when its stage began reading
            total.stage.add(report.stage)
        stage = total.stage
        if self._reports is not None:
            try:
                write_report(self._reports, batchId, total.to_json())
            except OSError as exc:  # metrics never hold a batch back
                log.warning("batch %d: its metrics report was not written: %s", batchId, exc)
        history: dict[str, str] = {}
        # Before Spark records the batch as committed, each changed section of the
        # progress folder written once: the next plan reads it, and a replay of this
        # batch re-reads its chunks.
        progress = ProgressFolder.of(self._checkpoint_dir)
        changed = stage.chunks or stage.replays or stage.refused or stage.reached or stage.progress
        # Most batches change nothing of it: no lock, no folder touched on their way.
        with progress.held() if changed else contextlib.nullcontext():
            if stage.chunks or stage.replays or stage.refused:
                store = HistoryStore(progress)
                with store.saved_once():
                    store.record(stage.chunks)
                    store.record_replays(stage.replays)
                    if stage.refused:
                        store.refused(stage.refused)
                for read in stage.refused:
                    wait = store.waiting(read.source).get(read.deployment, {})
                    log.warning(
                        "history: deployment %s's sinks did not take its read of %s: %s; "
                        "it is read again in %.0fs", read.deployment, read.source,
                        read.reason, wait.get("retry_at", time.time()) - time.time(),
                    )  # fmt: skip
                sources = {c.source for c in stage.chunks} | {r.source for r in stage.replays}
                history = _history_text(store, sources)
            if stage.reached:
                progress.update("reached", lambda known: {**known, **stage.reached})
            if stage.progress:
                # Where each deployment not with the stream stands (``dbus_spark.state.progress``).
                ProgressBook(self._checkpoint_dir, progress).apply(stage.progress)
        for event in stage.progress:
            if isinstance(event, Detached):
                log.warning(
                    "deployment %s detached from source %s at %s: %s; it catches up "
                    "on its own read",
                    event.deployment, event.source, dict(event.position), event.reason,
                )  # fmt: skip
            elif isinstance(event, Rejoined):
                log.info(
                    "deployment %s is with the stream of source %s again",
                    event.deployment, event.source,
                )  # fmt: skip
        if total.fenced:
            log.warning(
                "batch %d: %d Kafka message(s) not sent: their source's hold was lost "
                "mid-batch; the new owner sends them from the committed position",
                batchId,
                total.fenced,
            )
        if total.records or any(
            (stage.rows, stage.ddl, stage.chunks, stage.replays, stage.progress)
        ):
            now = time.time()
            fields = {
                "batch": batchId, "rows": stage.rows, "ddl": stage.ddl,
                "records": total.records, "kafka": total.kafka, "already": total.already,
                "es": total.elasticsearch,
                "per_source": dict(total.per_source), "delivered": dict(stage.delivered),
                "filtered": dict(stage.filtered), "dead": dict(stage.dead),
                "read_seconds": round(stage.read_seconds, 3),
                "write_seconds": round(total.seconds, 3),
                "batch_seconds": round(now - total.started if total.started else 0.0, 3),
                "positions": stage.positions,
                # How far behind its source each sink is as the batch commits: the
                # newest change it now holds was committed this long ago.
                "lag_seconds": {
                    source: round(now - moment, 3) for source, moment in stage.last_commit.items()
                },
                "history": history,
            }  # fmt: skip
            log.info(
                "batch %(batch)d: rows=%(rows)d ddl=%(ddl)d records=%(records)d kafka=%(kafka)d "
                "already=%(already)d es=%(es)d per_source=%(per_source)s delivered=%(delivered)s "
                "filtered=%(filtered)s dead=%(dead)s read_seconds=%(read_seconds).3f "
                "write_seconds=%(write_seconds).3f batch_seconds=%(batch_seconds).3f "
                "positions=%(positions)s lag_seconds=%(lag_seconds)s"
                + (" history=%(history)s" if history else ""),
                fields,
                extra={FIELDS: fields},
            )

    def abort(self, messages: list[TaskReport | None], batchId: int) -> None:
        log.warning("batch %d aborted; it will be replayed from its start positions", batchId)
