"""Exact resume: from any committed position, by file:pos and by GTID alone."""

from __future__ import annotations

from typing import Any

import pytest
from capture_support import IDLE_GUARD, TablesAt, commits, execute, read_all, rows
from scratch import FreshDatabase

from dbus_fn import BinlogPosition, RowChange, SchemaChange, TransactionCommit
from dbus_fn.capture import BinlogReader

pytestmark = pytest.mark.integration


@pytest.fixture
def fresh_database(private_database: FreshDatabase) -> FreshDatabase:
    """This module's databases are on a MariaDB of its own (``private_server``): its
    binlog holds only the test's changes, so a read up to the server's last position
    ends at the test's last commit, and an idle server is idle."""
    return private_database


def signature(item: Any) -> tuple[Any, ...]:
    """What must be equal between two reads of the same binlog range."""
    if isinstance(item, RowChange):
        return ("row", item.op, item.table, item.position, item.row_index,
                dict(item.before or {}), dict(item.after or {}))  # fmt: skip
    if isinstance(item, SchemaChange):
        return ("ddl", item.statement, item.position)
    assert isinstance(item, TransactionCommit)
    return ("commit", item.position, item.transaction_id, item.rows)


def write_history(connection: Any) -> None:
    execute(
        connection,
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(20))",
        "CREATE TABLE b (id INT PRIMARY KEY, n BIGINT)",
        "INSERT INTO a VALUES (1, 'one')",
        "INSERT INTO a VALUES (2, 'two'), (3, 'three')",
        "BEGIN",
        "INSERT INTO b VALUES (10, 100)",
        "UPDATE a SET v = 'uno' WHERE id = 1",
        "INSERT INTO b VALUES (11, 110), (12, 120)",
        "DELETE FROM a WHERE id = 2",
        "COMMIT",
        "ALTER TABLE a ADD COLUMN w INT",
        "INSERT INTO a VALUES (4, 'four', 44)",
        "FLUSH BINARY LOGS",
        "INSERT INTO b VALUES (13, 130)",
        "UPDATE b SET n = n + 1",
    )


def read_history(fresh_database: Any, reader: BinlogReader) -> tuple[list[Any], BinlogPosition]:
    """Write the history and read it whole: every item, and the position it ends at."""
    start = reader.master_position()
    write_history(fresh_database.connect())
    end = reader.master_position()
    return read_all(reader, start, end), end


def test_resume_from_every_commit_by_position_yields_exactly_the_items_after_it(
    fresh_database: Any, reader: BinlogReader
) -> None:
    everything, end = read_history(fresh_database, reader)
    assert len(rows(everything)) == 14
    boundaries = [i for i, item in enumerate(everything) if isinstance(item, TransactionCommit)]
    for index in boundaries:
        position = everything[index].position
        resumed = read_all(reader, BinlogPosition(position.file, position.pos), end)
        assert [signature(i) for i in resumed] == [signature(i) for i in everything[index + 1 :]]


def test_resume_by_gtid_alone_yields_exactly_the_items_after_it(
    fresh_database: Any, reader: BinlogReader
) -> None:
    everything, end = read_history(fresh_database, reader)
    ours = [c for c in commits(everything) if c.rows or c is everything[-1]]
    for commit in ours:
        assert commit.position.gtid
        index = everything.index(commit)
        resumed = read_all(reader, BinlogPosition("", 0, commit.position.gtid), end)
        assert [signature(i) for i in resumed] == [signature(i) for i in everything[index + 1 :]]


def test_restart_that_interrupted_a_multi_statement_transaction_replays_it_whole(
    fresh_database: Any, reader: BinlogReader
) -> None:
    connection = fresh_database.connect()
    execute(
        connection, "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE TABLE b (id INT PRIMARY KEY)"
    )
    start = reader.master_position()
    execute(
        connection,
        "BEGIN",
        "INSERT INTO a VALUES (1), (2)",
        "INSERT INTO b VALUES (1)",
        "INSERT INTO a VALUES (3)",
        "COMMIT",
    )
    end = reader.master_position()
    stream = reader.read(start, stop=end, idle_timeout=IDLE_GUARD)
    taken = [next(stream) for _ in range(3)]  # stops inside the transaction (its 3rd row)
    assert all(isinstance(item, RowChange) for item in taken)
    stream.close()
    # The runtime only ever commits TransactionCommit positions: resume from `start`.
    replay = read_all(reader, start, end)
    assert [(r.table, r.row["id"]) for r in rows(replay)] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("a", 3),
    ]
    assert [signature(i) for i in replay[:3]] == [signature(i) for i in taken]
    assert isinstance(replay[-1], TransactionCommit) and replay[-1].position == end


