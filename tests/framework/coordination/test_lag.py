"""Lag: binlog bytes after a committed position (pure arithmetic, then a real source)."""

from __future__ import annotations

from typing import Any

import pytest
from support import wait_until

from dbus_fn.coordination import Coordinator, ZooKeeperSettings, bytes_behind
from dbus_fn.events import BinlogPosition

LOGS = [("binlog.000001", 1000), ("binlog.000002", 500), ("binlog.000003", 300)]


def test_bytes_behind_within_one_file_and_across_files() -> None:
    end = BinlogPosition("binlog.000003", 120)
    assert bytes_behind(LOGS, BinlogPosition("binlog.000003", 100), end) == 20
    assert bytes_behind(LOGS, BinlogPosition("binlog.000001", 900), end) == 100 + 500 + 120
    assert bytes_behind(LOGS, BinlogPosition("binlog.000003", 200), end) == 0
    assert bytes_behind(LOGS, BinlogPosition("binlog.000000", 4), end) is None, "purged"
    assert bytes_behind(LOGS, BinlogPosition("", 4, "0-1-5"), end) is None, "GTID only"


@pytest.mark.integration
def test_status_lag_asks_the_source(
    dbus: Any,
    cluster: ZooKeeperSettings,
    fresh_database: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for

    endpoint = fresh_database.endpoint
    dsn = f"mysql://{endpoint.user}:{endpoint.password}@{endpoint.host}:{endpoint.port}"
    monkeypatch.setenv("LAG_TEST_DSN", dsn)
    table = f"{fresh_database.name}.t"
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "LAG_TEST_DSN").exit_code == 0
    assert dbus("cluster", "source", "add", "elsewhere", "--dsn-env", "NOT_HERE_DSN").exit_code == 0
    reader = BinlogReader(SourceSpec("shop", dsn, (table,)), replica_id_for("lag-test"))
    try:
        start = reader.master_position()
    finally:
        reader.close()

    with Coordinator.from_settings(cluster, "rt-a") as runtime:
        wait_until(lambda: len(runtime.owned_sources()) == 2, 10, "both owned")
        for source, epoch in runtime.owned_sources().items():
            runtime.commit_position(source, start, epoch)
        connection = fresh_database.connect()
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(100))")
            cursor.executemany("INSERT INTO t VALUES (%s, %s)", [(i, "x" * 50) for i in range(20)])
        result = dbus("cluster", "status", "--lag")
    assert result.exit_code == 0, result.output
    (shop,) = [line for line in result.output.splitlines() if line.startswith("  shop ")]
    lag = int(shop.split("lag ")[1].split(" bytes")[0])
    assert lag > 20 * 50
    (elsewhere,) = [line for line in result.output.splitlines() if line.startswith("  elsewhere ")]
    assert elsewhere.endswith(
        "lag unknown (source elsewhere: environment variable NOT_HERE_DSN is not set in this "
        "runtime's environment)"
    )
    assert f":{endpoint.password}@" not in result.output
