"""Lag in seconds (event time vs now, heartbeats when idle) and in bytes."""

from __future__ import annotations

from typing import Any

import pytest
from capture_support import execute
from scratch import FreshDatabase

from dbus_fn import RowChange
from dbus_fn.capture import BinlogReader

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_database(private_database: FreshDatabase) -> FreshDatabase:
    """This module's databases are on a MariaDB of its own (``private_server``): its
    binlog holds only the test's changes, so a reader that has read them all is at the
    binlog's end and its lag drops to zero."""
    return private_database


def test_lag_counts_seconds_and_bytes_behind_and_drops_to_zero_when_idle(
    fresh_database: Any, reader: BinlogReader
) -> None:
    assert (reader.lag().seconds, reader.lag().bytes) == (None, None)
    connection = fresh_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
    start = reader.master_position()
    # The first change is made 3 s old (its binlog time, as the session's clock says),
    # as if the read began 3 s after it: no waiting for it to age.
    execute(connection, "SET timestamp = UNIX_TIMESTAMP() - 3",
            "INSERT INTO t VALUES (1, 'old')", "SET timestamp = DEFAULT")  # fmt: skip
    execute(connection, "INSERT INTO t SELECT seq, REPEAT('x', 1000) FROM seq_2_to_500")
    # Ends once 1.5 s pass with nothing for the test's tables, which the server says
    # with its heartbeats only once the read is at its end: a slow read is not cut short.
    stream = reader.read(start, idle_timeout=1.5)
    first = next(stream)
    assert isinstance(first, RowChange)
    behind = reader.lag()
    # At least the first change's age (3 s), less a clock's second of rounding.
    assert behind.seconds is not None and behind.seconds >= 1.5
    assert behind.bytes is not None and behind.bytes > 400_000
    for _ in stream:  # drains, then idles out: the heartbeat says nothing more waits
        pass
    caught_up = reader.lag()
    assert caught_up.seconds == 0.0
    assert caught_up.bytes == 0, "caught up: the read position is the end of the binlog"
