"""Zero and partial dates (legacy rows of a permissive sql_mode) are what SELECT shows:
in the binlog's inserts, updates and deletes, in snapshots and chunk reads, in the
subject, and through ``dbus source record``; never a null where the row has none."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from capture_support import execute, read_all, rows
from click.testing import CliRunner
from zero_date_rows import dbus_text, is_real

from dbus_fn import (
    BinlogPosition,
    Operation,
    RowChange,
    from_cloudevent,
    primary_key_text,
    to_cloudevent,
)
from dbus_fn.capture import BinlogReader, ChunkRead, chunked_table, next_boundary, read_chunk
from dbus_fn.cli import cli
from dbus_fn.columns import to_json_value
from dbus_fn.json_format import read_jsonl

pytestmark = pytest.mark.integration

TYPES = {
    "d": ("DATE NULL", "date"),
    "dn": ("DATE NOT NULL", "date"),
    "dt": ("DATETIME NULL", "datetime"),
    "dt3": ("DATETIME(3) NOT NULL", "datetime(3)"),
    "dt6": ("DATETIME(6) NULL", "datetime(6)"),
    "ts": ("TIMESTAMP NULL", "timestamp"),
    "ts6": ("TIMESTAMP(6) NULL", "timestamp(6)"),
    "tsn": ("TIMESTAMP NOT NULL DEFAULT '0000-00-00 00:00:00'", "timestamp"),
}
ROWS = [
    "(1, '0000-00-00', '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00.000', "
    "'0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00')",
    "(2, '2015-00-21', '2015-05-00', '2015-05-00 10:11:12', '2015-05-00 10:11:12.5', "
    "'0000-00-00 01:00:00.000001', '0000-00-00', NULL, '0000-00-00 00:00:00')",
    "(3, '1000-00-00', '0001-00-00', '0001-00-00 00:00:00', '0000-00-00 01:00:00', "
    "'1000-00-00 23:59:59.999999', NULL, '0000-00-00 00:00:00.000000', '0000-00-00')",
    "(4, '2024-02-29', '1000-01-01', '2024-01-02 03:04:05', '2024-01-02 03:04:05.250', "
    "'9999-12-31 23:59:59.999999', '2024-01-02 03:04:05', '2038-01-19 03:14:07.999999', "
    "'1970-01-01 00:00:01')",
    "(5, NULL, '0000-00-00', NULL, '0000-00-00 00:00:00', NULL, NULL, NULL, '0000-00-00')",
]
KEYED = [
    "(1, '0000-00-00', '0000-00-00 00:00:00')",
    "(1, '2015-00-21', '0000-00-00 00:00:00')",
    "(1, '0000-00-00', '2015-05-00 00:00:00')",
    "(1, '2024-01-01', '2024-01-01 00:00:00')",
]


def selected(connection: Any, table: str, columns: list[str]) -> dict[Any, dict[str, Any]]:
    """Each row by its key text as SELECT shows it: CAST(... AS CHAR) of every date."""
    shown = ", ".join(f"CAST(`{c}` AS CHAR)" for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {shown} FROM {table}")
        return {tuple(row): dict(zip(columns, row[1:], strict=True)) for row in cursor.fetchall()}


def setup(connection: Any) -> None:
    execute(
        connection,
        "SET SESSION sql_mode = ''",
        "SET SESSION time_zone = '+00:00'",
        "CREATE TABLE z (id INT PRIMARY KEY, "
        + ", ".join(f"`{name}` {sql}" for name, (sql, _) in TYPES.items())
        + ")",
        "CREATE TABLE zk (id INT, d DATE NOT NULL, dt DATETIME NOT NULL, PRIMARY KEY (id, d, dt))",
    )


def write(connection: Any) -> dict[int, dict[str, Any]]:
    """The rows, an update of a zero date to a real one and back, a delete; SELECT's
    view of every row just before it changes last."""
    execute(connection, f"INSERT INTO z VALUES {', '.join(ROWS)}")
    execute(connection, f"INSERT INTO zk VALUES {', '.join(KEYED)}")
    before = {key[0]: row for key, row in selected(connection, "z", list(TYPES)).items()}
    execute(
        connection,
        "UPDATE z SET d = '2020-01-01', dt = '2020-01-01 00:00:00' WHERE id = 1",
        "UPDATE z SET d = '0000-00-00', dt = '0000-00-00 00:00:00' WHERE id = 1",
        "DELETE FROM z WHERE id = 2",
    )
    return before


@dataclass(frozen=True)
class Written:
    connection: Any
    start: BinlogPosition
    before: dict[int, dict[str, Any]]
    """SELECT's view of each row of z just before its last change."""


@pytest.fixture
def written(fresh_database: Any, reader: BinlogReader) -> Written:
    """The tables, their rows and changes written; where the binlog stood before."""
    connection = fresh_database.connect()
    setup(connection)
    start = reader.master_position()
    return Written(connection, start, write(connection))


def check_image(image: Any, shown: dict[str, Any], types: dict[str, str], where: str) -> None:
    for name, text in shown.items():
        value = image[name]
        want = dbus_text(text, types[name])
        assert to_json_value(value, types[name]) == want, f"{where} {name}: {value!r} vs {text!r}"
        if text is not None:
            kind = (date, datetime) if is_real(text) else (str,)
            assert isinstance(value, kind), f"{where} {name}: {value!r}"


