"""What one runtime counts, and its snapshot (``state``) when asked.

Counted as batches commit (from each batch's report, ``state.batch_reports``, and
Spark's progress of it) or read when asked (lag against the servers, the
workers' live counts, history progress). ``families`` turns the snapshot into
Prometheus metrics, the API serves it as JSON.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import (
    Metric,
)
from prometheus_client.registry import Collector

from dbus_fn.capture import BinlogReader, SourceSpec, position_from_json, replica_id_for
from dbus_fn.errors import DbusError
from dbus_fn.events import BinlogPosition
from dbus_fn.manifest import load_manifest
from dbus_spark.config.runtime import ConfigFile, RuntimeConfig
from dbus_spark.observe.families import DEPLOYMENT_COUNTERS, families
from dbus_spark.observe.state import (
    DeploymentState,
    EdgeState,
    ErrorState,
    FunctionState,
    HistoryState,
    NodeState,
    PaceState,
    RuntimeState,
    SinkState,
    SourceState,
    TopologyState,
)
from dbus_spark.stage.counts import counter_of_pairs
from dbus_spark.state.batch_reports import take_report
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore
from dbus_spark.state.live_counters import read_functions, read_sinks
from dbus_spark.state.preview_window import RecentWindow
from dbus_spark.state.progress import STATES, ProgressBook

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

RATE_SECONDS = 15.0
"""An edge's rate is over at most this many seconds of asks (the dashboard asks every
few seconds, Prometheus scrapes as often)."""

_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class RuntimeMetrics:
    """Everything ``/metrics`` shows of one runtime (alone or a cluster member)."""

    def __init__(self, *, runtime_id: str = "") -> None:
        self._config_file: ConfigFile | None = None
        self.window = RecentWindow()
        """The newest changes of each table read, for previews
        (``dbus_spark.interfaces.preview``)."""
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
        """Spark's listener of the query followed (see ``dbus_spark.spark.job``)."""

        self._batches = 0
        self._flows: deque[tuple[float, dict[tuple[str, str], int]]] = deque()
        """Edge counts as last asked about, for rates (see ``_topology``)."""
        self._fenced = 0
        self._tables: Counter[tuple[str, str]] = Counter()
        """Per (source, table), row changes read."""
        self._offered: Counter[tuple[str, str, str]] = Counter()
        """Per (source, table, deployment), events offered to its functions."""
        self._routed: Counter[tuple[str, str]] = Counter()
        """Per (deployment, destination), records sent there."""
        self._source_bytes: Counter[str] = Counter()
        self._per_deployment: dict[str, Counter[str]] = {
            field: Counter() for field, _, _ in DEPLOYMENT_COUNTERS
        }
        """Per ``StageCounts`` field, per deployment (``received`` is summed from
        ``offered`` when asked)."""
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
        batches and sinks report (``state.batch_reports``, ``state.live_counters``)."""
        self._config_file = ConfigFile(config_path)
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
        with self._lock:
            self._batches += 1
        ends: dict[str, BinlogPosition] = {}
        for source in progress.get("sources") or ():
            offset = source.get("endOffset")
            if isinstance(offset, str):
                offset = _json(offset)
            for name, value in (offset or {}).items():
                ends[name] = position_from_json(value)
        if report is not None:
            self._record_report(report)
            config = self.config()
            if config is not None:
                self.window.resize(config.preview_window)
            self.window.add(report.get("stage", {}).get("recent", []))
        moved = self._advance(ends)
        with self._lock:
            self._source_bytes.update(moved)

    def _record_report(self, report: Mapping[str, Any]) -> None:
        stage = report.get("stage", {})
        if report.get("read_seconds") is not None:
            self.phase.labels("read").observe(float(report["read_seconds"]))
        self.phase.labels("write").observe(float(report.get("seconds", 0.0)))
        with self._lock:
            self._tables.update(counter_of_pairs(stage.get("tables", [])))
            self._offered.update(counter_of_pairs(stage.get("offered", [])))
            self._routed.update(counter_of_pairs(stage.get("routed", [])))
            for field, totals in self._per_deployment.items():
                totals.update(stage.get(field, {}))
            self._fenced += int(report.get("fenced", 0))
            for source, moment in stage.get("last_commit", {}).items():
                self._last_commit[source] = max(self._last_commit.get(source, 0.0), moment)

    def _advance(self, ends: Mapping[str, BinlogPosition]) -> dict[str, int]:
        """Move the committed positions; the binlog bytes each one moved over."""
        with self._lock:
            self._last_batch = time.time()
            before = {source: self._committed.get(source) for source in ends}
            self._committed.update(ends)
        moved = {}
        config = self.config()
        for source, end in ends.items():
            start = before[source]
            if start is None or config is None or (start.file, start.pos) == (end.file, end.pos):
                continue
            try:
                moved[source] = self._servers.bytes_between(config, source, start, end)
            except (DbusError, OSError) as exc:
                log.debug("metrics: bytes read of %s unknown: %s", source, exc)
        return moved

    def config(self) -> RuntimeConfig | None:
        """The runtime's configuration now (None before it has one, or unreadable)."""
        if self._config_file is None:
            return None
        try:
            return self._config_file.current()
        except DbusError:
            return None

    def close(self) -> None:
        self._servers.close()

    # -- read when asked -----------------------------------------------------

    def state(self) -> RuntimeState | None:
        """What the runtime shows now (None before it follows one): the servers are
        asked for their positions, the workers' and history files are read."""
        config = self.config()
        if config is None:
            return None
        now = time.time()
        with self._lock:
            committed = dict(self._committed)
            last_commit = dict(self._last_commit)
            tables, offered = Counter(self._tables), Counter(self._offered)
            routed, read = Counter(self._routed), Counter(self._source_bytes)
            per_deployment = {field: Counter(t) for field, t in self._per_deployment.items()}
            batches, last_batch = self._batches, self._last_batch
        rows: Counter[str] = Counter()
        for (source, _), count in tables.items():
            rows[source] += count
        received = per_deployment["received"]
        for (_, _, deployment), count in offered.items():
            received[deployment] += count
        sources = []
        for binding in config.sources:
            name = binding.spec.name
            position = committed.get(name)
            if position is None and isinstance(binding.start, BinlogPosition):
                position = binding.start  # where it starts (in a cluster: as committed)
            source = SourceState(
                name=name, up=False, position=None if position is None else str(position),
                server_position=None, lag_bytes=None, lag_seconds=None, rows=rows[name],
                read_bytes=read[name], epoch=binding.epoch, last_change=last_commit.get(name),
                binlog_file=None if position is None else _file_number(position.file),
                binlog_offset=None if position is None else position.pos,
            )  # fmt: skip
            sources.append(source)
            try:
                server = self._servers.position(binding.spec)
                behind = (
                    None if position is None
                    else self._servers.bytes_between(config, name, position, server)
                )  # fmt: skip
            except (DbusError, OSError) as exc:
                log.debug("metrics: source %s did not answer: %s", name, exc)
                continue
            source.up, source.server_position = True, str(server)
            if behind is not None:
                since = last_commit.get(name, self.started)
                source.lag_bytes = behind
                source.lag_seconds = 0.0 if not behind else round(max(0.0, now - since), 3)
        functions = read_functions(self.reports, now) if self.reports is not None else {}
        sinks = read_sinks(self.reports, now) if self.reports is not None else {}
        deployments = _deployments(config, per_deployment, functions)
        self._pace(config, deployments, sources, now)
        return RuntimeState(
            runtime=self.runtime_id,
            started=self.started,
            batches=batches,
            last_batch=last_batch or None,
            sources=sources,
            deployments=deployments,
            sinks=[
                SinkState(
                    name, dict(t["messages"]), dict(t["bytes"]), t["retries"], t["errors"],
                    t["in_flight"],
                )
                for name, t in sorted(sinks.items())
            ],
            history=_history(config),
            topology=self._topology(config, tables, offered, routed, now),
        )

    def _pace(
        self,
        config: RuntimeConfig,
        deployments: list[DeploymentState],
        sources: list[SourceState],
        now: float,
    ) -> None:
        """Each deployment's place in each source's stream (``dbus_spark.state.progress``)."""
        book = ProgressBook(config.checkpoint_dir).load()
        for deployment in deployments:
            for source in sources:
                behind = book.get(source.name, {}).get(deployment.name)
                if behind is None:
                    pace = PaceState(source.name, "with-stream", None, None, None,
                                     source.lag_seconds, source.lag_bytes)  # fmt: skip
                else:
                    position = position_from_json(dict(behind.position))
                    lag_bytes = None
                    if source.server_position is not None:
                        try:
                            server = self._servers.position(config.source(source.name).spec)
                            lag_bytes = self._servers.bytes_between(
                                config, source.name, position, server
                            )
                        except (DbusError, OSError) as exc:
                            log.debug("metrics: lag of %s unknown: %s", deployment.name, exc)
                    since = behind.commit_time or behind.since
                    pace = PaceState(
                        source.name, behind.state, behind.reason, str(position), behind.since,
                        0.0 if lag_bytes == 0 else round(max(0.0, now - since), 3), lag_bytes,
                    )  # fmt: skip
                deployment.pace.append(pace)
            if deployment.pace:
                deployment.state = max((p.state for p in deployment.pace), key=STATES.index)
                lags = [p.lag_seconds for p in deployment.pace if p.lag_seconds is not None]
                deployment.lag_seconds = max(lags) if lags else None

    def _topology(
        self,
        config: RuntimeConfig,
        tables: Mapping[tuple[str, str], int],
        offered: Mapping[tuple[str, str, str], int],
        routed: Mapping[tuple[str, str], int],
        now: float,
    ) -> TopologyState:
        """The dataflow graph, its edges' counts, and their rates since the oldest ask
        of the last ``RATE_SECONDS``."""
        nodes: dict[str, NodeState] = {}

        def node(kind: str, key: str, label: str) -> str:
            found = nodes.setdefault(f"{kind}:{key}", NodeState(f"{kind}:{key}", kind, label))
            return found.id

        for binding in config.sources:
            node("source", binding.spec.name, binding.spec.name)
        for deployment in config.deployments:
            node("deployment", deployment.name, deployment.name)
        counts: dict[tuple[str, str], int] = {}
        for (source, table), count in tables.items():
            edge = (node("source", source, source), node("table", f"{source}/{table}", table))
            counts[edge] = count
        for (source, table, deployment), count in offered.items():
            edge = (node("table", f"{source}/{table}", table),
                    node("deployment", deployment, deployment))  # fmt: skip
            counts[edge] = count
        for (deployment, destination), count in routed.items():
            edge = (node("deployment", deployment, deployment),
                    node("destination", destination, destination))  # fmt: skip
            counts[edge] = count
        with self._lock:
            samples = self._flows
            while samples and samples[0][0] < now - RATE_SECONDS:
                samples.popleft()
            then = samples[0] if samples else None
            if not samples or now - samples[-1][0] >= 1.0:
                samples.append((now, counts))
        edges = []
        for (source, target), count in sorted(counts.items()):
            rate = None
            if then is not None and now > then[0]:
                rate = round((count - then[1].get((source, target), 0)) / (now - then[0]), 3)
            edges.append(EdgeState(source, target, count, rate))
        return TopologyState(sorted(nodes.values(), key=lambda n: n.id), edges)

    def scrape(self) -> Iterator[Metric]:
        state = self.state()
        if state is None:
            return
        with self._lock:
            batches, fenced = self._batches, self._fenced
        yield from families(state, batches=batches, fenced=fenced)


