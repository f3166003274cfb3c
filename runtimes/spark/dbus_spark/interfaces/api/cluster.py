"""``dbus ui``: one API and dashboard for a whole cluster.

ZooKeeper says which runtimes there are, where each serves its API, and who reads
which source; each runtime says what it reads, runs and writes
(``/api/v1/state``). ``ClusterView`` asks them all at once and merges the answers
into one ``RuntimeState`` with ``cluster`` set, so the same page and the same
routes serve a runtime and a cluster. Sources are read by one runtime each, so
they are listed as their readers tell them; what several runtimes run (a
deployment, a function, a sink, an edge of the dataflow) is summed by name. A
runtime that does not answer is shown as such, and the sources ZooKeeper gives
it are shown with their committed positions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from kazoo.client import KazooClient
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from dbus_fn.coordination import (
    ClusterStatus,
    SourceStatus,
    ZooKeeperSettings,
    cluster_status,
)
from dbus_fn.errors import DbusError
from dbus_fn.outcomes import RECENT_ERRORS
from dbus_spark.interfaces.api.client import ask_state
from dbus_spark.interfaces.api.server import View
from dbus_spark.observe.families import cluster_families
from dbus_spark.observe.state import (
    HANDING_OFF,
    ClusterState,
    DeploymentState,
    EdgeState,
    FunctionState,
    MemberState,
    RuntimeState,
    SinkState,
    SourceState,
    TopologyState,
)

FRESH_SECONDS = 1.0
"""A view is kept this long: several pages polling ask the runtimes once."""

class ClusterView:
    """A cluster's state, from ZooKeeper and its runtimes' APIs, asked when shown."""

    def __init__(
        self, client: KazooClient, settings: ZooKeeperSettings, token: str | None = None
    ) -> None:
        self._client = client
        self._settings = settings
        self._token = token
        self._lock = threading.Lock()
        self._kept: tuple[float, RuntimeState] | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dbus-ui-ask")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Scrape(self))

    def state(self) -> RuntimeState:
        with self._lock:
            now = time.monotonic()
            if self._kept is not None and now - self._kept[0] < FRESH_SECONDS:
                return self._kept[1]
            status = cluster_status(self._client, self._settings)
            asked = [r for r in status.runtimes if r.api]
            found = self._pool.map(lambda r: ask_state(r.api, self._token), asked)
            answers = {runtime.id: answer for runtime, answer in zip(asked, found, strict=True)}
            merged = merge(status, answers, time.time())
            self._kept = (now, merged)
            return merged

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _Scrape(Collector):
    """A cluster view's ``/metrics``: ``cluster_families`` of its state."""

    def __init__(self, view: View) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        try:
            state = self._view.state()
        except DbusError:
            yield from cluster_families(None, [])
            return
        yield from cluster_families(state.cluster, state.sources)


def merge(
    status: ClusterStatus, answers: Mapping[str, RuntimeState | str], now: float
) -> RuntimeState:
    """One state for the cluster: each runtime's answer (or why there is none), with
    ZooKeeper's view of who reads what."""
    states = {rid: found for rid, found in answers.items() if isinstance(found, RuntimeState)}
    members = []
    for runtime in status.runtimes:
        found = answers.get(runtime.id)
        state = found if isinstance(found, RuntimeState) else None
        problem = found if isinstance(found, str) else None
        if not runtime.api:
            problem = "serves no API (started with --api off)"
        members.append(MemberState(
            id=runtime.id, host=runtime.host, pid=runtime.pid, api=runtime.api,
            answered=state is not None, problem=problem,
            sources=sorted(s.name for s in status.sources if s.owner == runtime.id),
            batches=state.batches if state else 0,
            last_batch=state.last_batch if state else None,
        ))  # fmt: skip
    sources = []
    for source in status.sources:
        if not source.registered:
            continue
        reader = states.get(source.owner or "")
        told = [s for s in reader.sources if s.name == source.name] if reader else []
        if told:
            sources.append(replace(told[0], owner=source.owner))
        else:
            sources.append(_unread(source))
    deployments = _sum_deployments(s.deployments for s in states.values())
    return RuntimeState(
        runtime=f"cluster {status.cluster}",
        started=min((s.started for s in states.values()), default=now),
        batches=sum(s.batches for s in states.values()),
        last_batch=max((s.last_batch or 0 for s in states.values()), default=0) or None,
        sources=sources,
        deployments=deployments,
        sinks=_sum_sinks(s.sinks for s in states.values()),
        history=[h for s in states.values() for h in s.history],
        topology=_sum_topology(s.topology for s in states.values()),
        cluster=ClusterState(
            name=status.cluster, leader=status.leader, epoch=status.epoch, runtimes=members,
            functions=dict(status.functions),
        ),
    )


