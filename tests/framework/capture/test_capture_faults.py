"""Faults: killed connection, restarted server, stalled network — no loss, no duplicate,
on MariaDB and on MySQL."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from capture_support import StallingProxy, TablesAt, execute, read_all
from scratch import FreshDatabase
from support import PrivateServices, table_map_ids

from dbus_deploy.services import restart
from dbus_fn import RowChange, TransactionCommit
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.errors import SourceError, SourceUnreachableError

pytestmark = pytest.mark.integration

STATEMENTS = 20
ROWS_PER_STATEMENT = 1000
PAD = 3000
"""Bytes of padding per row: 20,000 rows make a 60 MB transaction, more than the
socket buffers of both ends can hold (Linux grows a receive buffer up to
net.ipv4.tcp_rmem's maximum, 32 MiB on some machines), so a fault lands while the
server is still sending it."""


BOTH = pytest.mark.parametrize("server", ["mariadb", "mysql"])
"""A fault the server takes part in (its restart, its dump thread killed or stalled),
tested on each server."""


@pytest.fixture
def database(private_database: FreshDatabase) -> FreshDatabase:
    """This module's databases are on a server of its own (``private_server``): one
    test restarts the server, and the others' 60 MB transactions stay out of the
    binlog every other test's reader goes through."""
    return private_database


def write_big_transaction(connection: Any, first_id: int = 1) -> list[int]:
    """One transaction of many statements, large enough not to fit in socket buffers."""
    ids: list[int] = []
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        for statement in range(STATEMENTS):
            base = first_id + statement * ROWS_PER_STATEMENT
            last = base + ROWS_PER_STATEMENT - 1
            cursor.execute(
                f"INSERT INTO t WITH RECURSIVE n (i) AS (SELECT {base} UNION ALL"
                f" SELECT i + 1 FROM n WHERE i < {last}) SELECT i, REPEAT('x', {PAD}) FROM n"
            )
            ids += range(base, last + 1)
        cursor.execute("COMMIT")
    return ids


def consume(stream: Any, seen: list[int], rows: int) -> None:
    """Take items until ``rows`` more row changes were seen."""
    target = len(seen) + rows
    while len(seen) < target:
        item = next(stream)
        if isinstance(item, RowChange):
            seen.append(item.row["id"])


def drain_until(stream: Any, seen: list[int], end: Any) -> None:
    for item in stream:
        if isinstance(item, RowChange):
            seen.append(item.row["id"])
        if isinstance(item, TransactionCommit) and item.position == end:
            return
    raise AssertionError("the stream ended before the expected commit")


def restarted(database: FreshDatabase, server: str, services: PrivateServices) -> Any:
    """Restart the module's own ``server`` (this process started it, and so reaps it at
    once when it exits) and reconnect the test's connections; a new connection to it."""
    restart([server], config=services.config)
    for opened in database._opened:  # the fixture closes these when the test ends
        with contextlib.suppress(Exception):
            opened.close()  # closes the dead socket (and raises: the server went away)
        opened.connect()
    return database.connect()


def binlog_listing(connection: Any, since: str) -> list[tuple[Any, ...]]:
    """SHOW BINLOG EVENTS of every file from ``since`` on, in order."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW BINARY LOGS")
        files = [row[0] for row in cursor.fetchall() if row[0] >= since]
        listed: list[tuple[Any, ...]] = []
        for name in files:
            cursor.execute(f"SHOW BINLOG EVENTS IN '{name}'")
            listed += cursor.fetchall()
    return listed


def read_into_a_big_transaction(
    connection: Any, reader: BinlogReader
) -> tuple[Any, list[int], list[int], Any]:
    """Writes a big transaction and reads its first rows: (stream, seen, expected, end)."""
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
    start = reader.master_position()
    expected = write_big_transaction(connection)
    end = reader.master_position()
    # 30 s with no row of the test's tables ends the read (the test then fails on the
    # rows it misses) instead of hanging: the reconnect after the fault waits 0.2 s first.
    stream = reader.read(start, idle_timeout=30)
    seen: list[int] = []
    consume(stream, seen, 50)
    return stream, seen, expected, end


@BOTH
def test_killed_replication_connection_resumes_mid_transaction_without_loss_or_duplicate(
    database: Any, reader: BinlogReader
) -> None:
    connection = database.connect()
    stream, seen, expected, end = read_into_a_big_transaction(connection, reader)
    execute(connection, f"KILL {reader.connection_id}")
    drain_until(stream, seen, end)
    stream.close()
    assert reader.reconnects >= 1
    assert seen == expected


@BOTH
def test_restarted_server_resumes_from_the_last_commit_without_loss_or_duplicate(
    database: Any,
    tables_at: TablesAt,
    reader: BinlogReader,
    server: str,
    private_server: PrivateServices,
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
    # The server's binlog dump blocks on the reader, which reads nothing while the test
    # restarts the server, and the server's shutdown waits net_write_timeout for it:
    # 60 s by default, 5 s on this server of the module's own (the restart resets it).
    execute(connection, "SET GLOBAL net_write_timeout = 5")
    expected = write_big_transaction(connection)
    # 60 s with no row of the test's tables ends the read instead of hanging: more than
    # the restart (seconds on a small server) and the reconnect after it take.
    stream = reader.read(start, idle_timeout=60)
    seen: list[int] = []
    consume(stream, seen, 50)
    after = restarted(database, server, private_server)
    execute(after, "INSERT INTO t VALUES (999999, 'after the restart')")
    end = reader.master_position()
    drain_until(stream, seen, end)
    stream.close()
    assert reader.reconnects >= 1
    assert seen == [*expected, 999999]


# Both ways of splitting the binlog into events: each kept table maps by their ids.
@BOTH
@pytest.mark.parametrize("decoding", ["native", "python"], indirect=True)
def test_a_read_across_server_restarts_tells_apart_tables_whose_ids_a_restart_reused(
    database: Any, reader: BinlogReader, server: str, private_server: PrivateServices
) -> None:
    """A server numbers the tables it opens from the same start at each boot, so a table
    map id of the binlog before a restart names another table after it. The first table
    a test opens after each of two restarts gets the same id; a read from before both
    must give each its own rows, decoded by its own columns."""
    start = reader.master_position()
    execute(restarted(database, server, private_server),
            "CREATE TABLE early (id INT PRIMARY KEY, note VARCHAR(20))",
            "INSERT INTO early VALUES (1, 'before the restart')")  # fmt: skip
    later = restarted(database, server, private_server)
    execute(later, "CREATE TABLE late (id BIGINT PRIMARY KEY, amount DECIMAL(8,2), day DATE)",
            "INSERT INTO late VALUES (2, 12.50, '2026-12-03')")  # fmt: skip
    ids = table_map_ids(binlog_listing(later, start.file), database.name)
    assert ids["early"] == ids["late"], f"the restarts gave the two tables other ids: {ids}"
    changes = [(item.table, item.row) for item in read_all(reader, start)
               if isinstance(item, RowChange)]  # fmt: skip
    assert changes == [
        ("early", {"id": 1, "note": "before the restart"}),
        ("late", {"id": 2, "amount": Decimal("12.50"), "day": date(2026, 12, 3)}),
    ]


def _stallable(database: Any, name: str) -> tuple[StallingProxy, SourceSpec]:
    """A source ``name`` of ``database``'s tables, read through a proxy that can stall."""
    endpoint = database.endpoint
    proxy = StallingProxy(endpoint.host, endpoint.port)
    return proxy, SourceSpec(
        name=name,
        dsn=f"mysql://{endpoint.user}:{endpoint.password}@127.0.0.1:{proxy.port}",
        tables=(f"{database.name}.*",),
    )


@BOTH
def test_network_stall_is_detected_and_resumed_without_loss_or_duplicate(
    database: Any,
) -> None:
    proxy, spec = _stallable(database, "stall")
    # Silence of 2 s (ten heartbeats) is a stall: a false one on a loaded machine is only
    # one more reconnect, which the assertions allow.
    reader = BinlogReader(
        spec, replica_id_for(f"stall/{uuid.uuid4()}"), heartbeat=0.2, stall_timeout=2.0
    )
    try:
        connection = database.connect()
        stream, seen, expected, end = read_into_a_big_transaction(connection, reader)
        proxy.stall()
        drain_until(stream, seen, end)
        stream.close()
        assert reader.reconnects >= 1
        assert seen == expected
    finally:
        reader.close()
        proxy.close()


def _asked_aside(ask: Callable[[], Any], hung: str) -> tuple[Any, float]:
    """``ask()`` in a thread of its own, so a question that hangs fails the test (with
    ``hung``) rather than holding it: its answer, and the seconds it took."""
    import threading
    import time

    answers: list[Any] = []
    asking = threading.Thread(target=lambda: answers.append(ask()), daemon=True)
    began = time.monotonic()
    asking.start()
    asking.join(30)
    assert not asking.is_alive(), hung
    [answer] = answers
    return answer, time.monotonic() - began


@pytest.mark.parametrize("server", ["mariadb"])
def test_a_question_to_a_server_that_stopped_answering_ends_within_the_query_timeout(
    database: Any,
) -> None:
    """The planner asks every source's server where its binlog ends at every batch, on
    the reader's control connection: one that hangs there (packets stop, nothing is
    closed) must not hold the asker, and with it every other source, forever. Past the
    query timeout the question fails as a server that cannot be reached (the planner
    waits that out, ``probe`` telling when it answers again); the next question goes
    on a new connection."""
    proxy, spec = _stallable(database, "hung")
    reader = BinlogReader(spec, replica_id_for(f"hung/{uuid.uuid4()}"), query_timeout=2.0)

    def ask() -> Any:
        try:
            return reader.master_position()
        except SourceUnreachableError as exc:
            return exc

    try:
        before = reader.master_position()
        proxy.stall()  # the control connection's packets stop; new ones go through
        failed, took = _asked_aside(ask, "the question ends though its connection hangs")
        assert took < 10, "within about the query timeout"
        assert isinstance(failed, SourceUnreachableError), failed
        assert "source 'hung'" in str(failed) and "\n" not in str(failed)
        reader.probe(2.0)  # a new connection is greeted
        assert reader.master_position().file == before.file, "asked again, it is answered"
    finally:
        proxy.close()  # first: a question still hanging ends, and frees the reader
        reader.close()


@pytest.mark.parametrize("server", ["mariadb"])
def test_a_source_whose_first_server_hangs_is_read_from_the_next(database: Any) -> None:
    """A server that hangs (stopped, or a host whose kernel still takes connections)
    takes a connection and never greets it. Choosing where to read asks each server
    of the source in turn, the current one first: it waited on that one for ever,
    so the read never moved to the server that answers. Each question is bounded by
    the connect timeout. The hung server is a socket that listens and never accepts:
    the kernel completes the connection, and nothing speaks on it."""
    import socket

    hung = socket.create_server(("127.0.0.1", 0))
    endpoint = database.endpoint
    spec = SourceSpec(
        name="hung-first",
        dsn=f"mysql://{endpoint.user}:{endpoint.password}@127.0.0.1:{hung.getsockname()[1]},"
        f"{endpoint.host}:{endpoint.port}",
        tables=(f"{database.name}.*",),
    )
    reader = BinlogReader(spec, replica_id_for(f"hung-first/{uuid.uuid4()}"), connect_timeout=1.0)
    try:
        start, took = _asked_aside(
            lambda: reader.resolve_start("latest"), "the hung server holds the choice of a server"
        )
        assert took < 10, "within about the connect timeout"
        assert start.file, start
        assert reader.server_index == 1, "the read goes to the server that answers"
    finally:
        hung.close()
        reader.close()


def test_an_event_type_the_capture_does_not_know_stops_the_read_in_one_line(
    database: Any, tables_at: TablesAt, reader: BinlogReader
) -> None:
    # MariaDB compresses row events once log_bin_compress is turned on mid-read (a
    # global setting, checked at the read's start only): types 169-171, which
    # mysql-replication has no class for. Skipped, their rows would be lost unseen.
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, pad TEXT)")
    execute(connection, "INSERT INTO t VALUES (1, 'plain')")
    first = reader.read(start, idle_timeout=30)
    assert next(i for i in first if isinstance(i, RowChange)).row["id"] == 1
    first.close()
    execute(connection, "SET GLOBAL log_bin_compress = ON")
    try:
        execute(connection, f"INSERT INTO t VALUES (2, REPEAT('x', {PAD}))")
    finally:
        execute(connection, "SET GLOBAL log_bin_compress = OFF")
    with pytest.raises(SourceError) as stopped:
        list(reader.read(start, idle_timeout=30))
    message = str(stopped.value)
    assert "an event of type 1" in message and "that dbus does not know" in message
    assert "\n" not in message and "bootstrap the tables it changed" in message


def test_only_events_that_hold_no_change_or_are_marked_ignorable_are_passed_by() -> None:
    from dbus_fn.capture._session import IGNORABLE_F, PASSED_BY, unknown_event

    assert not any(unknown_event(kind, 0) for kind in PASSED_BY)
    assert unknown_event(26, 0), "INCIDENT_EVENT: the server says changes may be lost"
    assert unknown_event(169, 0) and unknown_event(250, 0)
    assert not unknown_event(250, IGNORABLE_F)
