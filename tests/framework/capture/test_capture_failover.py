"""A source of several servers follows a failover by GTID.

Each test runs its own primary and replica (``dbus services up mariadb
mariadb-replica``, or ``mysql mysql-replica``, in a private home on free ports), so
killing the primary touches no other test. The replica replicates by GTID with
``log_slave_updates``: MariaDB's GTID states, MySQL's GTID sets.

The load's writer holds between two commits while the primary is killed, once the
replica has every commit: with asynchronous replication, a transaction committed
on the primary the instant before it dies may reach the reader and never the
replica. The reader then refuses to go on (the missing-transactions test below),
which is right, but would make the kill's moment decide the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pytest
from failover_support import TABLE, Pair, private_pair
from support import wait_for

from dbus_fn.capture import BinlogReader, SourceSpec, coordinates, replica_id_for
from dbus_fn.capture._gtid_sets import GtidSet
from dbus_fn.errors import PositionError, SourceUnreachableError
from dbus_fn.events import BinlogPosition, RowChange

pytestmark = pytest.mark.integration


@pytest.fixture
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    """A private primary and replica: MariaDB's (GTID states), or MySQL's (GTID sets)
    where a test is marked ``ON_BOTH``."""
    with private_pair(tmp_path, getattr(request, "param", "mariadb")) as found:
        yield found


ON_BOTH = pytest.mark.parametrize("pair", ["mariadb", "mysql"], indirect=True)
"""The cases whose GTIDs differ between the servers (moves, what a server lacks); the
others (a snapshot, no server answering) hold whatever the GTIDs are."""


@dataclass
class Load:
    """Inserts rows one by one into the primary; after a failover, into the replica."""

    pair: Pair
    promoted: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    between_commits: threading.Lock = field(default_factory=threading.Lock)
    written: int = 0

    def run(self) -> None:
        connection = self.pair.primary()
        next_id = 1
        while not self.stop.is_set():
            try:
                with self.between_commits, connection.cursor() as cursor:
                    cursor.execute(
                        "INSERT INTO shop.orders VALUES (%s, %s)", (next_id, f"order {next_id}")
                    )
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError):
                self.promoted.wait(60)
                connection = self.pair.replica()
                continue  # the same row again, on the new primary
            next_id += 1
            self.written = next_id - 1
            time.sleep(0.002)


def table_rows(connection: Any) -> dict[int, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, note FROM shop.orders")
        return dict(cursor.fetchall())


@ON_BOTH
def test_source_tail_follows_a_killed_primary_to_its_promoted_replica(pair: Pair) -> None:
    dbus_command = Path(sys.executable).parent / "dbus"
    start = pair.gtid(pair.primary())
    tail = subprocess.Popen(
        [str(dbus_command), "source", "tail", pair.failover_dsn, "--tables", TABLE,
         "--from", start, "--idle-timeout", "15", "--no-commits",
         "--server-id", str(replica_id_for(f"test/{uuid.uuid4()}"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    load = Load(pair)
    writer = threading.Thread(target=load.run)
    writer.start()
    try:
        wait_for(lambda: load.written >= 300, 60, "300 rows on the primary")
        with load.between_commits:
            pair.caught_up()
            pair.kill_primary()
        pair.promote_replica()
        load.promoted.set()
        written = load.written
        wait_for(lambda: load.written >= written + 300, 60, "300 rows on the new primary")
    finally:
        load.stop.set()
        writer.join(30)
    out, err = tail.communicate(timeout=120)
    assert tail.returncode == 0, err.decode()
    seen: dict[int, list[str]] = {}
    for line in out.splitlines():
        event = json.loads(line)
        seen.setdefault(event["data"]["after"]["id"], []).append(event["data"]["after"]["note"])
    table = table_rows(pair.replica())
    assert set(seen) == set(table), "every row of the promoted replica's table, no other"
    assert all(notes == [table[key]] for key, notes in seen.items()), "each row once, as it is"
    assert b"reading 127.0.0.1" in err, err.decode()  # the move was said, in one line


@ON_BOTH
def test_a_reader_moves_to_the_replica_when_the_primary_turns_read_only(pair: Pair) -> None:
    spec = SourceSpec("shop", pair.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    start = reader.resolve_start("latest")
    assert reader.server_index == 0
    with pair.primary() as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop.orders VALUES (1, 'before')")
    items = reader.read(start, idle_timeout=20)
    first = next(item for item in items if isinstance(item, RowChange))
    primary_id, replica_id = pair.server_id(pair.primary()), pair.server_id(pair.replica())
    assert (first.row["note"], first.server_id) == ("before", primary_id)
    # The switch-over a failover tool makes with both servers up: the old primary
    # becomes read-only, the replica writable, and writes go on there.
    with pair.primary() as connection, connection.cursor() as cursor:
        cursor.execute("SET GLOBAL read_only = ON")
    pair.promote_replica()
    with pair.replica() as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop.orders VALUES (2, 'after')")
    second = next(item for item in items if isinstance(item, RowChange))
    assert (second.row["note"], second.server_id, reader.server_index) == ("after", replica_id, 1)
    # Positions name no server's binlog: the stream's order holds across the move.
    assert first.position.file.startswith("gtid.") and second.position.file.startswith("gtid.")
    assert coordinates(start) < coordinates(first.position) < coordinates(second.position)
    assert coordinates(second.position) < coordinates(reader.master_position())
    reader.close()


@pytest.mark.parametrize(
    "moment", ["follow_start", "by_gtid"], ids=["as-its-start-is-resolved", "as-its-stream-begins"]
)
def test_a_primary_killed_as_the_read_starts_leaves_the_read_to_the_replica(
    pair: Pair, moment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary is chosen and dies before it answered the read's next question: what
    the start asks of it, or the stream's first. The kill is real; only its moment is
    made sure of, by killing it as the read's step ``moment`` returns."""
    from dbus_fn.capture import _reader

    start = pair.gtid(pair.primary())
    with pair.primary() as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop.orders VALUES (1, 'before the kill')")
    pair.caught_up()
    step = getattr(_reader, moment)
    killed: list[int] = []

    def then_the_primary_dies(reader: Any, *args: Any) -> Any:
        done = step(reader, *args)
        if not killed:
            killed.append(reader.server_index)
            pair.kill_primary()
        return done

    monkeypatch.setattr(_reader, moment, then_the_primary_dies)
    spec = SourceSpec("shop", pair.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"test/{uuid.uuid4()}"))
    try:
        begin = reader.resolve_start(BinlogPosition("", 0, start))
        items = list(reader.read(begin, idle_timeout=3))
    finally:
        reader.close()
    assert killed == [0], "the primary was chosen, then killed"
    rows = [(i.row["id"], i.row["note"]) for i in items if isinstance(i, RowChange)]
    assert rows == [(1, "before the kill")]
    assert reader.server_index == 1