def _unread(source: SourceStatus) -> SourceState:
    """A source no answering runtime reads: where it was committed, and why it is not read."""
    from dbus_fn.capture import position_from_json

    position = position_from_json(source.position) if source.position else None
    if source.owner:
        why = f"{source.owner} ({'not answering' if source.owner_running else 'gone'})"
    else:
        why = HANDING_OFF if source.released else "unassigned"
    return SourceState(
        name=source.name, up=False, position=None if position is None else str(position),
        server_position=None, lag_bytes=None, lag_seconds=None, rows=0, read_bytes=0,
        epoch=source.epoch or 0, last_change=None, owner=why,
    )  # fmt: skip


def _sum_deployments(per_runtime: Iterable[list[DeploymentState]]) -> list[DeploymentState]:
    merged: dict[str, DeploymentState] = {}
    functions: dict[str, dict[str, FunctionState]] = {}
    for deployments in per_runtime:
        for d in deployments:
            total = merged.get(d.name)
            if total is None:
                merged[d.name] = total = replace(d, functions=[])
            else:
                _add_counts(total, d)
                versions = {v for v in (*total.version.split(", "), d.version) if v}
                total.version = ", ".join(sorted(versions))
            for f in d.functions:
                known = functions.setdefault(d.name, {}).get(f.name)
                if known is None:
                    functions[d.name][f.name] = replace(f)
                    continue
                _add_counts(known, f)
                width = max(len(known.latency), len(f.latency))
                known.latency = [
                    a + b for a, b in zip(_pad(known.latency, width), _pad(f.latency, width),
                                          strict=True)
                ]  # fmt: skip
                errors = sorted([*known.recent_errors, *f.recent_errors], key=lambda e: -e.at)
                known.recent_errors = errors[:RECENT_ERRORS]
                known.last_error = errors[0] if errors else None
    for name, total in merged.items():
        total.functions = sorted(functions.get(name, {}).values(), key=lambda f: f.name)
    return sorted(merged.values(), key=lambda d: d.name)


def _sum_sinks(per_runtime: Iterable[list[SinkState]]) -> list[SinkState]:
    merged: dict[str, SinkState] = {}
    for sinks in per_runtime:
        for s in sinks:
            total = merged.setdefault(s.name, SinkState(s.name, {}, {}, 0, 0, 0))
            for mine, theirs in ((total.messages, s.messages), (total.bytes, s.bytes)):
                for destination, count in theirs.items():
                    mine[destination] = mine.get(destination, 0) + count
            _add_counts(total, s)
    return sorted(merged.values(), key=lambda s: s.name)


def _sum_topology(per_runtime: Iterable[TopologyState]) -> TopologyState:
    nodes = {}
    edges: dict[tuple[str, str], EdgeState] = {}
    for topology in per_runtime:
        for node in topology.nodes:
            nodes.setdefault(node.id, node)
        for edge in topology.edges:
            total = edges.get((edge.source, edge.target))
            if total is None:
                edges[(edge.source, edge.target)] = replace(edge)
                continue
            total.count += edge.count
            if edge.rate is not None:
                total.rate = round((total.rate or 0.0) + edge.rate, 3)
    return TopologyState(
        sorted(nodes.values(), key=lambda n: n.id), [edges[key] for key in sorted(edges)]
    )


_Counted = TypeVar("_Counted", DeploymentState, FunctionState, SinkState)

_COUNTS: dict[type, tuple[str, ...]] = {
    DeploymentState: ("events", "delivered", "filtered", "dead_letters", "held", "snapshot_rows"),
    FunctionState: ("calls", "filtered", "dead_letters", "timeouts", "seconds"),
    SinkState: ("retries", "errors", "in_flight"),
}
"""The fields of each state summed over a cluster's runtimes. Named rather than found
by type, so that a number added later (a ratio, a timestamp) is summed only when
it is added here."""


def _add_counts(total: _Counted, more: _Counted) -> None:
    """Add ``more``'s counts (``_COUNTS`` of its class) to ``total``'s."""
    for name in _COUNTS[type(total)]:
        setattr(total, name, getattr(total, name) + getattr(more, name))


def _pad(values: list[int], width: int) -> list[int]:
    return [*values, *[0] * (width - len(values))]
