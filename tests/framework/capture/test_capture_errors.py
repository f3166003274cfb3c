"""Clear, immediate errors: bad positions, missing privileges, clashing server ids."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from capture_support import TablesAt, execute

from dbus_fn import BinlogPosition
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.errors import ConfigError, PositionError, SourceAccessError, SourceError

pytestmark = pytest.mark.integration


def first_item(reader: BinlogReader, start: Any) -> Any:
    return next(iter(reader.read(start, idle_timeout=2)), None)


def test_purged_binlog_file_is_a_position_error_with_explicit_choices(reader: BinlogReader) -> None:
    first = reader.binary_logs()[0][0]
    stem, number = first.rsplit(".", 1)
    purged = BinlogPosition(f"{stem}.{0:0{len(number)}d}", 4)
    with pytest.raises(PositionError) as caught:
        first_item(reader, purged)
    assert "purged" in str(caught.value) or "no binlog file" in str(caught.value)
    assert "--from earliest" in str(caught.value) and "--from latest" in str(caught.value)
    assert caught.value.choices == ("earliest", "latest", "snapshot")


def test_unknown_file_offset_past_end_and_offset_inside_an_event_are_refused(
    fresh_database: Any, reader: BinlogReader
) -> None:
    end = reader.master_position()
    with pytest.raises(PositionError, match="no binlog file"):
        first_item(reader, BinlogPosition("nosuch.000001", 4))
    with pytest.raises(PositionError, match="outside"):
        first_item(reader, BinlogPosition(end.file, end.pos + 10_000_000))
    execute(fresh_database.connect(), "CREATE TABLE t (id INT PRIMARY KEY)")
    with pytest.raises(PositionError, match="not the start of an event"):
        first_item(reader, BinlogPosition(end.file, end.pos + 1))


def test_position_inside_a_transaction_is_refused(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY)")
    execute(connection, "INSERT INTO t VALUES (1)")
    events = reader._sql(f"SHOW BINLOG EVENTS IN %s FROM {start.pos}", (start.file,), doing="t")
    table_map = next(row for row in events if row[2] == "Table_map")
    with pytest.raises(PositionError, match="inside a transaction"):
        first_item(reader, BinlogPosition(start.file, int(table_map[1])))


def test_gtid_not_in_the_binlog_is_refused(reader: BinlogReader) -> None:
    with pytest.raises(PositionError, match="not in the source's binlog"):
        first_item(reader, BinlogPosition("", 0, "0-1-999999999"))
    with pytest.raises(PositionError, match="not in the source's binlog"):
        first_item(reader, BinlogPosition("", 0, "77-1-1"))


def test_snapshot_is_a_start_for_read_not_a_position(reader: BinlogReader) -> None:
    with pytest.raises(PositionError, match="not a position") as caught:
        reader.resolve_start("snapshot")
    assert caught.value.choices == ("earliest", "latest")
    with pytest.raises(ConfigError):
        reader.resolve_start("yesterday")


@pytest.fixture
def limited_user(fresh_database: Any) -> Iterator[Any]:
    """Makes a user with the given grants; dropped after the test."""
    admin = fresh_database.connect(use_database=False)
    made: list[str] = []

    def make(*grants: str) -> SourceSpec:
        name = f"u{uuid.uuid4().hex[:12]}"
        execute(admin, f"CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw'")
        made.append(name)
        for grant in grants:
            execute(admin, f"GRANT {grant} ON *.* TO '{name}'@'127.0.0.1'")
        endpoint = fresh_database.endpoint
        return SourceSpec("limited", f"mysql://{name}:pw@{endpoint.host}:{endpoint.port}")

    yield make
    for name in made:
        execute(admin, f"DROP USER '{name}'@'127.0.0.1'")


def test_wrong_password_is_an_access_error_at_once(fresh_database: Any) -> None:
    endpoint = fresh_database.endpoint
    spec = SourceSpec("bad", f"mysql://{endpoint.user}:wrong@{endpoint.host}:{endpoint.port}")
    reader = BinlogReader(spec, replica_id_for(f"bad/{uuid.uuid4()}"))
    began = time.monotonic()
    with pytest.raises(SourceAccessError, match="refused the login") as caught:
        first_item(reader, "latest")
    assert time.monotonic() - began < 5
    assert "wrong" not in str(caught.value)


def test_missing_binlog_monitor_grant_is_named(limited_user: Any) -> None:
    reader = BinlogReader(limited_user("SELECT"), replica_id_for(f"l/{uuid.uuid4()}"))
    with pytest.raises(SourceAccessError) as caught:
        reader.master_position()
    assert caught.value.grant is not None and "BINLOG MONITOR" in caught.value.grant
    assert "GRANT BINLOG MONITOR" in str(caught.value)


def test_missing_replication_slave_grant_is_named_and_not_retried(limited_user: Any) -> None:
    reader = BinlogReader(
        limited_user("BINLOG MONITOR", "SELECT"), replica_id_for(f"l/{uuid.uuid4()}")
    )
    start = reader.master_position()
    began = time.monotonic()
    with pytest.raises(SourceAccessError) as caught:
        first_item(reader, start)
    assert time.monotonic() - began < 5
    assert caught.value.grant == "REPLICATION SLAVE"
    assert "GRANT REPLICATION SLAVE ON *.*" in str(caught.value)
    reader.close()


def test_unreachable_source_is_a_clear_error_not_a_retry_loop() -> None:
    spec = SourceSpec("gone", "mysql://dbus:dbus@127.0.0.1:9")
    reader = BinlogReader(spec, replica_id_for("gone"), connect_timeout=2)
    with pytest.raises(SourceError, match="unreachable") as caught:
        first_item(reader, "latest")
    assert "dbus:dbus" not in str(caught.value)


def test_the_sources_own_server_id_is_refused(reader: BinlogReader) -> None:
    own = reader.server_info().server_id
    clash = BinlogReader(reader.spec, own)
    with pytest.raises(SourceError, match="own server_id"):
        first_item(clash, "latest")


def test_a_server_id_used_by_another_reader_is_refused(
    fresh_database: Any, source: SourceSpec
) -> None:
    server_id = replica_id_for(f"shared/{uuid.uuid4()}")
    first = BinlogReader(source, server_id, heartbeat=0.2)
    execute(fresh_database.connect(), "CREATE TABLE t (id INT PRIMARY KEY)")
    start = first.master_position()
    execute(fresh_database.connect(), "INSERT INTO t VALUES (1)")
    running = first.read(start, idle_timeout=5)
    next(running)  # the first reader is now connected and registered
    other = SourceSpec("other", source.dsn, source.tables)
    with pytest.raises(SourceError, match="already used by another replica"):
        first_item(BinlogReader(other, server_id), "latest")
    running.close()
    first.close()


def test_bad_server_ids_are_config_errors(source: SourceSpec) -> None:
    for bad in (0, -1, 2**32, "7", True):
        with pytest.raises(ConfigError, match="server_id"):
            BinlogReader(source, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_a_session_logging_partial_row_images_stops_the_read_where_it_is(
    tables_at: TablesAt, reader: BinlogReader, image: str
) -> None:
    # binlog_row_image is a session setting: the server's FULL, checked at the start,
    # does not hold for a client that sets its own.
    connection, start = tables_at(
        "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10), b BLOB)",
        "INSERT INTO t VALUES (1, 'a', 'b')",
    )
    execute(connection, f"SET SESSION binlog_row_image = '{image}'",
            "UPDATE t SET a = 'z' WHERE id = 1")  # fmt: skip
    with pytest.raises(SourceError, match="without every column") as stopped:
        list(reader.read(start, stop=reader.master_position(), idle_timeout=10))
    message = str(stopped.value)
    assert "\n" not in message
    assert "binlog_row_image=FULL" in message and start.file in message