@ON_BOTH
def test_a_replica_missing_committed_transactions_is_one_clear_error(pair: Pair) -> None:
    pair.stop_replication()  # the replica falls behind for good
    before = pair.gtid(pair.primary())
    with pair.primary() as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop.orders VALUES (1, 'only on the primary')")
    committed = pair.gtid(pair.primary())
    # MariaDB names the domain's newest GTID (its state), MySQL the set's missing part.
    lacking = str(GtidSet.parse(committed).minus(GtidSet.parse(before))) if pair.mysql else (
        committed)  # fmt: skip
    assert (lacking and lacking != committed) or not pair.mysql
    pair.kill_primary()
    spec = SourceSpec("shop", pair.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"test/{uuid.uuid4()}"), reconnect_for=2)
    with pytest.raises(PositionError) as caught:
        list(reader.read(BinlogPosition("", 0, committed), idle_timeout=5))
    message = str(caught.value)
    assert f"no server can resume after GTID {committed}" in message
    assert f"{pair.replica_endpoint.port} lacks {lacking}" in message
    assert "dbus fn backfill" in message and "\n" not in message
    assert caught.value.exit_code != 0


def test_a_snapshot_of_several_servers_is_read_where_one_answers(pair: Pair) -> None:
    with pair.primary() as connection, connection.cursor() as cursor:
        cursor.execute("INSERT INTO shop.orders VALUES (1, 'kept')")
    pair.caught_up()
    pair.kill_primary()
    spec = SourceSpec("shop", pair.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"test/{uuid.uuid4()}"))
    items = list(reader.read("snapshot", idle_timeout=1))
    assert [(i.row["id"], i.row["note"]) for i in items if isinstance(i, RowChange)] == [
        (1, "kept")
    ]
    assert reader.server_index == 1
    reader.close()


def test_a_source_whose_servers_all_fail_names_each(pair: Pair) -> None:
    pair.kill_primary()
    with pair.replica() as connection, connection.cursor() as cursor:
        cursor.execute("SHUTDOWN")
    spec = SourceSpec("shop", pair.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"test/{uuid.uuid4()}"))
    with pytest.raises(SourceUnreachableError) as caught:
        reader.resolve_start("latest")
    message = str(caught.value)
    assert "no server answers" in message and message.count("127.0.0.1:") == 4
    assert "dbus:dbus" not in message and "\n" not in message

