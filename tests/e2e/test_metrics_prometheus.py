"""A real Prometheus scrapes a running runtime: after writes to MariaDB, its HTTP
API shows the rows delivered and dead-lettered per deployment, and the source's
lag back at 0 once the runtime has caught up, even while nothing more is written;
the runtime's own JSON API shows the raising function's dead letters and last error."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, cli_runtime, insert_orders, tens_refused
from scratch import FreshDatabase
from support import wait_for

from dbus_deploy.services import Endpoints, PrometheusEndpoint

pytestmark = pytest.mark.e2e

ROWS = 200


@pytest.fixture
def scratch(
    services: Endpoints,
    private_database: FreshDatabase,
    kafka_topic: str,
    es_index: str,
    tmp_path: Path,
    function_folder: Any,
) -> Scratch:
    """The scratch services with a MariaDB of this module's own as the source
    (``private_server``): its binlog holds only the test's changes, so the runtime's
    source lag drops to zero once it has read them, whatever other tests write."""
    own = replace(services, mariadb=private_database.endpoint)
    return Scratch(own, private_database, kafka_topic, es_index, tmp_path, function_folder)


def _query(prometheus: PrometheusEndpoint, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
    url = f"{prometheus.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        data = json.load(answer)
    assert data["status"] == "success", data
    return {
        tuple(sorted((k, v) for k, v in item["metric"].items() if k == "deployment")): float(
            item["value"][1]
        )
        for item in data["data"]["result"]
    }


def _one(prometheus: PrometheusEndpoint, expr: str) -> float | None:
    found = _query(prometheus, expr)
    return next(iter(found.values())) if len(found) == 1 else None


def test_prometheus_scrapes_delivered_dead_letters_and_lag(
    scratch: Scratch, prometheus_service: PrometheusEndpoint
) -> None:
    folder, table = tens_refused(scratch, "scraped")
    label = uuid.uuid4().hex[:12]
    target = Path(prometheus_service.targets_dir) / f"test-{label}.json"
    mine = f'{{test="{label}"}}'
    dead = ROWS // 10
    try:
        with cli_runtime(scratch, folder) as url:
            target.write_text(json.dumps(
                [{"targets": [urllib.parse.urlsplit(url).netloc], "labels": {"test": label}}]
            ))  # fmt: skip
            # Prometheus reads its targets every 5 s and scrapes every 2 s; 60 s bounds
            # one that never finds or never reaches the runtime.
            wait_for(lambda: _one(prometheus_service, f"up{mine}") == 1, 60,
                     "Prometheus scrapes the runtime")  # fmt: skip
            insert_orders(scratch, 1, ROWS)
            written = time.monotonic()

            def counted() -> bool:
                delivered = _one(prometheus_service, f"dbus_deployment_delivered_total{mine}")
                letters = _one(prometheus_service, f"dbus_deployment_dead_letters_total{mine}")
                return (delivered, letters) == (ROWS - dead, dead)

            # 120 s bounds a runtime that does not deliver 200 rows (a few micro-batches).
            wait_for(counted, 120, f"{ROWS - dead} delivered and {dead} dead letters in Prometheus")
            assert _one(prometheus_service, f"dbus_deployment_events_total{mine}") == ROWS
            # Caught up, nothing more written: lag is 0, not the time since the last change
            # (which is over 8 s by then). 60 s bounds a lag that never drops back; the
            # runtime is idle then, and Prometheus scrapes it every 2 s.
            wait_for(
                lambda: _one(prometheus_service, f"dbus_source_lag_bytes{mine}") == 0
                and _one(prometheus_service, f"dbus_source_lag_seconds{mine}") == 0
                and time.monotonic() - written > 8,
                60, "lag back at 0 while the table is quiet",
            )  # fmt: skip
            assert _one(prometheus_service, f"dbus_source_up{mine}") == 1
            assert (_one(prometheus_service, f"dbus_source_rows_total{mine}") or 0) >= ROWS
            # The API: the raising function's dead letters and its last error.
            with urllib.request.urlopen(f"{url}/api/v1/deployments/scraped", timeout=10) as answer:
                deployment = json.load(answer)
            assert (deployment["events"], deployment["dead_letters"]) == (ROWS, dead)
            (function,) = deployment["functions"]
            assert (function["name"], function["calls"], function["dead_letters"]) == (
                "scraped:there", ROWS, dead,
            )  # fmt: skip
            assert "tens are refused" in function["last_error"]["error"]
            assert function["last_error"]["table"] == table
            for phase in ("latest_offset", "add_batch", "read", "write"):
                found = _one(prometheus_service, f'dbus_batch_phase_seconds_count{{test="{label}", '
                                                 f'phase="{phase}"}}')  # fmt: skip
                assert found and found > 0, phase
    finally:
        target.unlink(missing_ok=True)
