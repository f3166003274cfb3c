"""The snapshot start: the tables as they are, then the binlog from the snapshot's
position, with nothing missed and nothing repeated, on MariaDB and on MySQL."""

from __future__ import annotations

from typing import Any

import pytest
from capture_support import execute, read_all, rows
from column_type_rows import COLUMNS, write_every_type

from dbus_fn import Operation, TransactionCommit
from dbus_fn.capture import BinlogReader

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_snapshot_rows_equal_the_binlogs_rows_for_every_type(
    database: Any, reader: BinlogReader
) -> None:
    connection = database.connect()
    start, end = write_every_type(connection, reader)
    captured = [c for c in rows(read_all(reader, start, end)) if c.op is Operation.INSERT]
    items = list(reader.read("snapshot", stop=end, idle_timeout=10))
    snapshot = rows(items)
    assert len(snapshot) == len(captured) == 4
    for taken, logged in zip(snapshot, captured, strict=True):
        assert taken.op is Operation.INSERT and taken.before is None
        assert taken.primary_key == logged.primary_key == ("id",)
        assert dict(taken.column_types) == dict(logged.column_types)
        assert taken.after is not None and logged.after is not None
        for name in ["id", *COLUMNS]:
            got, want = taken.after[name], logged.after[name]
            assert got == want, f"{name}: snapshot {got!r}, binlog {want!r}"
            assert type(got) is type(want), f"{name}: {type(got)} vs {type(want)}"
    # Every snapshot row has its own event id; the snapshot ends at a commit.
    assert len({c.row_index for c in snapshot}) == len(snapshot)
    assert isinstance(items[len(snapshot)], TransactionCommit)
    assert items[len(snapshot)].rows == len(snapshot)


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_changes_during_a_snapshot_come_once_from_the_binlog(
    database: Any, reader: BinlogReader
) -> None:
    connection = database.connect()
    execute(
        connection,
        "CREATE TABLE a (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE b (k VARCHAR(10), n INT)",  # no primary key: the row is its key
        "INSERT INTO a VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        "INSERT INTO b VALUES ('x', 1), ('y', 2)",
    )
    stream = reader.read("snapshot", idle_timeout=5)
    first = next(stream)  # the snapshot is taken: later writes are the binlog's
    execute(
        connection,
        "INSERT INTO a VALUES (4, 'four')",
        "UPDATE a SET v = 'TWO' WHERE id = 2",
        "DELETE FROM a WHERE id = 3",
        "INSERT INTO b VALUES ('z', 3)",
    )
    items = [first, *stream]
    ends = [i for i, item in enumerate(items) if isinstance(item, TransactionCommit)]
    snapshot = rows(items[: ends[0]])
    after = rows(items[ends[0] + 1 :])
    assert sorted((c.table, c.key[0]) for c in snapshot) == [
        ("a", 1), ("a", 2), ("a", 3), ("b", "x"), ("b", "y"),
    ]  # fmt: skip
    assert {c.table: c.primary_key for c in snapshot} == {"a": ("id",), "b": ()}
    assert all(c.after and c.after.get("v") != "TWO" for c in snapshot if c.table == "a")
    assert [(c.table, c.op) for c in after] == [
        ("a", Operation.INSERT),
        ("a", Operation.UPDATE),
        ("a", Operation.DELETE),
        ("b", Operation.INSERT),
    ]
    assert after[1].after is not None and after[1].after["v"] == "TWO"


def test_a_snapshot_reads_only_the_sources_tables(
    fresh_database: Any, reader: BinlogReader
) -> None:
    connection = fresh_database.connect()
    execute(connection, "CREATE TABLE mine (id INT PRIMARY KEY)", "INSERT INTO mine VALUES (1)")
    other = f"{fresh_database.name}_other"
    execute(connection, f"CREATE DATABASE `{other}`",
            f"CREATE TABLE `{other}`.theirs (id INT PRIMARY KEY)",
            f"INSERT INTO `{other}`.theirs VALUES (1)")  # fmt: skip
    try:
        taken = rows(list(reader.read("snapshot", stop=reader.master_position(), idle_timeout=5)))
    finally:
        execute(connection, f"DROP DATABASE `{other}`")
    assert {(c.database, c.table) for c in taken} == {(fresh_database.name, "mine")}
