"""A deployment's own clusters: its manifest's ``[sinks.*]`` options made into client
settings (credentials from the runtime's environment), checked before the runtime
starts, and kept apart in a worker's sinks beside the runtime's own broker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from support import free_port
from test_runtime_config import _config

from dbus_spark.config.routes import (
    SinkSettingsError,
    elasticsearch_cluster,
    kafka_cluster,
)
from dbus_spark.sinks.batch_commit import TaskReport
from dbus_spark.sinks.writer import WorkerSinks
from dbus_spark.spark.preflight import deployment_sink_problems
from dbus_spark.stage.functions import StageRecord
from dbus_spark.state.records import KafkaRecord


def test_kafka_options_become_producer_settings_with_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "s3cret")
    routes = {"orders": {"kafka": {
        "bootstrap_servers": "k1:9092,k2:9092", "security_protocol": "SASL_SSL",
        "sasl_username": "orders", "sasl_password_env": "ORDERS_KAFKA_PASSWORD",
        "linger.ms": 20,
    }}}  # fmt: skip
    cluster = kafka_cluster("orders", routes)
    assert cluster is not None and cluster.bootstrap == "k1:9092,k2:9092"
    assert dict(cluster.settings) == {
        "security.protocol": "SASL_SSL", "sasl.username": "orders",
        "sasl.password": "s3cret", "linger.ms": 20,
    }  # fmt: skip
    assert kafka_cluster("others", routes) is None  # theirs: the runtime's Kafka
    # One producer per cluster and settings: the same options share one.
    assert cluster.key == kafka_cluster("orders", {"orders": routes["orders"]}).key  # type: ignore[union-attr]
    monkeypatch.setenv("ORDERS_KAFKA_PASSWORD", "other")
    assert cluster.key != kafka_cluster("orders", routes).key  # type: ignore[union-attr]


def test_key_material_comes_from_the_environment_or_a_file_as_producer_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----"
    monkeypatch.setenv("ORDERS_KAFKA_KEY", key)
    monkeypatch.setenv("ORDERS_KAFKA_KEY_PASSWORD", "s3cret")
    keystore_key = tmp_path / "keystore.key"
    keystore_key.write_text(key + "\n")
    routes = {"orders": {"kafka": {
        "bootstrap_servers": "k1:9093", "security_protocol": "SSL",
        "ssl.key.pem_env": "ORDERS_KAFKA_KEY", "ssl_key_password_env": "ORDERS_KAFKA_KEY_PASSWORD",
        "ssl.keystore.key_file": str(keystore_key),
    }}}  # fmt: skip
    cluster = kafka_cluster("orders", routes)
    assert cluster is not None
    assert dict(cluster.settings) == {
        "security.protocol": "SSL", "ssl.key.pem": key, "ssl.key.password": "s3cret",
        "ssl.keystore.key": key,
    }  # fmt: skip


def test_a_variable_that_is_not_set_is_one_line_naming_it_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ORDERS_ES_KEY", raising=False)
    routes = {"orders": {"es": {"hosts": "https://es:9200", "api_key_env": "ORDERS_ES_KEY"}}}
    with pytest.raises(SinkSettingsError) as caught:
        elasticsearch_cluster("orders", routes)
    assert str(caught.value) == (
        "deployment orders: sinks.es.api_key_env names the environment variable "
        "ORDERS_ES_KEY, which is not set where the runtime writes; export it in the "
        "runtime's environment and restart the runtime"
    )


def test_credentials_from_files_are_read_where_the_runtime_writes(tmp_path: Any) -> None:
    secret = tmp_path / "orders-es"
    secret.write_text("pw from a file\n")  # as a mounted secret often ends
    routes = {"orders": {"es": {"hosts": "https://e1:9200", "username": "orders",
                                "password_file": str(secret)}}}  # fmt: skip
    cluster = elasticsearch_cluster("orders", routes)
    assert cluster is not None
    assert dict(cluster.options) == {"basic_auth": ("orders", "pw from a file")}
    missing = tmp_path / "not-there"
    routes = {"orders": {"kafka": {"sasl_password_file": str(missing)}}}
    with pytest.raises(SinkSettingsError) as caught:
        kafka_cluster("orders", routes)
    assert str(caught.value) == (
        f"deployment orders: sinks.kafka.sasl_password_file names the file {missing}, "
        "which cannot be read where the runtime writes (No such file or directory); put "
        "it on every host of the runtime, readable by its user"
    )


def test_elasticsearch_options_become_client_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORDERS_ES_PASSWORD", "pw")
    routes = {"orders": {"es": {
        "hosts": ["https://e1:9200", "https://e2:9200"], "username": "orders",
        "password_env": "ORDERS_ES_PASSWORD", "verify_certs": False,
    }}}  # fmt: skip
    cluster = elasticsearch_cluster("orders", routes)
    assert cluster is not None
    assert cluster.hosts == ("https://e1:9200", "https://e2:9200")
    assert dict(cluster.options) == {"basic_auth": ("orders", "pw"), "verify_certs": False}


def test_preflight_names_each_deployment_whose_own_cluster_is_away_and_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    closed = free_port()
    routes = {
        "away": {"kafka": {"bootstrap_servers": f"127.0.0.1:{closed}"}},
        "es_away": {"es": {"hosts": f"http://127.0.0.1:{closed}"}},
        "unset": {"kafka": {"bootstrap_servers": "127.0.0.1:1",
                            "sasl_password_env": "NOT_SET_HERE"}},
    }  # fmt: skip
    problems = deployment_sink_problems(routes, timeout=1.0)
    assert len(problems) == 3 and all("\n" not in p for p in problems), problems
    assert problems[0].startswith(
        f"deployment away: cannot reach its Kafka at 127.0.0.1:{closed} ("
    )
    assert problems[0].endswith("it is detached until that cluster answers")
    assert problems[1] == (
        f"deployment es_away: cannot reach its Elasticsearch at http://127.0.0.1:{closed}; "
        "it is detached until that cluster answers"
    )
    assert problems[2].startswith("deployment unset: sinks.kafka.sasl_password_env names")


def test_preflight_names_a_deployment_whose_own_elasticsearch_refuses_its_login(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The local Elasticsearch runs without security, so it cannot refuse a login: a
    server that answers 401 as Elasticsearch does stands in for that one fault."""
    import http.server
    import threading

    class Refusing(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"error":{"type":"security_exception"},"status":401}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("ORDERS_ES_PASSWORD", "wrong")
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        problems = deployment_sink_problems({"orders": {"es": {
            "hosts": url, "username": "orders", "password_env": "ORDERS_ES_PASSWORD",
        }}}, timeout=2.0)  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert problems == [
        f"deployment orders: its Elasticsearch at {url} refuses its login (401); fix "
        "sinks.es username and password_env/password_file, or api_key_env/api_key_file, "
        "or what they name; it is detached meanwhile"
    ]


