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
from pathlib import Path

import pytest
from e2e_support import Scratch, cli_runtime, insert_orders, tens_refused
from support import wait_for

from dbus_deploy.services import PrometheusEndpoint

# Exclusive (run apart from the parallel integration pass): needs a quiet binlog: source lag must
# drop to zero.
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

ROWS = 200


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
            wait_for(lambda: _one(prometheus_service, f"up{mine}") == 1, 60,
                     "Prometheus scrapes the runtime")  # fmt: skip
            insert_orders(scratch, 1, ROWS)
            written = time.monotonic()

            def counted() -> bool:
                delivered = _one(prometheus_service, f"dbus_deployment_delivered_total{mine}")
                letters = _one(prometheus_service, f"dbus_deployment_dead_letters_total{mine}")
                return (delivered, letters) == (ROWS - dead, dead)

            wait_for(counted, 120, f"{ROWS - dead} delivered and {dead} dead letters in Prometheus")
            assert _one(prometheus_service, f"dbus_deployment_events_total{mine}") == ROWS
            # Caught up, nothing more written: lag is 0, not the time since the last change.
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