class BatchListener:
    """Feeds ``metrics`` each micro-batch Spark reports done, with the batch's report."""

    def __init__(self, metrics: RuntimeMetrics, reports: Path, query_id: str) -> None:
        self._metrics = metrics
        self._reports = reports
        self._query_id = query_id

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if str(progress.id) != self._query_id:
            return
        try:
            report = take_report(self._reports, progress.batchId)
            self._metrics.record_batch(report, json.loads(progress.json))
        except Exception:  # metrics never stop the runtime
            log.exception("metrics: batch %s not counted", progress.batchId)


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


def _deployments(
    config: RuntimeConfig,
    per_deployment: Mapping[str, Mapping[str, int]],
    functions: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[DeploymentState]:
    versions = {d.name: _version(d.path) for d in config.deployments}
    names = set(versions) | {d for totals in per_deployment.values() for d in totals}
    names |= {deployment for deployment, _ in functions}
    out = []
    for name in sorted(names):
        counts = {field: per_deployment.get(field, {}).get(name, 0)
                  for field, _, _ in DEPLOYMENT_COUNTERS}  # fmt: skip
        out.append(DeploymentState(
            name=name, version=versions.get(name, ""), events=counts["received"],
            delivered=counts["delivered"], filtered=counts["filtered"],
            dead_letters=counts["dead"], held=counts["held"],
            snapshot_rows=counts["snapshot_rows"],
            functions=[
                FunctionState(function, total["kind"], total["counts"]["calls"],
                              total["counts"]["filtered"], total["counts"]["dead"],
                              total["counts"]["timeouts"], round(total["seconds"], 6),
                              list(total["latency"]), _error(total.get("last_error")),
                              _errors(total.get("recent_errors", [])))
                for (deployment, function), total in sorted(functions.items())
                if deployment == name
            ],
        ))  # fmt: skip
    return out


def _errors(data: list[Mapping[str, Any]]) -> list[ErrorState]:
    """Newest first."""
    return [e for e in map(_error, reversed(data)) if e is not None]


def _error(data: Mapping[str, Any] | None) -> ErrorState | None:
    if not data:
        return None
    return ErrorState(float(data["at"]), str(data["error"]), str(data.get("error_type", "")),
                      str(data.get("table", "")), str(data.get("position", "")))  # fmt: skip


_versions: dict[tuple[str, float], str] = {}


def _version(path: str) -> str:
    """A deployment folder's version, read again only when its dbus.toml changes."""
    try:
        key = (path, Path(path, "dbus.toml").stat().st_mtime)
        found = _versions.get(key)
        if found is None:
            found = _versions[key] = load_manifest(path).version
        return found
    except (DbusError, OSError):
        return ""


def _history(config: RuntimeConfig) -> list[HistoryState]:
    store = HistoryStore(progress_path(config.checkpoint_dir))
    return [
        HistoryState(binding.spec.name, task.deployment, task.table, task.kind, task.rows,
                     task.estimated_rows, task.chunks, bool(task.finished))
        for binding in config.sources
        for task in store.tasks(binding.spec.name).values()
    ]  # fmt: skip


def _file_number(file: str) -> int:
    suffix = file.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None
