"""Chunked snapshot reads: key ranges that cover a table exactly once, each read at
the binlog position its rows are exact at."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal
from typing import Any

import pytest
from capture_support import execute, read_all, rows

from dbus_fn import Operation
from dbus_fn.capture import (
    BinlogReader,
    ChunkedTable,
    ChunkRead,
    chunked_table,
    key_from_json,
    key_to_json,
    next_boundary,
    read_chunk,
)
from dbus_fn.errors import HistoryError

pytestmark = pytest.mark.integration


def chunks_of(reader: BinlogReader, table: ChunkedTable, size: int) -> list[list[Any]]:
    """Every chunk of ``table`` in order, as lists of keys."""
    found, lower = [], None
    while True:
        upper = next_boundary(reader, table, lower, size)
        read = list(read_chunk(reader, table, lower, upper))
        assert isinstance(read[0], ChunkRead)
        found.append([table.key_of(change) for change in read[1:]])
        if upper is None:
            return found
        lower = upper


def test_chunks_cover_a_composite_key_once_in_order(tables_at: Any, reader: BinlogReader) -> None:
    values = ", ".join(f"({a}, 'k{b}', {a * 10 + b})" for a in range(5) for b in range(7))
    tables_at(
        "CREATE TABLE t (a INT, b VARCHAR(8) COLLATE utf8mb4_bin, n INT, PRIMARY KEY (a, b))",
        f"INSERT INTO t VALUES {values}",
    )
    table = chunked_table(reader, reader.spec.tables[0].split(".")[0], "t")
    assert table.key == ("a", "b") and table.splittable
    chunks = chunks_of(reader, table, 4)
    assert [len(c) for c in chunks] == [4] * 8 + [3]
    keys = [key for chunk in chunks for key in chunk]
    assert keys == sorted(keys) and len(set(keys)) == 35


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_chunk_is_exact_at_its_position(tables_at: Any, reader: BinlogReader) -> None:
    connection, _ = tables_at(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)",
    )
    database = reader.spec.tables[0].split(".")[0]
    table = chunked_table(reader, database, "t")
    stream = read_chunk(reader, table, None, None)
    first = next(stream)
    assert isinstance(first, ChunkRead)
    execute(connection, "UPDATE t SET v = 20 WHERE id = 2", "DELETE FROM t WHERE id = 3")
    snapshot = [change for change in stream if not isinstance(change, ChunkRead)]
    # The rows are the table at the chunk's position, not after the later writes...
    assert [dict(c.row) for c in snapshot] == [{"id": 1, "v": 1}, {"id": 2, "v": 2},
                                               {"id": 3, "v": 3}]  # fmt: skip
    assert all(c.op is Operation.SNAPSHOT and c.before is None for c in snapshot)
    assert all(c.position == first.position for c in snapshot)
    # ...and the binlog after that position holds exactly those writes.
    later = rows(read_all(reader, first.position))
    assert [(c.op, c.row["id"]) for c in later] == [(Operation.UPDATE, 2), (Operation.DELETE, 3)]
    assert all(c.position.pos > first.position.pos for c in later)


def test_a_unique_not_null_key_serves_when_there_is_no_primary_key(
    tables_at: Any, reader: BinlogReader
) -> None:
    tables_at(
        "CREATE TABLE u (code VARBINARY(8) NOT NULL, n INT, UNIQUE KEY (code))",
        "INSERT INTO u VALUES ('b', 2), ('a', 1), ('c', 3)",
    )
    table = chunked_table(reader, reader.spec.tables[0].split(".")[0], "u")
    assert table.key == ("code",) and table.splittable
    assert chunks_of(reader, table, 2) == [[(b"a",), (b"b",)], [(b"c",)]]


def test_a_case_insensitive_string_key_is_read_as_one_chunk(
    tables_at: Any, reader: BinlogReader
) -> None:
    tables_at(
        "CREATE TABLE s (name VARCHAR(8) PRIMARY KEY) COLLATE utf8mb4_general_ci",
        "INSERT INTO s VALUES ('b'), ('A'), ('c')",
    )
    table = chunked_table(reader, reader.spec.tables[0].split(".")[0], "s")
    assert not table.splittable
    assert chunks_of(reader, table, 1) == [[("A",), ("b",), ("c",)]]


def test_a_table_without_a_key_is_refused_unless_read_unchunked(
    tables_at: Any, reader: BinlogReader
) -> None:
    tables_at("CREATE TABLE n (a INT, b INT NULL, UNIQUE KEY (b))", "INSERT INTO n VALUES (1, 1)")
    database = reader.spec.tables[0].split(".")[0]
    with pytest.raises(HistoryError) as error:
        chunked_table(reader, database, "n")
    assert f"table {database}.n has neither a primary key nor a unique key" in str(error.value)
    assert "read it as one chunk" in str(error.value)
    table = chunked_table(reader, database, "n", unchunked=True)
    assert chunks_of(reader, table, 10) == [[()]]


def test_an_unknown_table_is_refused(reader: BinlogReader) -> None:
    with pytest.raises(HistoryError, match=r"has no table nowhere\.t; name an existing table"):
        chunked_table(reader, "nowhere", "t")


@pytest.mark.parametrize(
    "key",
    [
        (1, -5, 2**63),
        ("é", b"\x00\xff"),
        (Decimal("12.50"), dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, 6)),
    ],
)
def test_boundaries_survive_json(key: tuple[Any, ...]) -> None:
    assert key_from_json(key_to_json(key)) == key
    assert key_to_json(None) is None and key_from_json(None) is None


def _scanned(reader: BinlogReader, position: Any) -> str | None:
    """The GTID state at a position as the server finds it by scanning its binlog file."""
    rows = reader._sql("SELECT BINLOG_GTID_POS(%s, %s)", (position.file, position.pos),
                       doing="the test's BINLOG_GTID_POS")  # fmt: skip
    return str(rows[0][0]) if rows and rows[0][0] else None


def test_a_chunk_position_names_the_gtid_state_there_while_commits_go_on(
    tables_at: Any, reader: BinlogReader
) -> None:
    connection, _ = tables_at(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 0)"
    )
    table = chunked_table(reader, reader.spec.tables[0].split(".")[0], "t")
    stop = threading.Event()

    def commit() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            execute(connection, f"UPDATE t SET v = {n} WHERE id = 1")

    writer = threading.Thread(target=commit)
    writer.start()
    found: list[Any] = []
    try:
        # At least 30 reads, and on until the commits have moved the binlog between two
        # of them: on a loaded machine 30 reads can all fall between two commits.
        for n in range(3000):
            if n >= 30 and len({p.pos for p in found}) > 1:
                break
            read = next(iter(read_chunk(reader, table, None, None)))
            if isinstance(read, ChunkRead):
                found.append(read.position)
    finally:
        stop.set()
        writer.join()
    assert len({p.pos for p in found}) > 1  # the commits moved the binlog meanwhile
    assert [p.gtid for p in found] == [_scanned(reader, p) for p in found]


def test_the_gtid_at_the_binlog_end_is_read_without_scanning_the_file(
    reader: BinlogReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[tuple[str, int]] = []
    scan = reader._gtid_at

    def counted(file: str, pos: int) -> str | None:
        scans.append((file, pos))
        return scan(file, pos)

    monkeypatch.setattr(reader, "_gtid_at", counted)
    # Other tests commit meanwhile: some tries find the binlog moved on, and scan.
    for _ in range(20):
        end = reader.master_position()
        scans.clear()
        gtid = reader.gtid_at(end.file, end.pos)
        assert gtid == _scanned(reader, end)
        if not scans:
            break
    assert not scans, "every try scanned the binlog file"
    # A position the binlog has moved past is found by the scan.
    first = reader.binary_logs()[0][0]
    assert reader.gtid_at(first, 4) == _scanned(reader, type(end)(first, 4))
    assert scans == [(first, 4)]