def test_preflight_passes_a_deployment_whose_own_elasticsearch_answers(
    elasticsearch_service: Any,
) -> None:
    routes = {"orders": {"es": {"hosts": elasticsearch_service.url, "request_timeout": 30}}}
    assert deployment_sink_problems(routes, timeout=10.0) == []


def test_a_worker_s_sinks_send_each_deployment_to_its_own_cluster(
    kafka_service: Any, kafka_topic: str
) -> None:
    """``ours`` writes to the runtime's broker; ``theirs`` names a cluster nobody
    answers for: it alone is detached, and ours is acknowledged."""
    config = _config(kafka=kafka_service.bootstrap_servers, detach_after=1.0)
    sinks = WorkerSinks(config)
    sinks.route({"theirs": {"kafka": {"bootstrap_servers": f"127.0.0.1:{free_port()}"}}})
    sinks.pace(True)
    assert sinks.kafka_for("ours") is sinks.kafka
    assert sinks.kafka_for("theirs") is not sinks.kafka
    report = TaskReport()
    record = KafkaRecord(kafka_topic, b"[1]", b"{}")
    for _ in range(3):
        sinks.deliver(StageRecord("ours", record), "shop", report)
        sinks.deliver(StageRecord("theirs", record), "shop", report)
    began = time.monotonic()
    failed = sinks.settle(report, began)
    assert set(failed) == {"theirs"}, failed
    assert report.kafka == 3
    assert time.monotonic() - began < 10
    # Its manifest no longer names a cluster: it writes to the runtime's again.
    sinks.route({})
    assert sinks.kafka_for("theirs") is sinks.kafka


def test_a_route_that_changes_mid_task_never_drops_what_a_sink_still_holds() -> None:
    from dbus_fn.testing import insert
    from dbus_spark.stage.documents import index_action

    sinks = WorkerSinks(_config(elasticsearch=f"http://127.0.0.1:{free_port()}"))
    held = sinks.elasticsearch("theirs")
    held.write(index_action(insert("shop.orders", id=1), "orders"))  # buffered, not sent
    sinks.route({"theirs": {"es": {"hosts": f"http://127.0.0.1:{free_port()}"}}})
    assert sinks.elasticsearch("theirs") is held and held.in_flight == 1
    held.drop()
    sinks.route({})
    assert sinks.elasticsearch("theirs") is not held


def test_every_fenced_producer_of_a_worker_has_a_transactional_id_of_its_own() -> None:
    """Two producers with one transactional id abort each other's open transactions as
    each starts: the runtime's producer, a deployment's own cluster's (on the same
    broker here), and those of sinks made again in the same process all differ."""
    from dataclasses import replace

    from dbus_fn.coordination import ZooKeeperSettings
    from dbus_spark.config.runtime import WriteFencing

    config = replace(_config(), fencing=WriteFencing(ZooKeeperSettings(), "rt-a"))
    first, again = WorkerSinks(config), WorkerSinks(config)
    first.route({"theirs": {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "linger.ms": 1}}})
    ids = [first.kafka.transactional_id, first.kafka_for("theirs").transactional_id,
           again.kafka.transactional_id]  # fmt: skip
    assert all(ids) and len(set(ids)) == 3, ids
    assert WorkerSinks(_config()).kafka.transactional_id is None
