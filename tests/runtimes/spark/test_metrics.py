"""The runtime's metrics and their HTTP server, without Spark or services: batch
reports handed from the sink's commit to the driver, what a batch adds to the
metrics, and how the server binds and who it answers."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from support import Samples, free_port, parse_metrics

from dbus_fn.capture import SourceSpec
from dbus_fn.errors import ConfigError
from dbus_fn.testing import insert
from dbus_spark.config.runtime import RuntimeConfig, SourceBinding, deployment_folders
from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
from dbus_spark.observe import RuntimeMetrics, take_report, write_report
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.state.live_counters import Publisher, SinkPublisher
from dbus_spark.state.sink_activity import SinkActivity


def _samples(metrics: RuntimeMetrics) -> Samples:
    return parse_metrics(generate_latest(metrics.registry).decode())


def _attached(
    tmp_path: Path, reports: Path, runtime_id: str = "", sources: tuple[str, ...] = ()
) -> RuntimeMetrics:
    """Metrics following a runtime whose ``sources`` are servers nobody listens on, and
    whose workers report to ``reports``."""
    config = tmp_path / "config.json"
    bindings = tuple(
        SourceBinding(SourceSpec(name, f"mysql://u:p@127.0.0.1:{free_port()}", ("*.*",)), 1)
        for name in sources
    )
    RuntimeConfig(sources=bindings, deployments=(), kafka_bootstrap="127.0.0.1:9092",
                  elasticsearch_url="http://127.0.0.1:9200",
                  checkpoint_dir=str(tmp_path / "checkpoint")).save(config)  # fmt: skip
    metrics = RuntimeMetrics(runtime_id=runtime_id)
    metrics.attach(config, {}, reports)
    return metrics


def test_a_report_is_taken_once_with_older_ones_nobody_took(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.reports"
    for batch in (1, 2, 3):
        write_report(checkpoint, batch, {"batch": batch})
    assert take_report(checkpoint, 2) == {"batch": 2}
    assert take_report(checkpoint, 2) is None
    assert take_report(checkpoint, 1) is None  # dropped with 2: never shown late
    assert take_report(checkpoint, 3) == {"batch": 3}


def test_no_report_folder_is_no_report(tmp_path: Path) -> None:
    assert take_report(str(tmp_path / "never"), 0) is None


def test_nothing_but_phases_is_shown_before_a_runtime_is_followed() -> None:
    metrics = RuntimeMetrics(runtime_id="rt-1")
    metrics.record_batch({"stage": {"delivered": {"orders": 3}}}, {"durationMs": {"walCommit": 5}})
    names = {name for name, _ in _samples(metrics)}
    assert names and all(name.startswith("dbus_batch_") for name in names), names


def test_a_batch_adds_its_counters_and_phases(tmp_path: Path) -> None:
    metrics = _attached(tmp_path, tmp_path / "reports", "rt-1", sources=("shop",))
    report = {
        "records": 12, "kafka": 9, "elasticsearch": 3, "fenced": 1, "seconds": 0.4,
        "read_seconds": 0.2,
        "stage": {
            "tables": [["shop", "db.orders", 10]],
            "offered": [["shop", "db.orders", "orders", 10], ["shop", "db.orders", "audit", 10]],
            "routed": [["orders", "kafka://orders", 8], ["orders", "kafka://orders-dead", 2],
                       ["audit", "es://audit", 4]],
            "delivered": {"orders": 8, "audit": 4}, "filtered": {"audit": 6},
            "dead": {"orders": 2}, "held": {}, "snapshot_rows": {"orders": 5},
            "last_commit": {"shop": 1700000000.5},
        },
    }  # fmt: skip
    progress = {"batchId": 7, "durationMs": {"latestOffset": 20, "addBatch": 600,
                                             "triggerExecution": 700}}  # fmt: skip
    metrics.record_batch(report, progress)
    metrics.record_batch(report, progress)
    samples = _samples(metrics)
    assert samples[("dbus_batches_total", ())] == 2
    assert samples[("dbus_source_rows_total", (("source", "shop"),))] == 20
    assert samples[("dbus_deployment_events_total", (("deployment", "audit"),))] == 20
    assert samples[("dbus_deployment_delivered_total", (("deployment", "orders"),))] == 16
    assert samples[("dbus_deployment_filtered_total", (("deployment", "audit"),))] == 12
    assert samples[("dbus_deployment_dead_letters_total", (("deployment", "orders"),))] == 4
    assert samples[("dbus_deployment_snapshot_rows_total", (("deployment", "orders"),))] == 10
    assert samples[("dbus_sink_fenced_total", ())] == 2
    assert samples[("dbus_batch_phase_seconds_count", (("phase", "add_batch"),))] == 2
    assert samples[("dbus_batch_phase_seconds_sum", (("phase", "add_batch"),))] == 1.2
    assert samples[("dbus_batch_phase_seconds_count", (("phase", "read"),))] == 2
    assert samples[("dbus_batch_phase_seconds_sum", (("phase", "write"),))] == 0.8
    assert samples[("dbus_batch_seconds_count", ())] == 2
    assert samples[("dbus_runtime_info", (("runtime", "rt-1"),))] == 1
    assert samples[("dbus_source_up", (("source", "shop"),))] == 0  # nobody listens


def test_a_batch_without_a_report_still_counts_its_phases(tmp_path: Path) -> None:
    metrics = _attached(tmp_path, tmp_path / "reports")
    metrics.record_batch(None, {"durationMs": {"walCommit": 5}})
    samples = _samples(metrics)
    assert samples[("dbus_batches_total", ())] == 1
    assert samples[("dbus_batch_phase_seconds_count", (("phase", "wal_commit"),))] == 1


def test_the_configuration_is_parsed_once_however_often_it_is_shown(
    tmp_path: Path, config_reads: list[Path]
) -> None:
    metrics = _attached(tmp_path, tmp_path / "reports", sources=("shop",))
    for _ in range(3):
        state = metrics.state()
        assert state is not None and [s.name for s in state.sources] == ["shop"]
        _samples(metrics)
    assert config_reads == [tmp_path / "config.json"]


def test_labels_never_carry_positions_or_keys(tmp_path: Path) -> None:
    metrics = _attached(tmp_path, tmp_path / "reports")
    metrics.record_batch(
        {"stage": {"tables": [["s", "db.t", 1]], "delivered": {"d": 1}}},
        {"sources": [{"endOffset": json.dumps({"s": {"file": "binlog.000001", "pos": 99}})}]},
    )
    labels = {name for (_, pairs) in _samples(metrics) for name, _ in pairs}
    allowed = {"source", "deployment", "function", "kind", "table", "sink", "destination",
               "phase", "le", "runtime"}  # fmt: skip
    assert labels <= allowed


@pytest.mark.parametrize(
    ("address", "needle"),
    [
        ("9464", "expected HOST:PORT"),
        ("127.0.0.1:http", "expected HOST:PORT"),
        ("127.0.0.1:70000", "expected HOST:PORT"),
        ("0.0.0.0:9464", "--api-token"),
        ("10.1.2.3:9464", "beyond loopback"),
    ],
)
def test_a_bad_api_address_is_one_line_naming_the_fix(address: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ApiSettings.parse(address)
    message = str(caught.value)
    assert needle in message and "\n" not in message


def test_api_addresses_that_are_fine() -> None:
    assert ApiSettings.parse("off") is None
    assert ApiSettings.parse("127.0.0.1:0") == ApiSettings("127.0.0.1", 0)
    assert ApiSettings.parse("localhost:9464") == ApiSettings("localhost", 9464)
    assert ApiSettings.parse("[::1]:9464") == ApiSettings("::1", 9464)
    assert ApiSettings.parse("0.0.0.0:9464", "s3cret") == ApiSettings("0.0.0.0", 9464, "s3cret")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, RuntimeMetrics]]:
    metrics = _attached(tmp_path, tmp_path / "reports", "rt-x")
    server = ApiServer(build_app(metrics), ApiSettings("127.0.0.1", 0))
    url = server.start()
    try:
        yield url, metrics
    finally:
        server.stop()


def _get(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_metrics_are_served_in_the_exposition_format(
    served: tuple[str, RuntimeMetrics],
) -> None:
    url, metrics = served
    metrics.record_batch({"stage": {"delivered": {"orders": 3}}}, {})
    status, kind, body = _get(f"{url}/metrics")
    assert status == 200 and kind.startswith("text/plain")
    assert 'dbus_deployment_delivered_total{deployment="orders"} 3.0' in body
    status, _, body = _get(f"{url}/openapi.json")
    assert status == 200 and "/metrics" in json.loads(body)["paths"]


def test_a_token_is_asked_of_every_request() -> None:
    metrics = RuntimeMetrics()
    server = ApiServer(build_app(metrics, "s3cret"), ApiSettings("127.0.0.1", 0, "s3cret"))
    url = server.start()
    try:
        assert _get(f"{url}/metrics")[0] == 401
        assert _get(f"{url}/metrics", "wrong")[0] == 401
        assert _get(f"{url}/openapi.json")[0] == 401
        assert _get(f"{url}/metrics", "s3cret")[0] == 200
        assert _get(f"{url}/api/v1/state")[0] == 401
        # The dashboard's page and script hold no data: they load, then ask with the token.
        status, kind, page = _get(f"{url}/")
        assert status == 200 and kind.startswith("text/html") and "dashboard.js" in page
        assert _get(f"{url}/dashboard/dashboard.js")[0] == 200
    finally:
        server.stop()


def test_a_taken_port_fails_at_once_naming_the_fix() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            ApiServer(build_app(RuntimeMetrics()), ApiSettings("127.0.0.1", port))
    assert f"127.0.0.1:{port}" in str(caught.value) and "--api" in str(caught.value)


def test_sink_activity_reaches_the_scrape_while_it_happens(tmp_path: Path) -> None:
    kafka = SinkActivity(in_flight=lambda: 7)
    elasticsearch = SinkActivity()
    reports = tmp_path / "checkpoint.reports"
    reports.mkdir()  # as the driver makes it, before its query starts
    publisher = SinkPublisher({"kafka": kafka, "elasticsearch": elasticsearch})
    kafka.acknowledged("orders", 100)  # before `use`: another query's, reset
    publisher.use(str(reports))
    kafka.acknowledged("orders", 120)
    kafka.acknowledged("orders", 80)
    kafka.retried()
    elasticsearch.acknowledged("orders-idx", 300)
    elasticsearch.failed()
    publisher.publish()
    # Another worker process that ended long ago: counted, but nothing in flight.
    gone = {"messages": {"orders": 1}, "bytes": {"orders": 9}, "retries": 2, "errors": 0,
            "in_flight": 50}  # fmt: skip
    stale = {"updated": 0, "data": {"kafka": gone}}
    (reports / "sinks" / "1.json").write_text(json.dumps(stale))
    samples = _samples(_attached(tmp_path, reports))
    kafka_orders = (("destination", "orders"), ("sink", "kafka"))
    assert samples[("dbus_sink_messages_total", kafka_orders)] == 3
    assert samples[("dbus_sink_bytes_total", kafka_orders)] == 209
    assert samples[("dbus_sink_retries_total", (("sink", "kafka"),))] == 3
    assert samples[("dbus_sink_in_flight", (("sink", "kafka"),))] == 7
    es_index = (("destination", "orders-idx"), ("sink", "elasticsearch"))
    assert samples[("dbus_sink_bytes_total", es_index)] == 300
    assert samples[("dbus_sink_errors_total", (("sink", "elasticsearch"),))] == 1


def test_a_worker_on_another_host_publishes_nothing_and_makes_no_folder(
    tmp_path: Path,
) -> None:
    reports = tmp_path / "driver" / "checkpoint.reports"  # the driver's, not here
    publisher = Publisher("functions", lambda: {"orders": {}})
    assert publisher.use(str(reports)) is False
    publisher.publish()
    assert not (tmp_path / "driver").exists()


def test_functions_counts_and_call_times_reach_the_scrape(
    tmp_path: Path, function_folder: Any
) -> None:
    folder = function_folder(
        "counted",
        """
        import dbus_fn as fn

        @fn.filter(tables="shop.orders")
        def even(event: fn.RowChange) -> bool:
            if event.after["id"] == 5:
                raise ValueError("five")
            return event.after["id"] % 2 == 0
        """,
        ["shop.orders"],
    )
    stage = FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")
    counts = StageCounts()
    for key in range(1, 7):
        list(stage.process(insert("shop.orders", id=key), counts))
    reports = tmp_path / "checkpoint.reports"
    reports.mkdir()
    publisher = Publisher("functions", dict)
    publisher.use(str(reports), stage.function_stats)
    publisher.publish()
    metrics = _attached(tmp_path, reports)
    samples = _samples(metrics)
    labels = (("deployment", "counted"), ("function", "counted:even"), ("kind", "filter"))
    assert samples[("dbus_function_calls_total", labels)] == 6
    assert samples[("dbus_function_filtered_total", labels)] == 2  # 1 and 3
    assert samples[("dbus_function_dead_letters_total", labels)] == 1
    assert samples[("dbus_function_seconds_count", labels)] == 6
    assert samples[("dbus_function_seconds_bucket", (*labels, ("le", "+Inf")))] == 6
    assert samples[("dbus_function_seconds_sum", labels)] > 0
    state = metrics.state()
    assert state is not None
    ((function,),) = [d.functions for d in state.deployments if d.name == "counted"]
    assert function.dead_letters == 1 and function.last_error is not None
    assert "raised ValueError: five" in function.last_error.error


def test_recent_dead_letters_are_kept_newest_first_over_all_workers(
    tmp_path: Path, function_folder: Any
) -> None:
    folder = function_folder(
        "picky",
        """
        import dbus_fn as fn

        @fn.filter(tables="shop.orders")
        def picky(event: fn.RowChange) -> bool:
            if event.after["id"] % 3 == 0:
                raise ValueError(f"no {event.after['id']}")
            return True
        """,
        ["shop.orders"],
    )
    reports = tmp_path / "checkpoint.reports"
    for worker, keys in ((1, range(1, 31)), (2, range(31, 46))):  # 10 and 5 dead letters
        stage = FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")
        for key in keys:
            list(stage.process(insert("shop.orders", id=key), StageCounts()))
        published = {"updated": time.time(), "data": stage.function_stats()}
        (reports / "functions").mkdir(parents=True, exist_ok=True)
        (reports / "functions" / f"{worker}.json").write_text(json.dumps(published))
    state = _attached(tmp_path, reports).state()
    assert state is not None
    ((function,),) = [d.functions for d in state.deployments if d.name == "picky"]
    assert function.dead_letters == 15
    assert [e.error.split("ValueError: ")[1].split(";")[0] for e in function.recent_errors] == [
        f"no {key}" for key in range(45, 15, -3)
    ]  # the last ten of both workers, newest first
    assert function.last_error == function.recent_errors[0]
    assert all(e.table == "shop.orders" and e.position for e in function.recent_errors)


def test_the_json_api_answers_from_the_same_counters(
    served: tuple[str, RuntimeMetrics],
) -> None:
    url, metrics = served
    metrics.record_batch(
        {"stage": {"offered": [["shop", "db.orders", "orders", 4]], "delivered": {"orders": 3},
                   "dead": {"orders": 1}}},
        {},
    )  # fmt: skip
    status, kind, body = _get(f"{url}/api/v1/deployments/orders")
    assert status == 200 and kind == "application/json"
    found = json.loads(body)
    assert (found["events"], found["delivered"], found["dead_letters"]) == (4, 3, 1)
    status, _, body = _get(f"{url}/api/v1/deployments/nope")
    assert status == 404 and "GET /api/v1/deployments lists them" in json.loads(body)["detail"]
    status, _, body = _get(f"{url}/api/v1/state")
    whole = json.loads(body)
    assert whole["runtime"] == "rt-x" and whole["batches"] == 1
    assert [d["name"] for d in whole["deployments"]] == ["orders"]
    metrics_text = _get(f"{url}/metrics")[2]
    assert 'dbus_deployment_dead_letters_total{deployment="orders"} 1.0' in metrics_text


def test_before_the_query_starts_the_api_says_so() -> None:
    server = ApiServer(build_app(RuntimeMetrics()), ApiSettings("127.0.0.1", 0))
    url = server.start()
    try:
        status, _, body = _get(f"{url}/api/v1/sources")
    finally:
        server.stop()
    assert status == 503 and "not started" in json.loads(body)["detail"]


def test_the_topology_counts_each_edge_and_its_rate(tmp_path: Path) -> None:
    metrics = _attached(tmp_path, tmp_path / "reports", sources=("shop",))

    def batch(rows: int) -> None:
        metrics.record_batch({"stage": {
            "tables": [["shop", "db.orders", rows]],
            "offered": [["shop", "db.orders", "orders", rows]],
            "routed": [["orders", "kafka://orders", rows]],
        }}, {})  # fmt: skip

    batch(10)
    first = metrics.state()
    assert first is not None
    assert {n.id for n in first.topology.nodes} == {
        "source:shop", "table:shop/db.orders", "deployment:orders",
        "destination:kafka://orders",
    }  # fmt: skip
    assert [(e.source, e.target, e.count, e.rate) for e in first.topology.edges] == [
        ("deployment:orders", "destination:kafka://orders", 10, None),
        ("source:shop", "table:shop/db.orders", 10, None),
        ("table:shop/db.orders", "deployment:orders", 10, None),
    ]  # asked once: no rate yet
    time.sleep(1.0)
    batch(30)
    second = metrics.state()
    assert second is not None
    for edge in second.topology.edges:
        assert edge.count == 40
        assert edge.rate is not None and 15 < edge.rate <= 30  # 30 more in 1 to 2 s
    samples = _samples(metrics)
    assert samples[("dbus_table_rows_total", (("source", "shop"), ("table", "db.orders")))] == 40
    routed = (("deployment", "orders"), ("destination", "kafka://orders"))
    assert samples[("dbus_deployment_routed_total", routed)] == 40
    assert samples[("dbus_source_rows_total", (("source", "shop"),))] == 40
    assert samples[("dbus_deployment_events_total", (("deployment", "orders"),))] == 40