def test_binlog_changes_hold_zero_dates_as_select_shows_them(
    written: Written, reader: BinlogReader
) -> None:
    before = written.before
    now = {key[0]: row for key, row in selected(written.connection, "z", list(TYPES)).items()}
    changes = [c for c in rows(read_all(reader, written.start)) if c.table == "z"]
    types = {name: column_type for name, (_, column_type) in TYPES.items()}
    assert changes[0].column_types == {"id": "int", **types}
    inserts = [c for c in changes if c.op is Operation.INSERT]
    assert len(inserts) == len(ROWS)
    for change in inserts:
        check_image(change.after, before[change.row["id"]], types, f"insert {change.row['id']}")
    to_real, back = [c for c in changes if c.op is Operation.UPDATE]
    assert to_real.before is not None and back.before is not None and back.after is not None
    check_image(to_real.before, before[1], types, "update before")
    assert to_real.row["d"] == date(2020, 1, 1) and back.before["d"] == date(2020, 1, 1)
    check_image(back.after, now[1], types, "update back")
    assert back.after["d"] == "0000-00-00" and back.after["dt"] == "0000-00-00T00:00:00"
    delete = next(c for c in changes if c.op is Operation.DELETE)
    check_image(delete.before, before[2], types, "delete before")
    for change in changes:  # the JSON form reads back as the change itself
        assert from_cloudevent(to_cloudevent(change)) == change


def test_zero_dates_in_a_key_give_distinct_subjects_without_null(
    written: Written, reader: BinlogReader
) -> None:
    keyed = [c for c in rows(read_all(reader, written.start)) if c.table == "zk"]
    assert [primary_key_text(c) for c in keyed] == [
        '[1,"0000-00-00","0000-00-00T00:00:00"]',
        '[1,"2015-00-21","0000-00-00T00:00:00"]',
        '[1,"0000-00-00","2015-05-00T00:00:00"]',
        '[1,"2024-01-01","2024-01-01T00:00:00"]',
    ]
    assert [to_cloudevent(c).get_subject() for c in keyed] == [primary_key_text(c) for c in keyed]


def test_snapshots_and_chunk_reads_equal_the_binlog(
    written: Written, fresh_database: Any, reader: BinlogReader
) -> None:
    binlog: dict[tuple[str, Any], RowChange] = {}
    for change in rows(read_all(reader, written.start)):
        key = (change.table, change.key)
        if change.op is Operation.DELETE:
            del binlog[key]
        else:
            binlog[key] = change
    snapshot = [c for c in rows(list(reader.snapshot())) if c.table in ("z", "zk")]
    assert {(c.table, c.key): c.after for c in snapshot} == {
        key: change.after for key, change in binlog.items()
    }
    chunked = chunked_table(reader, fresh_database.name, "zk")
    assert chunked.splittable
    lower, chunks, uppers = None, [], []
    while True:  # chunks of two rows, bounded by zero-date keys
        upper = next_boundary(reader, chunked, lower, 2)
        uppers.append(upper)
        chunks += [c for c in read_chunk(reader, chunked, lower, upper)
                   if not isinstance(c, ChunkRead)]  # fmt: skip
        if upper is None:
            break
        lower = upper
    # Boundaries are keys as capture gives them (the gate compares them with changes).
    assert uppers == [(1, "0000-00-00", "2015-05-00T00:00:00"),
                      (1, date(2024, 1, 1), datetime(2024, 1, 1)), None]  # fmt: skip
    assert sorted(primary_key_text(c) or "" for c in chunks) == sorted(
        primary_key_text(c) or "" for (table, _), c in binlog.items() if table == "zk"
    )
    assert {c.key: c.after for c in chunks} == {
        key: c.after for (table, key), c in binlog.items() if table == "zk"
    }


def test_source_record_writes_zero_dates_as_select_shows_them(
    written: Written, fresh_database: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path / "sources.json"))
    runner = CliRunner()
    start, before = written.start, written.before
    added = runner.invoke(cli, [
        "source", "add", "zero", fresh_database.endpoint.dsn, "-t", f"{fresh_database.name}.z",
    ])  # fmt: skip
    assert added.exit_code == 0, added.output
    output = tmp_path / "events.jsonl"
    result = runner.invoke(cli, [
        "source", "record", "zero", "--output", str(output), "--idle-timeout", "2",
        "--from", f"{start.file}:{start.pos}",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    events = [e for e in read_jsonl(output) if ".row." in e.get_type()]
    types = {name: column_type for name, (_, column_type) in TYPES.items()}
    inserted = [e.get_data()["after"] for e in events if e.get_type().endswith("inserted")]
    assert inserted == [
        {"id": i, **{n: dbus_text(v, types[n]) for n, v in before[i].items()}}
        for i in sorted(before)
    ]
    deleted = next(e for e in events if e.get_type().endswith("deleted"))
    assert deleted.get_subject() == "[2]"
    assert deleted.get_data()["before"]["dt3"] == "2015-05-00T10:11:12.500000"
