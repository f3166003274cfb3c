"""Lag in seconds (event time vs now, heartbeats when idle) and in bytes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from capture_support import execute

from dbus_fn import RowChange
from dbus_fn.capture import BinlogReader

# Exclusive (run apart from the parallel integration pass): needs a quiet binlog: lag must drop to
# zero.
pytestmark = [pytest.mark.integration, pytest.mark.exclusive]


def test_lag_counts_seconds_and_bytes_behind_and_drops_to_zero_when_idle(
    fresh_database: Any, reader: BinlogReader
) -> None:
    assert (reader.lag().seconds, reader.lag().bytes) == (None, None)
    connection = fresh_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
    start = reader.master_position()
    execute(connection, "INSERT INTO t VALUES (1, 'old')")
    time.sleep(2.2)
    execute(connection, "INSERT INTO t SELECT seq, REPEAT('x', 1000) FROM seq_2_to_500")
    stream = reader.read(start, idle_timeout=1.5)
    first = next(stream)
    assert isinstance(first, RowChange)
    behind = reader.lag()
    assert behind.seconds is not None and behind.seconds >= 1.5
    assert behind.bytes is not None and behind.bytes > 400_000
    for _ in stream:  # drains, then idles out: the heartbeat says nothing more waits
        pass
    caught_up = reader.lag()
    assert caught_up.seconds == 0.0
    assert caught_up.bytes == 0, "caught up: the read position is the end of the binlog"
