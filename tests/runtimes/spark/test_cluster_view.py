"""`dbus ui`'s view of a cluster, without Spark or services: runtimes' states asked
over HTTP, merged with ZooKeeper's view of who reads what, served as the same API
(kept to its OpenAPI document) with the cluster's own metrics; its bad inputs."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support import free_port, keeps_to_its_document, parse_metrics

from dbus_fn.cli import cli
from dbus_fn.coordination import ClusterStatus, RuntimeStatus, SourceStatus
from dbus_fn.errors import DbusError
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
from dbus_spark.interfaces.api.cluster import ask_state, merge
from dbus_spark.observe import RuntimeMetrics
from dbus_spark.observe.state import (
    HANDING_OFF,
    DeploymentState,
    EdgeState,
    ErrorState,
    FunctionState,
    HistoryState,
    NodeState,
    RuntimeState,
    SinkState,
    SourceState,
    TopologyState,
)

POSITION = {"file": "mariadb-bin.000003", "pos": 1234, "gtid": "0-1-77"}


def _source(name: str, rows: int) -> SourceState:
    return SourceState(name=name, up=True, position="mariadb-bin.000003:900",
                       server_position="mariadb-bin.000003:900", lag_bytes=0, lag_seconds=0.0,
                       rows=rows, read_bytes=rows * 10, epoch=3, last_change=None)  # fmt: skip


def _function(calls: int, dead: int, errors: list[ErrorState]) -> FunctionState:
    return FunctionState("orders:keep", "filter", calls, 0, dead, 0, calls * 0.001,
                         [calls, 0, 1], errors[0] if errors else None, errors)  # fmt: skip


def _error(at: float) -> ErrorState:
    return ErrorState(at, f"failed at {at:g}", "FunctionError", "shop.orders", f"f:{int(at)}")


def _runtime(name: str, source: str, rows: int, version: str, errors: list[ErrorState],
             rate: float | None) -> RuntimeState:  # fmt: skip
    nodes = [NodeState(f"source:{source}", "source", source),
             NodeState("table:x", "table", "shop.orders"),
             NodeState("deployment:orders", "deployment", "orders"),
             NodeState("destination:kafka://orders", "destination", "kafka://orders")]  # fmt: skip
    return RuntimeState(
        runtime=name, started=100.0 + rows, batches=rows // 10, last_batch=200.0 + rows,
        sources=[_source(source, rows)],
        deployments=[DeploymentState("orders", version, rows, rows - 1, 0, 1, 0, 0,
                                     [_function(rows, len(errors), errors)])],
        sinks=[SinkState("kafka", {"orders": rows - 1}, {"orders": 100 * rows}, 2, 0, 1)],
        history=[HistoryState(source, "orders", "shop.orders", "bootstrap", rows, 50, 1, False)],
        topology=TopologyState(nodes, [EdgeState("deployment:orders",
                                                 "destination:kafka://orders", rows - 1, rate)]),
    )  # fmt: skip


def _status(runtimes: list[RuntimeStatus], sources: list[SourceStatus]) -> ClusterStatus:
    return ClusterStatus("shop", "/dbus/shop", tuple(runtimes), "rt-1", 4, 9, tuple(sources),
                         {"orders": "1.1"})  # fmt: skip


def _member(runtime_id: str, api: str = "http://127.0.0.1:1") -> RuntimeStatus:
    return RuntimeStatus(runtime_id, "host-a", 10, 1.0, "2026-01-01T00:00:00Z", api)


def _owned(name: str, owner: str | None, running: bool = True, released: str | None = None,
           registered: bool = True) -> SourceStatus:  # fmt: skip
    return SourceStatus(name, registered, owner, running, 3, POSITION, owner, None,
                        released=released)  # fmt: skip


@pytest.fixture
def cluster_state() -> RuntimeState:
    """rt-1 and rt-2 answer, rt-3 does not, rt-4 serves no API; five sources in every
    state a source can be in, and one removed."""
    status = _status(
        [_member("rt-1"), _member("rt-2"), _member("rt-3"), _member("rt-4", api="")],
        [_owned("a", "rt-1"), _owned("b", "rt-2"), _owned("c", "rt-3"),
         _owned("d", None, released="2026-01-01T00:00:00Z"), _owned("e", "rt-9", running=False),
         _owned("f", None), _owned("gone", None, registered=False)],
    )  # fmt: skip
    answers: dict[str, RuntimeState | str] = {
        "rt-1": _runtime("rt-1", "a", 30, "1.0", [_error(5), _error(7)], 2.5),
        "rt-2": _runtime("rt-2", "b", 20, "1.1", [_error(6)], None),
        "rt-3": "not answering at http://127.0.0.1:1 (Connection refused)",
    }
    return merge(status, answers, now=1000.0)


def test_what_runtimes_share_is_summed_and_sources_are_told_by_their_readers(
    cluster_state: RuntimeState,
) -> None:
    state = cluster_state
    assert state.runtime == "cluster shop" and state.batches == 5
    assert (state.started, state.last_batch) == (120.0, 230.0)
    owners = {s.name: s.owner for s in state.sources}
    assert owners == {"a": "rt-1", "b": "rt-2", "c": "rt-3 (not answering)", "d": HANDING_OFF,
                      "e": "rt-9 (gone)", "f": "unassigned"}  # fmt: skip
    read = {s.name: s for s in state.sources}
    assert read["a"].rows == 30 and read["a"].up and read["b"].lag_bytes == 0
    unread = read["c"]
    assert not unread.up and unread.lag_bytes is None and unread.epoch == 3
    assert unread.position == "mariadb-bin.000003:1234 (0-1-77)"
    (deployment,) = state.deployments
    assert (deployment.events, deployment.delivered, deployment.dead_letters) == (50, 48, 2)
    assert deployment.version == "1.0, 1.1"  # mid-deploy, both show
    (function,) = deployment.functions
    assert (function.calls, function.dead_letters, function.latency) == (50, 3, [50, 0, 2])
    assert function.seconds == pytest.approx(0.05)
    assert [e.at for e in function.recent_errors] == [7, 6, 5]  # newest first, both runtimes
    assert function.last_error is not None and function.last_error.at == 7
    (sink,) = state.sinks
    assert (sink.messages, sink.bytes, sink.retries, sink.in_flight) == (
        {"orders": 48}, {"orders": 5000}, 4, 2)  # fmt: skip
    assert {h.source for h in state.history} == {"a", "b"}
    (edge,) = state.topology.edges
    assert (edge.count, edge.rate) == (48, 2.5)  # rt-2 asked once only: no rate of its own
    assert {n.id for n in state.topology.nodes} >= {"source:a", "source:b", "table:x"}
    cluster = state.cluster
    assert cluster is not None and (cluster.leader, cluster.epoch) == ("rt-1", 9)
    members = {m.id: m for m in cluster.runtimes}
    assert members["rt-1"].answered and members["rt-1"].sources == ["a"]
    assert not members["rt-3"].answered and "Connection refused" in (members["rt-3"].problem or "")
    assert members["rt-4"].problem == "serves no API (started with --api off)"
    assert cluster.functions == {"orders": "1.1"}


def test_only_named_counts_are_summed_and_each_is_a_number_of_its_state() -> None:
    from dbus_spark.interfaces.api.cluster import _COUNTS

    for state, names in _COUNTS.items():
        types = {f.name: f.type for f in fields(state)}
        assert {types[name] for name in names} <= {"int", "float"}, state.__name__


class _Fixed:
    """A view of a fixed state (or of a ZooKeeper that cannot be read)."""

    def __init__(self, state: RuntimeState | None, problem: str | None = None) -> None:
        from prometheus_client import CollectorRegistry

        from dbus_spark.interfaces.api.cluster import _Scrape

        self._state, self._problem = state, problem
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Scrape(self))

    def state(self) -> RuntimeState:
        if self._problem is not None:
            raise DbusError(self._problem)
        assert self._state is not None
        return self._state


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ApiServer] = []

    def start(view: object, token: str | None = None) -> str:
        server = ApiServer(build_app(view, token), ApiSettings("127.0.0.1", 0, token))
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


def test_the_cluster_metrics_say_who_reads_what(cluster_state: RuntimeState, serve: Any) -> None:
    url = serve(_Fixed(cluster_state))
    status, body = _get(f"{url}/metrics")
    assert status == 200
    samples = parse_metrics(body)
    assert samples[("dbus_cluster_zookeeper_up", ())] == 1
    assert samples[("dbus_cluster_runtimes", ())] == 4
    assert samples[("dbus_cluster_runtime_up", (("runtime", "rt-1"),))] == 1
    assert samples[("dbus_cluster_runtime_up", (("runtime", "rt-3"),))] == 0
    assert samples[("dbus_cluster_leader", (("runtime", "rt-1"),))] == 1
    assert samples[("dbus_cluster_assignment_epoch", ())] == 9
    assert samples[("dbus_cluster_source_owner", (("runtime", "rt-2"), ("source", "b")))] == 1
    assert samples[("dbus_cluster_source_up", (("source", "a"),))] == 1
    assert samples[("dbus_cluster_source_up", (("source", "c"),))] == 0
    assert samples[("dbus_cluster_source_handing_off", (("source", "d"),))] == 1
    assert samples[("dbus_cluster_source_handing_off", (("source", "a"),))] == 0
    assert samples[("dbus_cluster_source_epoch", (("source", "e"),))] == 3
    status, body = _get(f"{url}/api/v1/cluster")
    assert status == 200 and json.loads(body)["leader"] == "rt-1"


def test_zookeeper_unreadable_is_a_503_naming_it_and_a_zero(serve: Any) -> None:
    url = serve(_Fixed(None, "cannot reach ZooKeeper at 127.0.0.1:1; start it"))
    status, body = _get(f"{url}/api/v1/state")
    assert status == 503 and "cannot reach ZooKeeper" in json.loads(body)["detail"]
    status, body = _get(f"{url}/metrics")
    assert status == 200 and parse_metrics(body)[("dbus_cluster_zookeeper_up", ())] == 0


def test_a_runtime_alone_has_no_cluster_to_show(tmp_path: Path, serve: Any) -> None:
    url = serve(_attached(tmp_path))
    status, body = _get(f"{url}/api/v1/cluster")
    assert status == 404 and "dbus ui --cluster" in json.loads(body)["detail"]


def _attached(tmp_path: Path) -> RuntimeMetrics:
    config = tmp_path / "config.json"
    RuntimeConfig(sources=(), deployments=(), kafka_bootstrap="127.0.0.1:9092",
                  elasticsearch_url="http://127.0.0.1:9200",
                  checkpoint_dir=str(tmp_path / "checkpoint")).save(config)  # fmt: skip
    metrics = RuntimeMetrics(runtime_id="rt-x")
    metrics.attach(config, {}, tmp_path / "reports")
    metrics.record_batch({"stage": {"delivered": {"orders": 3}}}, {})
    return metrics


def test_a_runtime_is_asked_for_its_state_over_http(tmp_path: Path, serve: Any) -> None:
    metrics = _attached(tmp_path)
    url = serve(metrics)
    found = ask_state(url)
    assert isinstance(found, RuntimeState)
    assert found.runtime == "rt-x" and found.deployments[0].delivered == 3
    guarded = serve(metrics, "s3cret")
    allowed = ask_state(guarded, "s3cret")
    assert isinstance(allowed, RuntimeState) and allowed.runtime == "rt-x"
    refused = ask_state(guarded, "wrong")
    assert refused == "401 missing or wrong token: send Authorization: Bearer TOKEN"
    nobody = f"http://127.0.0.1:{free_port()}"
    answer = ask_state(nobody)
    assert isinstance(answer, str) and answer.startswith(f"not answering at {nobody} (")


def test_the_cluster_api_keeps_to_its_document(cluster_state: RuntimeState) -> None:
    operations = keeps_to_its_document(build_app(_Fixed(cluster_state)), examples=10)
    assert "GET /api/v1/cluster" in operations


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--api", "off"], "--api off would serve nothing"),
        (["--api", "nowhere"], "invalid API address 'nowhere'"),
        (["--api", "0.0.0.0:0"], "--api-token"),
        (["--zk-timeout", "1"], "ZooKeeper"),
    ],
)
def test_bad_ui_input_is_one_line_and_an_exit_code(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(
        cli, ["ui", "--zookeeper", f"127.0.0.1:{free_port()}", "--cluster", "shop", *args]
    )
    assert result.exit_code != 0 and result.exit_code != 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.output


@pytest.mark.parametrize(
    ("token", "needle"),
    [("", "is empty"), ("  ", "only whitespace"), ("s3cret\n", "line break"), ("a b", "space")],
)
def test_a_token_no_request_can_carry_is_refused_without_showing_it(
    token: str, needle: str
) -> None:
    result = CliRunner().invoke(
        cli, ["ui", "--zookeeper", f"127.0.0.1:{free_port()}", "--cluster", "shop",
              "--api-token", token],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "--api-token" in lines[0], result.output
    assert token.strip() not in lines[0] or not token.strip()


def test_ui_on_a_taken_port_offers_no_api_off_it_would_refuse(
    zookeeper_service: Any, zk_root: str
) -> None:
    import socket

    zk = ["--zookeeper", f"{zookeeper_service.hosts}{zk_root}", "--cluster", "shop"]
    assert CliRunner().invoke(cli, ["cluster", "init", *zk]).exit_code == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["ui", *zk, "--api", f"127.0.0.1:{port}", "--for", "1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], result.output
    assert "--api off" not in lines[0]