def test_read_stops_at_the_commit_that_reaches_stop_and_positions_are_boundaries(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE a (id INT PRIMARY KEY)")
    execute(connection, "INSERT INTO a VALUES (1)")
    middle = reader.master_position()
    execute(connection, "INSERT INTO a VALUES (2)")
    items = list(reader.read(start, stop=middle, idle_timeout=IDLE_GUARD))
    assert [r.row["id"] for r in rows(items)] == [1]
    assert items[-1] == commits(items)[-1] and items[-1].position == middle
    assert list(reader.read(middle, stop=middle, idle_timeout=IDLE_GUARD)) == []


# Exclusive (run apart from the parallel integration pass): bounds latencies, a change
# committed 0.5 s into the read is read before its 1.5 s are up, and the read ends
# within 1.5 s of its time; a loaded machine can delay either.
@pytest.mark.exclusive
def test_an_open_read_goes_on_past_stop_until_its_time_and_ends_at_a_commit(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    import threading
    import time

    connection, start = tables_at("CREATE TABLE a (id INT PRIMARY KEY)")
    execute(connection, "INSERT INTO a VALUES (1)")
    planned = reader.master_position()
    later = threading.Timer(0.5, lambda: execute(connection, "INSERT INTO a VALUES (2)"))
    later.start()
    began = time.monotonic()
    items = list(reader.read(start, stop=planned, until=began + 1.5))
    took = time.monotonic() - began
    later.join()
    # The change committed after the planned end came while the read was open...
    assert [r.row["id"] for r in rows(items)] == [1, 2]
    # ...which ended at its time (an idle server's heartbeat), on a commit.
    assert 1.5 <= took < 3.0
    assert items[-1] == commits(items)[-1]
    assert items[-1].position == reader.master_position()


@pytest.mark.parametrize(
    ("catch_up", "read"),
    [(60.0, [1, 2, 3]), (None, [1]), (0.0, [1])],
    ids=["behind-reads-on", "no-catch-up", "catch-up-over"],
)
def test_an_open_read_behind_the_server_reads_on_until_the_present(
    tables_at: TablesAt, reader: BinlogReader, catch_up: float | None, read: list[int]
) -> None:
    """Its time is up, but the commits past `stop` carry binlog times a minute old
    (the server is that far ahead of the read): it reads on, up to `catch_up`, and
    ends at the boundary where the present begins (commits stamped ahead of the
    clock, so that a slow machine cannot make them look old)."""
    import time

    connection, start = tables_at("CREATE TABLE a (id INT PRIMARY KEY)")
    execute(connection, "SET timestamp = UNIX_TIMESTAMP() - 60", "INSERT INTO a VALUES (1)")
    planned = reader.master_position()
    execute(
        connection,
        "INSERT INTO a VALUES (2)",
        "INSERT INTO a VALUES (3)",
        "SET timestamp = DEFAULT",  # UNIX_TIMESTAMP() is the session's fixed time till then
        "SET timestamp = UNIX_TIMESTAMP() + 30",
        "INSERT INTO a VALUES (4)",
        "INSERT INTO a VALUES (5)",
        "SET timestamp = DEFAULT",
    )
    began = time.monotonic()
    items = list(
        reader.read(
            start,
            stop=planned,
            until=began,
            catch_up=None if catch_up is None else began + catch_up,
        )
    )
    assert [r.row["id"] for r in rows(items)] == read
    assert items[-1] == commits(items)[-1]


def test_earliest_and_latest_resolve_to_real_positions(reader: BinlogReader) -> None:
    earliest = reader.resolve_start("earliest")
    latest = reader.resolve_start("latest")
    assert earliest.pos == 4 and earliest.file == reader.binary_logs()[0][0]
    assert latest == reader.master_position() or latest.file >= earliest.file


def test_stop_where_no_transaction_ends_returns_once_the_server_is_idle(
    fresh_database: Any, reader: BinlogReader
) -> None:
    """After FLUSH BINARY LOGS the source's position is in a file with no transaction."""
    import threading

    connection = fresh_database.connect()
    execute(connection, "CREATE TABLE a (id INT PRIMARY KEY)")
    start = reader.master_position()
    execute(connection, "INSERT INTO a VALUES (1)", "FLUSH BINARY LOGS")
    stop = reader.master_position()
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.extend(reader.read(start, stop=stop)))
    worker.start()
    worker.join(timeout=20)  # a hang guard: at an idle server's first heartbeat (0.2 s)
    assert not worker.is_alive(), "read() did not return at a stop between transactions"
    assert [r.row["id"] for r in rows(found)] == [1]


def test_non_transactional_tables_commit_at_their_commit_query(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at(
        "CREATE TABLE m (id INT PRIMARY KEY) ENGINE=MyISAM",
        "CREATE TABLE i (id INT PRIMARY KEY) ENGINE=InnoDB",
    )
    execute(connection, "INSERT INTO m VALUES (1), (2)", "BEGIN", "INSERT INTO i VALUES (3)",
            "INSERT INTO m VALUES (4)", "COMMIT")  # fmt: skip
    items = read_all(reader, start)
    assert [r.row["id"] for r in rows(items)] == [1, 2, 4, 3] or [
        r.row["id"] for r in rows(items)
    ] == [1, 2, 3, 4]
    ours = [c for c in commits(items) if c.rows]
    assert sum(c.rows for c in ours) == 4
    for commit in ours:  # each is a real boundary: resuming there gives what follows
        after = read_all(reader, commit.position, items[-1].position)
        assert [signature(i) for i in after] == [
            signature(i) for i in items[items.index(commit) + 1 :]
        ]


# Exclusive (run apart from the parallel integration pass): bounds a latency, the read
# ends within 6 s of starting for 1 s of idleness; a loaded machine can delay it.
@pytest.mark.exclusive
def test_idle_timeout_returns_promptly_on_an_idle_source(reader: BinlogReader) -> None:
    """Heartbeats keep the reader responsive: no items for the timeout ends the read."""
    import time

    start = reader.master_position()
    began = time.monotonic()
    items = list(reader.read(start, idle_timeout=1.0))
    took = time.monotonic() - began
    assert all(isinstance(i, TransactionCommit) and not i.rows for i in items)
    assert took < 6, f"read() took {took:.1f}s to notice 1s of idleness"
