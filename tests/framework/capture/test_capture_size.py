"""Size: huge transactions and rows are delivered whole, with memory bounded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from capture_support import TablesAt, execute
from scratch import FreshDatabase

from dbus_fn import Operation, RowChange, TransactionCommit
from dbus_fn.capture import BinlogReader

pytestmark = pytest.mark.integration

MB = 1024 * 1024


@pytest.fixture
def fresh_database(private_database: FreshDatabase) -> FreshDatabase:
    """This module's databases are on a MariaDB of its own (``private_server``): a test
    may raise its max_allowed_packet, and a million-row transaction stays out of the
    binlog every other test's reader goes through."""
    return private_database


@pytest.fixture
def large_packets(fresh_database: Any) -> Iterator[None]:
    """Lets this test write a row over 16 MB.

    Writing it needs max_allowed_packet above the row size (MariaDB's default is
    16 MB); reading it does not: the server sends binlog events up to 1 GB.
    """
    admin = fresh_database.connect(use_database=False)
    with admin.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.max_allowed_packet")
        (before,) = cursor.fetchone()
        if before < 64 * MB:
            cursor.execute(f"SET GLOBAL max_allowed_packet = {64 * MB}")
    yield
    if before < 64 * MB:
        with admin.cursor() as cursor:
            cursor.execute(f"SET GLOBAL max_allowed_packet = {before}")


def test_a_row_over_16mb_is_delivered_whole(
    fresh_database: Any, reader: BinlogReader, large_packets: None
) -> None:
    connection = fresh_database.connect()  # after the fixture: gets the larger packet size
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, big LONGBLOB, note VARCHAR(10))")
    start = reader.master_position()
    execute(connection, "INSERT INTO t VALUES (1, REPEAT(UNHEX('00FF61'), 6 * 1024 * 1024), 'n')")
    execute(connection, "UPDATE t SET note = 'm' WHERE id = 1")
    end = reader.master_position()
    with connection.cursor() as cursor:
        cursor.execute("SELECT SHA2(big, 256), LENGTH(big) FROM t")
        digest, length = cursor.fetchone()
    assert length > 16 * MB
    # The idle timeout only ends a read that has caught up with the server without
    # reaching `end` (the server's heartbeat says nothing more comes), instead of
    # hanging: a slow read is never cut short.
    changes = [i for i in reader.read(start, stop=end, idle_timeout=30) if isinstance(i, RowChange)]
    assert [c.op for c in changes] == [Operation.INSERT, Operation.UPDATE]
    for image in (changes[0].after, changes[1].before, changes[1].after):
        assert image is not None
        assert len(image["big"]) == length
        assert hashlib.sha256(image["big"]).hexdigest() == digest


def read_counting(reader: BinlogReader, start: Any, end: Any, op: Operation) -> tuple[int, int]:
    """Reads to ``end`` checking ids ascend; returns (rows, peak RSS growth in bytes)."""
    process = psutil.Process()
    baseline = peak = process.memory_info().rss
    count = 0
    for item in reader.read(start, stop=end, idle_timeout=60):  # a hang guard, as above
        if isinstance(item, RowChange):
            assert item.op is op and item.row["id"] == count + 1
            count += 1
            if count % 20_000 == 0:
                peak = max(peak, process.memory_info().rss)
        elif isinstance(item, TransactionCommit) and item.rows:
            assert item.rows == count
    return count, peak - baseline


def test_a_million_row_transaction_and_a_100k_row_delete_stream_in_bounded_memory(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)")
    execute(connection, "INSERT INTO t SELECT seq, 'some value', seq * 7 FROM seq_1_to_1000000")
    inserted = reader.master_position()
    rows, growth = read_counting(reader, start, inserted, Operation.INSERT)
    assert rows == 1_000_000
    # A buffered transaction would hold ~1M RowChanges (well over 1 GB); streaming
    # holds one rows event at a time.
    assert growth < 100 * MB, f"memory grew by {growth / MB:.0f} MB"

    execute(connection, "DELETE FROM t WHERE id <= 100000")
    deleted = reader.master_position()
    rows, growth = read_counting(reader, inserted, deleted, Operation.DELETE)
    assert rows == 100_000
    assert growth < 100 * MB, f"memory grew by {growth / MB:.0f} MB"
