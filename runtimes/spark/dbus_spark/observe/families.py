"""A runtime's snapshot (``state``) as Prometheus metric families.

Every family is read from one ``RuntimeState``, so ``/metrics`` and the JSON API
never disagree. Labels name sources, deployments, functions, tables, sinks,
destinations and phases only: never a key, a position or a DSN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from dbus_fn.outcomes import LATENCY_BOUNDS
from dbus_spark.observe.state import (
    HANDING_OFF,
    ClusterState,
    DeploymentState,
    HistoryState,
    RuntimeState,
    SinkState,
    SourceState,
    TopologyState,
)
from dbus_spark.state.progress import STATES

DEPLOYMENT_COUNTERS = (
    ("received", "events", "Events offered to the deployment's functions."),
    ("delivered", "delivered", "Records the deployment's functions sent to sinks."),
    ("filtered", "filtered", "Events the deployment's filters dropped."),
    ("dead", "dead_letters", "Events sent to the deployment's dead-letter topic."),
    ("held", "held", "Binlog changes held back for a bootstrap chunk (the chunk sends the row)."),
    ("snapshot_rows", "snapshot_rows", "Table rows read for the deployment's history."),
)
"""Per deployment: the ``StageCounts`` field, the metric's name after
``dbus_deployment_`` (also the ``DeploymentState`` attribute), and its help."""


def families(state: RuntimeState, *, batches: int, fenced: int) -> Iterator[Metric]:
    """Everything ``/metrics`` shows but the batch-phase histograms (kept as they are
    observed, see ``RuntimeMetrics``)."""
    yield from _source_families(state.sources)
    yield from _deployment_families(state.deployments)
    yield from _sink_families(state.sinks)
    yield from _history_families(state.history)
    yield from _topology_families(state.topology)
    yield _counter("dbus_batches", "Micro-batches committed.", [], [([], batches)])
    yield _counter(
        "dbus_sink_fenced",
        "Kafka messages not sent because the source's hold was lost mid-batch "
        "(the new owner sends them).",
        [], [([], fenced)],
    )  # fmt: skip
    yield _gauge_of("dbus_runtime_info", "This runtime: 1, labelled.", ["runtime"],
                    [([state.runtime], 1)])  # fmt: skip
    yield _gauge_of("dbus_runtime_start_time_seconds", "When it started.", [],
                    [([], state.started)])  # fmt: skip
    if state.last_batch:
        yield _gauge_of("dbus_batch_last_timestamp_seconds",
                        "When the last micro-batch committed.", [],
                        [([], state.last_batch)])  # fmt: skip


def cluster_families(cluster: ClusterState | None, sources: list[SourceState]) -> Iterator[Metric]:
    """What ``dbus ui`` shows of a cluster (None: ZooKeeper could not be read). Each
    runtime's own series come from its own ``/metrics``; these say who reads what. A
    handoff raises the source's epoch: ``changes(dbus_cluster_source_epoch[1h])``
    counts them."""
    yield _gauge_of("dbus_cluster_zookeeper_up", "1 when ZooKeeper answered this scrape.",
                    [], [([], 0 if cluster is None else 1)])  # fmt: skip
    if cluster is None:
        return
    yield _gauge_of("dbus_cluster_runtimes", "Runtimes in the cluster.", [],
                    [([], len(cluster.runtimes))])  # fmt: skip
    yield _gauge_of("dbus_cluster_runtime_up", "1 when the runtime's API answered this scrape.",
                    ["runtime"],
                    [([r.id], 1 if r.answered else 0) for r in cluster.runtimes])  # fmt: skip
    yield _gauge_of("dbus_cluster_leader", "The leader runtime: 1, labelled.", ["runtime"],
                    [([cluster.leader], 1)] if cluster.leader else [])  # fmt: skip
    yield _gauge_of("dbus_cluster_assignment_epoch",
                    "Grows with every change of who reads what.", [],
                    [([], cluster.epoch)])  # fmt: skip
    owners = {name: r.id for r in cluster.runtimes for name in r.sources}
    yield _gauge_of("dbus_cluster_source_owner", "The runtime a source is assigned to: 1, "
                    "labelled.", ["source", "runtime"],
                    [([s.name, owners[s.name]], 1) for s in sources
                     if s.name in owners])  # fmt: skip
    yield _gauge_of("dbus_cluster_source_epoch",
                    "The epoch the source is read at; every handoff raises it.", ["source"],
                    [([s.name], s.epoch) for s in sources])  # fmt: skip
    yield _gauge_of("dbus_cluster_source_up",
                    "1 when the source's reader answered and the source's server did too.",
                    ["source"], [([s.name], 1 if s.up else 0) for s in sources])  # fmt: skip
    yield _gauge_of("dbus_cluster_source_handing_off",
                    "1 while a released source waits out its handoff, owned by none.",
                    ["source"],
                    [([s.name], 1 if s.owner == HANDING_OFF else 0)
                     for s in sources])  # fmt: skip


def _source_families(sources: list[SourceState]) -> Iterator[Metric]:
    def per_source(name: str, text: str, value: Callable[[SourceState], float | None]) -> Metric:
        found = [([s.name], value(s)) for s in sources]
        return _gauge_of(name, text, ["source"], [(k, v) for k, v in found if v is not None])

    yield per_source("dbus_source_up", "1 when the source answered this scrape.",
                     lambda s: 1 if s.up else 0)  # fmt: skip
    yield per_source(
        "dbus_source_lag_seconds",
        "How long ago the newest change the sinks lack was committed, at most (0 when "
        "the committed position is the server's).",
        lambda s: s.lag_seconds,
    )
    yield per_source("dbus_source_lag_bytes",
                     "Binlog bytes from the committed position to the server's.",
                     lambda s: s.lag_bytes)  # fmt: skip
    yield per_source("dbus_source_binlog_file", "The committed position's binlog file number.",
                     lambda s: s.binlog_file)  # fmt: skip
    yield per_source("dbus_source_binlog_offset_bytes",
                     "The committed position's offset in its file.",
                     lambda s: s.binlog_offset)  # fmt: skip
    yield per_source("dbus_source_last_change_timestamp_seconds",
                     "Commit time of the newest change the sinks hold.",
                     lambda s: s.last_change)  # fmt: skip
    yield per_source(
        "dbus_source_epoch",
        "The ownership epoch the source is read at: 0 alone; in a cluster it grows with "
        "every handoff, and the source's series are there only while this runtime owns it.",
        lambda s: s.epoch,
    )
    yield _counter("dbus_source_rows", "Row changes read from the source's binlog.", ["source"],
                   [([s.name], s.rows) for s in sources])  # fmt: skip
    yield _counter("dbus_source_read_bytes", "Binlog bytes the committed position moved over.",
                   ["source"], [([s.name], s.read_bytes) for s in sources])  # fmt: skip


def _deployment_families(deployments: list[DeploymentState]) -> Iterator[Metric]:
    for _, name, text in DEPLOYMENT_COUNTERS:
        yield _counter(f"dbus_deployment_{name}", text, ["deployment"],
                       [([d.name], getattr(d, name)) for d in deployments])  # fmt: skip
    yield _gauge_of(
        "dbus_deployment_info", "A deployment this runtime runs: 1, labelled with its version.",
        ["deployment", "version"], [([d.name, d.version], 1) for d in deployments if d.version],
    )  # fmt: skip
    paces = [(d.name, p) for d in deployments for p in d.pace]
    yield _gauge_of(
        "dbus_deployment_state",
        "1 for the deployment's place in the source's stream (with-stream, catching-up, "
        "detached, paused), 0 for the others.",
        ["deployment", "source", "state"],
        [([d, p.source, state], 1 if p.state == state else 0)
         for d, p in paces for state in STATES],
    )  # fmt: skip
    yield _gauge_of(
        "dbus_deployment_lag_seconds",
        "How long ago the newest change the deployment's sinks lack was committed, at most "
        "(the source's lag while the deployment is with the stream).",
        ["deployment", "source"],
        [([d, p.source], p.lag_seconds) for d, p in paces if p.lag_seconds is not None],
    )  # fmt: skip
    yield _gauge_of(
        "dbus_deployment_lag_bytes",
        "Binlog bytes from the deployment's own position to the server's.",
        ["deployment", "source"],
        [([d, p.source], p.lag_bytes) for d, p in paces if p.lag_bytes is not None],
    )  # fmt: skip
    labels = ["deployment", "function", "kind"]
    functions = [(d.name, f) for d in deployments for f in d.functions]
    for name, text, attribute in (
        ("calls", "Events the function was called with.", "calls"),
        ("filtered", "Events the function (a filter) dropped.", "filtered"),
        ("dead_letters", "Events dead-lettered where the function raised or returned what "
         "it may not.", "dead_letters"),
        ("timeouts", "Calls stopped at the deployment's time budget.", "timeouts"),
    ):  # fmt: skip
        values = [([d, f.name, f.kind], getattr(f, attribute)) for d, f in functions]
        yield _counter(f"dbus_function_{name}", text, labels, values)
    latency = HistogramMetricFamily(
        "dbus_function_seconds", "Time the function itself took per call.", labels=labels
    )
    for deployment, function in functions:
        buckets, running = [], 0
        for bound, count in zip([*LATENCY_BOUNDS, math.inf], function.latency, strict=False):
            running += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), running))
        if buckets:
            latency.add_metric([deployment, function.name, function.kind], buckets,
                               sum_value=function.seconds)  # fmt: skip
    yield latency


def _sink_families(sinks: list[SinkState]) -> Iterator[Metric]:
    per_destination = ["sink", "destination"]
    yield _counter("dbus_sink_messages", "Messages the destination acknowledged.",
                   per_destination,
                   [([s.name, d], n) for s in sinks for d, n in s.messages.items()])  # fmt: skip
    yield _counter("dbus_sink_bytes",
                   "Their bytes (Kafka: key and value; Elasticsearch: the document as JSON).",
                   per_destination,
                   [([s.name, d], n) for s in sinks for d, n in s.bytes.items()])  # fmt: skip
    yield _counter("dbus_sink_retries", "Times the sink waited on its destination and tried "
                   "again.", ["sink"], [([s.name], s.retries) for s in sinks])  # fmt: skip
    yield _counter("dbus_sink_errors", "Messages the destination refused.", ["sink"],
                   [([s.name], s.errors) for s in sinks])  # fmt: skip
    yield _gauge_of(
        "dbus_sink_in_flight", "Messages handed to the sink and not yet acknowledged.",
        ["sink"], [([s.name], s.in_flight) for s in sinks],
    )  # fmt: skip


def _topology_families(topology: TopologyState) -> Iterator[Metric]:
    labels = {node.id: node.label for node in topology.nodes}

    def kind(node_id: str) -> str:
        return node_id.split(":", 1)[0]

    yield _counter(
        "dbus_table_rows", "Row changes read from the binlog, per table.", ["source", "table"],
        [([labels[e.source], labels[e.target]], e.count) for e in topology.edges
         if kind(e.source) == "source"],
    )  # fmt: skip
    yield _counter(
        "dbus_deployment_routed", "Records the deployment sent to each destination, dead "
        "letters included.", ["deployment", "destination"],
        [([labels[e.source], labels[e.target]], e.count) for e in topology.edges
         if kind(e.target) == "destination"],
    )  # fmt: skip


def _history_families(history: list[HistoryState]) -> Iterator[Metric]:
    labels = ["source", "deployment", "table", "kind"]

    def per_task(name: str, text: str, value: Callable[[HistoryState], float]) -> Metric:
        return _gauge_of(name, text, labels,
                         [([h.source, h.deployment, h.table, h.kind], value(h))
                          for h in history])  # fmt: skip

    yield per_task("dbus_history_rows", "Rows a history read has read.", lambda h: h.rows)
    yield per_task("dbus_history_estimated_rows",
                   "The server's estimate of the table's rows when the read began.",
                   lambda h: h.estimated_rows)  # fmt: skip
    yield per_task("dbus_history_chunks", "Chunks read.", lambda h: h.chunks)
    yield per_task("dbus_history_done", "1 once every chunk is read.",
                   lambda h: 1 if h.done else 0)  # fmt: skip


Samples = list[tuple[list[str], float]]
"""A family's samples: label values, value."""


def _family(kind: type[Any], name: str, text: str, labels: list[str], values: Samples) -> Metric:
    family = kind(name, text, labels=labels)
    for names, value in values:
        family.add_metric(names, value)
    return family


def _counter(name: str, text: str, labels: list[str], values: Samples) -> Metric:
    return _family(CounterMetricFamily, name, text, labels, values)


def _gauge_of(name: str, text: str, labels: list[str], values: Samples) -> Metric:
    return _family(GaugeMetricFamily, name, text, labels, values)
