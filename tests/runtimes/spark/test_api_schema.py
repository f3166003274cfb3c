"""The runtime's JSON API keeps to its own OpenAPI document: schemathesis generates
requests for every operation (paths included) and checks each answer's status,
content type and body against the document."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from fastapi import FastAPI
from support import answering_planner, keeps_to_its_document

from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.api import build_app
from dbus_spark.interfaces.api.desk import RequestDesk
from dbus_spark.observe import RuntimeMetrics
from dbus_spark.stage.counts import StageCounts
from dbus_spark.state.live_counters import Publisher


@pytest.fixture
def api(tmp_path: Path) -> FastAPI:
    config = tmp_path / "config.json"
    RuntimeConfig(sources=(), deployments=(), kafka_bootstrap="127.0.0.1:9092",
                  elasticsearch_url="http://127.0.0.1:9200",
                  checkpoint_dir=str(tmp_path / "checkpoint")).save(config)  # fmt: skip
    reports = tmp_path / "checkpoint.reports"
    metrics = RuntimeMetrics(runtime_id="rt-schema")
    metrics.attach(config, {}, reports)
    counts = StageCounts(
        tables=Counter({("shop", "db.orders"): 2}),
        offered=Counter({("shop", "db.orders", "orders"): 2}),
        routed=Counter({("orders", "kafka://orders"): 1, ("orders", "kafka://dead"): 1}),
        delivered=Counter(orders=1), dead=Counter(orders=1),
    )  # fmt: skip
    metrics.record_batch({"stage": counts.to_json()}, {"durationMs": {"addBatch": 10}})
    functions = {"orders": {"orders:keep": {
        "kind": "filter", "calls": 2, "passed": 1, "filtered": 1, "dead": 0, "timeouts": 0,
        "latency": [2] + [0] * 19, "seconds": 0.00002}}}  # fmt: skip
    publisher = Publisher("functions", lambda: functions)
    reports.mkdir()
    publisher.use(str(reports))
    publisher.publish()
    desk = RequestDesk()
    desk.open(str(tmp_path / "checkpoint"))  # requests are answered by a planner below
    return build_app(metrics, desk=desk)


def test_every_answer_keeps_to_the_document(api: FastAPI, tmp_path: Path) -> None:
    with answering_planner(tmp_path / "checkpoint"):
        operations = keeps_to_its_document(api, examples=25)
    assert operations >= {
        "GET /api/v1/state", "GET /api/v1/sources", "GET /api/v1/deployments",
        "GET /api/v1/deployments/{name}", "GET /api/v1/sinks", "GET /api/v1/history",
        "GET /api/v1/topology", "GET /api/v1/cluster", "GET /metrics",
        "POST /api/v1/requests", "DELETE /api/v1/requests/{request_id}",
    }  # fmt: skip
