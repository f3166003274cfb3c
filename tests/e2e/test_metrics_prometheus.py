"""A real Prometheus scrapes a running runtime: after writes to MariaDB, its HTTP
API shows the rows delivered and dead-lettered per deployment, and the source's
lag back at 0 once the runtime has caught up, even while nothing more is written;
the runtime's own JSON API shows the raising function's dead letters and last error."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from scratch import FreshDatabase
from support import runtime_api, wait_for

from dbus_deploy.services import Endpoints, PrometheusEndpoint

pytestmark = [pytest.mark.e2e]

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
    services: Endpoints,
    prometheus_service: PrometheusEndpoint,
    fresh_database: FreshDatabase,
    kafka_topic: str,
    function_folder: Any,
    tmp_path: Path,
) -> None:
    table = f"{fresh_database.name}.orders"
    folder = function_folder(
        "scraped",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def there(event: fn.RowChange) -> str:
            if event.after["id"] % 10 == 0:
                raise ValueError("tens are refused")
            return "kafka://{kafka_topic}"
        ''',
        [table],
    )
    with fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    checkpoint = tmp_path / "checkpoint"
    log = tmp_path / "runtime.log"
    with log.open("wb") as out:
        runtime = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dbus"), "runtime", "start",
                "--source", f"shop={services.mariadb.dsn}", "--functions", str(folder),
                "--kafka", services.kafka.bootstrap_servers,
                "--elasticsearch", services.elasticsearch.url,
                "--checkpoint", str(checkpoint), "--from", "latest", "--master", "local[2]",
                "--api", "127.0.0.1:0",
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip
    label = uuid.uuid4().hex[:12]
    target = Path(prometheus_service.targets_dir) / f"test-{label}.json"
    try:
        url = runtime_api(checkpoint)
        target.write_text(json.dumps(
            [{"targets": [urllib.parse.urlsplit(url).netloc], "labels": {"test": label}}]
        ))  # fmt: skip
        mine = f'{{test="{label}"}}'
        wait_for(lambda: _one(prometheus_service, f"up{mine}") == 1, 60,
                 "Prometheus scrapes the runtime")  # fmt: skip
        with fresh_database.connect() as conn, conn.cursor() as cur:
            for first in range(1, ROWS + 1, 50):
                cur.executemany(
                    "INSERT INTO orders VALUES (%s, %s)",
                    [(i, i * 3) for i in range(first, first + 50)],
                )
        written = time.monotonic()
        dead = ROWS // 10

        def counted() -> bool:
            delivered = _one(prometheus_service, f"dbus_deployment_delivered_total{mine}")
            letters = _one(prometheus_service, f"dbus_deployment_dead_letters_total{mine}")
            return (delivered, letters) == (ROWS - dead, dead)

        wait_for(counted, 120, f"{ROWS - dead} delivered and {dead} dead letters in Prometheus")
        events = _one(prometheus_service, f"dbus_deployment_events_total{mine}")
        assert events == ROWS
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
        runtime.send_signal(signal.SIGTERM)
        try:
            runtime.wait(60)
        except subprocess.TimeoutExpired:
            runtime.kill()
            runtime.wait()
        print(log.read_text(errors="replace")[-3000:])
