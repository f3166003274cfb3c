"""The metrics of one runtime, in the Prometheus exposition format.

Counted as batches commit (from each batch's report, see ``reports``, and
Spark's progress of it) or read when scraped (lag against the servers, history
progress). Labels name sources, deployments, tables, sinks and phases only:
never a key, a position or a DSN, so their number stays bounded and no secret
shows.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from pyspark.sql.streaming import StreamingQueryListener

from dbus_fn.capture import BinlogReader, SourceSpec, position_from_json, replica_id_for
from dbus_fn.errors import DbusError
from dbus_fn.events import BinlogPosition
from dbus_fn.outcomes import LATENCY_BOUNDS
from dbus_fn.registry import load_deployment
from dbus_spark.config import RuntimeConfig, load_config
from dbus_spark.history import HistoryStore, store_path
from dbus_spark.metrics.live import read_functions, read_sinks
from dbus_spark.metrics.reports import take_report

log = logging.getLogger("dbus.runtime")

PHASES = {
    "latestOffset": "latest_offset",
    "getBatch": "get_batch",
    "queryPlanning": "planning",
    "addBatch": "add_batch",
    "walCommit": "wal_commit",
    "commitOffsets": "commit_offsets",
}
"""Spark's names of a micro-batch's phases (``durationMs``), and ours."""

_DEPLOYMENT_COUNTERS = (
    ("received", "events", "Events offered to the deployment's functions."),
    ("delivered", "delivered", "Records the deployment's functions sent to sinks."),
    ("filtered", "filtered", "Events the deployment's filters dropped."),
    ("dead", "dead_letters", "Events sent to the deployment's dead-letter topic."),
    ("held", "held", "Binlog changes held back for a bootstrap chunk (the chunk sends the row)."),
    ("snapshot_rows", "snapshot_rows", "Table rows read for the deployment's history."),
)
"""Per deployment: the ``StageCounts`` field, the metric's name after
``dbus_deployment_``, and its help."""

_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RuntimeMetrics:
    """Everything ``/metrics`` shows of one runtime (alone or a cluster member)."""

    def __init__(self, *, runtime_id: str = "") -> None:
        self.config_path: Path | None = None
        self.reports: Path | None = None
        self.runtime_id = runtime_id
        self.started = time.time()
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._committed: dict[str, BinlogPosition] = {}
        self._last_commit: dict[str, float] = {}
        self._last_batch = 0.0
        self._servers = _Servers()
        self.listener: BatchListener | None = None
        """Spark's listener of the query followed (see ``dbus_spark.job``)."""

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(name, text, labels, registry=self.registry)

        self.batches = counter("dbus_batches", "Micro-batches committed.")
        self.source_rows = counter(
            "dbus_source_rows", "Row changes read from the source's binlog.", "source"
        )
        self.source_bytes = counter(
            "dbus_source_read_bytes", "Binlog bytes the committed position moved over.", "source"
        )
        self.per_deployment = {
            field: counter(f"dbus_deployment_{name}", text, "deployment")
            for field, name, text in _DEPLOYMENT_COUNTERS
        }
        """Per ``StageCounts`` field, its counter per deployment."""
        self.fenced = counter(
            "dbus_sink_fenced",
            "Kafka messages not sent because the source's hold was lost mid-batch "
            "(the new owner sends them).",
        )
        self.phase = Histogram(
            "dbus_batch_phase_seconds",
            "Time a micro-batch spent in each phase: Spark's (latest_offset, get_batch, "
            "planning, add_batch, wal_commit, commit_offsets) and the tasks' read and write.",
            ["phase"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.batch_seconds = Histogram(
            "dbus_batch_seconds", "Micro-batch duration, planning to commit.",
            buckets=_SECONDS, registry=self.registry,
        )  # fmt: skip
        self.registry.register(_ScrapeCollector(self))

    # -- fed by the driver as batches commit --------------------------------

    def attach(
        self, config_path: Path, positions: Mapping[str, BinlogPosition], reports: Path
    ) -> None:
        """Follow the runtime whose configuration is at ``config_path``; ``positions``:
        where its checkpoint stands (before its first batch); ``reports``: where its
        batches and sinks report (see ``reports`` and ``live``)."""
        self.config_path = config_path
        self.reports = reports
        with self._lock:
            for source, position in positions.items():
                self._committed.setdefault(source, position)

    def record_batch(self, report: Mapping[str, Any] | None, progress: Mapping[str, Any]) -> None:
        """One committed micro-batch: its report (``None``: none was left) and Spark's
        progress of it (``StreamingQueryProgress`` as JSON)."""
        durations = progress.get("durationMs") or {}
        for spark_name, phase in PHASES.items():
            if spark_name in durations:
                self.phase.labels(phase).observe(durations[spark_name] / 1000)
        if "triggerExecution" in durations:
            self.batch_seconds.observe(durations["triggerExecution"] / 1000)
        self.batches.inc()
        ends: dict[str, BinlogPosition] = {}
        for source in progress.get("sources") or ():
            offset = source.get("endOffset")
            if isinstance(offset, str):
                offset = _json(offset)
            for name, value in (offset or {}).items():
                ends[name] = position_from_json(value)
        if report is not None:
            self._record_report(report)
        moved = self._advance(ends)
        for source, count in moved.items():
            self.source_bytes.labels(source).inc(count)

    def _record_report(self, report: Mapping[str, Any]) -> None:
        stage = report.get("stage", {})
        if report.get("read_seconds") is not None:
            self.phase.labels("read").observe(float(report["read_seconds"]))
        self.phase.labels("write").observe(float(report.get("seconds", 0.0)))
        for source, count in stage.get("source_rows", {}).items():
            self.source_rows.labels(source).inc(count)
        for field, counter in self.per_deployment.items():
            for deployment, count in stage.get(field, {}).items():
                counter.labels(deployment).inc(count)
        if report.get("fenced"):
            self.fenced.inc(int(report["fenced"]))
        with self._lock:
            for source, moment in stage.get("last_commit", {}).items():
                self._last_commit[source] = max(self._last_commit.get(source, 0.0), moment)

    def _advance(self, ends: Mapping[str, BinlogPosition]) -> dict[str, int]:
        """Move the committed positions; the binlog bytes each one moved over."""
        with self._lock:
            self._last_batch = time.time()
            before = {source: self._committed.get(source) for source in ends}
            self._committed.update(ends)
        moved = {}
        config = self._config()
        for source, end in ends.items():
            start = before[source]
            if start is None or config is None or (start.file, start.pos) == (end.file, end.pos):
                continue
            try:
                moved[source] = self._servers.bytes_between(config, source, start, end)
            except (DbusError, OSError) as exc:
                log.debug("metrics: bytes read of %s unknown: %s", source, exc)
        return moved

    def _config(self) -> RuntimeConfig | None:
        if self.config_path is None:
            return None
        try:
            return load_config(self.config_path)
        except DbusError:
            return None

    def close(self) -> None:
        self._servers.close()

    # -- read when scraped --------------------------------------------------

    def scrape(self) -> Iterator[Metric]:
        config = self._config()
        if config is None:
            return
        now = time.time()
        with self._lock:
            committed = dict(self._committed)
            last_commit = dict(self._last_commit)
        up = _gauge("dbus_source_up", "1 when the source answered this scrape.", "source")
        lag_s = _gauge(
            "dbus_source_lag_seconds",
            "How long ago the newest change the sinks lack was committed, at most (0 when "
            "the committed position is the server's).",
            "source",
        )
        lag_b = _gauge(
            "dbus_source_lag_bytes", "Binlog bytes from the committed position to the server's.",
            "source",
        )  # fmt: skip
        file = _gauge(
            "dbus_source_binlog_file", "The committed position's binlog file number.", "source"
        )
        offset = _gauge(
            "dbus_source_binlog_offset_bytes", "The committed position's offset in its file.",
            "source",
        )  # fmt: skip
        newest = _gauge(
            "dbus_source_last_change_timestamp_seconds",
            "Commit time of the newest change the sinks hold.",
            "source",
        )
        epoch = _gauge(
            "dbus_source_epoch",
            "The ownership epoch the source is read at: 0 alone; in a cluster it grows with "
            "every handoff, and the source's series are there only while this runtime owns it.",
            "source",
        )
        for binding in config.sources:
            name = binding.spec.name
            epoch.add_metric([name], binding.epoch)
            position = committed.get(name)
            if position is None and isinstance(binding.start, BinlogPosition):
                position = binding.start  # where it starts (in a cluster: as committed)
            if position is not None:
                file.add_metric([name], _file_number(position.file))
                offset.add_metric([name], position.pos)
            if name in last_commit:
                newest.add_metric([name], last_commit[name])
            try:
                server = self._servers.position(binding.spec)
            except (DbusError, OSError) as exc:
                log.debug("metrics: source %s did not answer: %s", name, exc)
                up.add_metric([name], 0)
                continue
            up.add_metric([name], 1)
            if position is None:
                continue
            behind = self._servers.bytes_between(config, name, position, server)
            lag_b.add_metric([name], behind)
            since = last_commit.get(name, self.started)
            lag_s.add_metric([name], 0.0 if not behind else max(0.0, now - since))
        yield from (up, lag_s, lag_b, file, offset, newest, epoch)
        if self.reports is not None:
            yield from _sinks(read_sinks(self.reports, now))
            yield from _functions(read_functions(self.reports, now))
        yield from _history(config)
        yield from _deployments(config)
        info = GaugeMetricFamily(
            "dbus_runtime_info", "This runtime: 1, labelled.", labels=["runtime"]
        )
        info.add_metric([self.runtime_id], 1)
        yield info
        started = GaugeMetricFamily("dbus_runtime_start_time_seconds", "When it started.")
        started.add_metric([], self.started)
        yield started
        if self._last_batch:
            last = GaugeMetricFamily(
                "dbus_batch_last_timestamp_seconds", "When the last micro-batch committed."
            )
            last.add_metric([], self._last_batch)
            yield last


class BatchListener(StreamingQueryListener):  # type: ignore[misc]
    """Feeds ``metrics`` each micro-batch Spark reports done, with the batch's report."""

    def __init__(self, metrics: RuntimeMetrics, reports: Path, query_id: str) -> None:
        self._metrics = metrics
        self._reports = reports
        self._query_id = query_id

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if str(progress.id) != self._query_id:
            return
        try:
            report = take_report(self._reports, progress.batchId)
            self._metrics.record_batch(report, json.loads(progress.json))
        except Exception:  # metrics never stop the runtime
            log.exception("metrics: batch %s not counted", progress.batchId)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


class _ScrapeCollector(Collector):
    def __init__(self, metrics: RuntimeMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.scrape()

    def describe(self) -> list[Metric]:
        return []  # read fresh on every scrape: nothing to describe ahead


class _Servers:
    """One control connection per source server, for its current position."""

    def __init__(self) -> None:
        self._readers: dict[SourceSpec, BinlogReader] = {}
        self._lock = threading.Lock()

    def _reader(self, spec: SourceSpec) -> BinlogReader:
        reader = self._readers.get(spec)
        if reader is None:
            reader = self._readers[spec] = BinlogReader(
                spec, replica_id=replica_id_for(f"metrics/{spec.name}")
            )
        return reader

    def position(self, spec: SourceSpec) -> BinlogPosition:
        with self._lock:
            return self._reader(spec).master_position()

    def bytes_between(
        self, config: RuntimeConfig, source: str, start: BinlogPosition, end: BinlogPosition
    ) -> int:
        with self._lock:
            return self._reader(config.source(source).spec).bytes_between(
                start.file, start.pos, end
            )

    def close(self) -> None:
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()


def _sinks(totals: Mapping[str, Mapping[str, Any]]) -> Iterator[Metric]:
    per_destination = ["sink", "destination"]
    messages = CounterMetricFamily(
        "dbus_sink_messages", "Messages the destination acknowledged.", labels=per_destination
    )
    sizes = CounterMetricFamily(
        "dbus_sink_bytes",
        "Their bytes (Kafka: key and value; Elasticsearch: the document as JSON).",
        labels=per_destination,
    )
    retries = CounterMetricFamily(
        "dbus_sink_retries", "Times the sink waited on its destination and tried again.",
        labels=["sink"],
    )  # fmt: skip
    errors = CounterMetricFamily(
        "dbus_sink_errors", "Messages the destination refused.", labels=["sink"]
    )
    in_flight = GaugeMetricFamily(
        "dbus_sink_in_flight", "Messages handed to the sink and not yet acknowledged.",
        labels=["sink"],
    )  # fmt: skip
    for sink, total in totals.items():
        for destination, count in total["messages"].items():
            messages.add_metric([sink, destination], count)
        for destination, size in total["bytes"].items():
            sizes.add_metric([sink, destination], size)
        retries.add_metric([sink], total["retries"])
        errors.add_metric([sink], total["errors"])
        in_flight.add_metric([sink], total["in_flight"])
    yield from (messages, sizes, retries, errors, in_flight)


def _functions(totals: Mapping[tuple[str, str], Mapping[str, Any]]) -> Iterator[Metric]:
    labels = ["deployment", "function", "kind"]
    families = {
        field: CounterMetricFamily(f"dbus_function_{name}", text, labels=labels)
        for field, name, text in (
            ("calls", "calls", "Events the function was called with."),
            ("filtered", "filtered", "Events the function (a filter) dropped."),
            ("dead", "dead_letters", "Events dead-lettered where the function raised or "
             "returned what it may not."),
            ("timeouts", "timeouts", "Calls stopped at the deployment's time budget."),
        )
    }  # fmt: skip
    latency = HistogramMetricFamily(
        "dbus_function_seconds", "Time the function itself took per call.",
        labels=labels,
    )  # fmt: skip
    for (deployment, function), total in sorted(totals.items()):
        names = [deployment, function, total["kind"]]
        for field, family in families.items():
            family.add_metric(names, total["counts"][field])
        buckets, running = [], 0
        for bound, count in zip([*LATENCY_BOUNDS, float("inf")], total["latency"], strict=False):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        if buckets:
            latency.add_metric(names, buckets, sum_value=total["seconds"])
    yield from (*families.values(), latency)


def _history(config: RuntimeConfig) -> Iterator[Metric]:
    labels = ["source", "deployment", "table", "kind"]
    rows = GaugeMetricFamily("dbus_history_rows", "Rows a history read has read.", labels=labels)
    estimate = GaugeMetricFamily(
        "dbus_history_estimated_rows",
        "The server's estimate of the table's rows when the read began.",
        labels=labels,
    )
    chunks = GaugeMetricFamily("dbus_history_chunks", "Chunks read.", labels=labels)
    done = GaugeMetricFamily("dbus_history_done", "1 once every chunk is read.", labels=labels)
    store = HistoryStore(store_path(config.checkpoint_dir))
    for binding in config.sources:
        for task in store.tasks(binding.spec.name).values():
            names = [binding.spec.name, task.deployment, task.table, task.kind]
            rows.add_metric(names, task.rows)
            estimate.add_metric(names, task.estimated_rows)
            chunks.add_metric(names, task.chunks)
            done.add_metric(names, 1 if task.finished else 0)
    yield from (rows, estimate, chunks, done)


_manifests: dict[tuple[str, float], tuple[str, str]] = {}


def _deployments(config: RuntimeConfig) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "dbus_deployment_info", "A deployment this runtime runs: 1, labelled with its version.",
        labels=["deployment", "version"],
    )  # fmt: skip
    for path in config.deployments:
        try:
            key = (path, Path(path, "dbus.toml").stat().st_mtime)
            found = _manifests.get(key)
            if found is None:
                manifest = load_deployment(path).manifest
                found = _manifests[key] = (manifest.name, manifest.version)
        except (DbusError, OSError):
            continue
        info.add_metric(list(found), 1)
    yield info


def _gauge(name: str, text: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, labels=list(labels))


def _file_number(file: str) -> int:
    suffix = file.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
