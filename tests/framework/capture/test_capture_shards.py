"""Shards: several readers of one range split its rows by key, exactly, in order."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from capture_support import execute, read_all, rows
from column_type_rows import COLUMNS, write_every_type
from test_capture_resume import signature

from dbus_fn import BinlogPosition, RowChange, SchemaChange, TransactionCommit
from dbus_fn.capture import BinlogReader, Shard, SourceSpec, replica_id_for
from dbus_fn.errors import ConfigError

pytestmark = pytest.mark.integration

SHARDS = 3


def write_churn(connection: Any) -> None:
    """Keys changed many times, across tables with a one-column, a composite and no key."""
    statements = [
        "CREATE TABLE one (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE two (a VARCHAR(8), b DATE, v INT, PRIMARY KEY (a, b))",
        "CREATE TABLE none (x INT, y VARCHAR(8))",
        "INSERT INTO one SELECT seq, 0 FROM seq_1_to_60",
        "INSERT INTO two SELECT CONCAT('k', seq % 7), '2026-01-01' + INTERVAL seq DAY, 0"
        " FROM seq_1_to_30",
        "INSERT INTO none SELECT seq % 5, 'n' FROM seq_1_to_20",
    ]
    for round_ in range(1, 6):
        statements += [
            "BEGIN",
            f"UPDATE one SET v = {round_} WHERE id % {round_ + 1} = 0",
            f"UPDATE two SET v = {round_}",
            f"DELETE FROM one WHERE id = {round_ * 7}",
            f"INSERT INTO one VALUES ({round_ * 7}, -{round_})",
            "COMMIT",
            f"UPDATE none SET y = 'r{round_}' WHERE x = {round_ % 5}",
        ]
    statements.append("ALTER TABLE one ADD COLUMN w INT")
    statements.append("UPDATE one SET w = id")
    execute(connection, *statements)


def _key(change: RowChange) -> tuple[str, tuple[Any, ...]]:
    return change.table, change.key


def _row(change: RowChange) -> str:
    return repr(signature(change))


def assert_shards_split_the_range(
    source: SourceSpec, reader: BinlogReader, start: BinlogPosition, end: BinlogPosition
) -> None:
    """Read ``start..end`` whole and as SHARDS shards; the shards must split it exactly."""
    everything = read_all(reader, start, end)
    parts = []
    for index in range(SHARDS):
        shard_reader = BinlogReader(source, replica_id=replica_id_for(f"test/{uuid.uuid4()}"))
        try:
            parts.append(list(shard_reader.read(start, stop=end, shard=Shard(index, SHARDS))))
        finally:
            shard_reader.close()

    all_rows = [_row(change) for change in rows(everything)]
    shard_rows = [_row(change) for part in parts for change in rows(part)]
    assert Counter(shard_rows) == Counter(all_rows)
    for part in parts:
        # Every shard has rows, and keeps the unsharded read's order.
        mine = [_row(change) for change in rows(part)]
        assert mine
        assert mine == [s for s in all_rows if s in set(mine)]
        # Schema changes and commits reach every shard, so positions move in each.
        markers = [signature(i) for i in part if isinstance(i, SchemaChange | TransactionCommit)]
        assert markers == [
            signature(i) for i in everything if isinstance(i, SchemaChange | TransactionCommit)
        ]
    owners: dict[tuple[str, tuple[Any, ...]], set[int]] = {}
    for index, part in enumerate(parts):
        for change in rows(part):
            owners.setdefault(_key(change), set()).add(index)
    assert all(len(found) == 1 for found in owners.values())


def test_shards_together_yield_every_row_once_and_each_key_in_one_shard_in_order(
    fresh_database: Any, source: SourceSpec, reader: BinlogReader
) -> None:
    start = reader.master_position()
    write_churn(fresh_database.connect())
    end = reader.master_position()
    assert len(rows(read_all(reader, start, end))) > 400
    assert_shards_split_the_range(source, reader, start, end)


def test_shards_step_over_the_values_of_every_column_type(
    fresh_database: Any, source: SourceSpec, reader: BinlogReader
) -> None:
    """A shard measures the rows it does not own instead of decoding them: every type's
    width (and NULL in each) must be right, or the rows after it would be garbage."""
    connection = fresh_database.connect()
    start, _ = write_every_type(connection, reader)
    execute(
        connection,
        *["INSERT INTO t SELECT NULL, " + ", ".join(f"`{n}`" for n in COLUMNS) + " FROM t"] * 3,
        "UPDATE t SET vcs = CONCAT(COALESCE(vcs, ''), '+')",
        "DELETE FROM t WHERE id % 3 = 0",
    )
    end = reader.master_position()
    assert len(rows(read_all(reader, start, end))) > 50
    assert_shards_split_the_range(source, reader, start, end)


def test_one_shard_is_the_whole_source(fresh_database: Any, reader: BinlogReader) -> None:
    start = reader.master_position()
    write_churn(fresh_database.connect())
    end = reader.master_position()
    whole = [signature(i) for i in read_all(reader, start, end)]
    assert [signature(i) for i in reader.read(start, stop=end, shard=Shard(0, 1))] == whole


@pytest.mark.parametrize(
    ("index", "count", "message"),
    [(0, 0, "shard count 0"), (2, 2, "shard 2 of 2"), (-1, 3, "shard -1 of 3")],
)
def test_an_impossible_shard_is_refused_in_one_line(index: int, count: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        Shard(index, count)
    assert "\n" not in str(caught.value)
