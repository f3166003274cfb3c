"""Columns whose declaration says more than the binlog's table map: FLOAT(M,D), zerofill,
geometry subtypes, MariaDB UUID/INET4/INET6. Captured values equal SELECT's, in
inserts, before images and deletes alike, and every column is named by its
declaration, identically from the binlog and from a snapshot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from capture_support import TablesAt, execute, read_all, rows
from click.testing import CliRunner
from declared_type_rows import DECLARED, ROWS, assert_equal, create, insert, write_and_change

import dbus_fn as fn
from dbus_fn import Operation
from dbus_fn.capture import BinlogReader
from dbus_fn.cli import cli
from dbus_fn.columns import row_to_json
from dbus_fn.json_format import read_jsonl

pytestmark = pytest.mark.integration

def test_declared_types_equal_select_in_inserts_updates_and_deletes(
    fresh_database: Any, reader: BinlogReader
) -> None:
    connection = fresh_database.connect()
    start = reader.master_position()
    create(connection)
    inserted, updated = write_and_change(connection)
    changes = rows(read_all(reader, start))
    by_op = {op: [c for c in changes if c.op is op] for op in Operation}
    assert [len(by_op[op]) for op in (Operation.INSERT, Operation.UPDATE, Operation.DELETE)] == [
        6, 5, 2,
    ]  # fmt: skip
    for change in changes:
        assert dict(change.column_types) == DECLARED
    for change in by_op[Operation.INSERT]:
        assert_equal(change.after, inserted[change.key[0]], "insert")
    for change in by_op[Operation.UPDATE]:
        assert_equal(change.before, inserted[change.key[0]], "before image")
        assert_equal(change.after, updated[change.key[0]], "update")
    for change in by_op[Operation.DELETE]:
        assert_equal(change.before, updated[change.key[0]], "delete")
    first = by_op[Operation.INSERT][1].after
    assert first is not None
    assert (first["f355"], first["f72z"], first["u"]) == (
        30.12346, 99999.95, "ffffffff-ffff-ffff-ffff-ffffffffffff",
    )  # fmt: skip


def test_a_snapshot_names_and_gives_every_value_as_the_binlog_does(
    fresh_database: Any, reader: BinlogReader
) -> None:
    connection = fresh_database.connect()
    start = reader.master_position()
    create(connection)
    for values in ROWS:
        insert(connection, values, geometry=values["id"] != 6)
    streamed = {c.key: c for c in rows(read_all(reader, start))}
    snapshot = {c.key: c for c in rows(list(reader.snapshot()))}
    assert streamed.keys() == snapshot.keys() and len(streamed) == len(ROWS)
    for key, change in snapshot.items():
        assert dict(change.column_types) == dict(streamed[key].column_types) == DECLARED
        assert change.after is not None
        assert_equal(streamed[key].after, dict(change.after), "binlog against snapshot")


def test_record_writes_declared_types_and_select_values(
    fresh_database: Any, reader: BinlogReader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path / "sources.json"))
    runner = CliRunner()
    connection = fresh_database.connect()
    start = reader.master_position()
    create(connection)
    inserted, _ = write_and_change(connection)
    dsn, tables = fresh_database.endpoint.dsn, f"{fresh_database.name}.*"
    added = runner.invoke(cli, ["source", "add", "declared", dsn, "-t", tables])
    assert added.exit_code == 0, added.output
    output = tmp_path / "events.jsonl"
    result = runner.invoke(cli, [
        "source", "record", "declared", "--output", str(output), "--max-events", "14",
        "--from", f"{start.file}:{start.pos}",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    events = [e for e in read_jsonl(output) if e.get_type().startswith("io.dbus.row.")]
    inserts = [e for e in events if e.get_type() == "io.dbus.row.inserted"]
    assert len(inserts) == 6
    for event in inserts:
        data = event.get_data()
        assert data["columns"] == DECLARED
        assert data["after"] == row_to_json(inserted[data["after"]["id"]], DECLARED)
    updates = [e.get_data() for e in events if e.get_type() == "io.dbus.row.updated"]
    assert updates[0]["before"] == row_to_json(inserted[1], DECLARED)
    assert updates[0]["before"]["u"] == "00000000-0000-0000-0000-000000000000"


def test_a_uuid_primary_key_is_its_text_in_the_subject_and_the_kafka_key(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE k (u UUID PRIMARY KEY, n INT)")
    key = "e378711a-e968-11f1-aecc-02fc00000001"
    execute(
        connection,
        f"INSERT INTO k VALUES ('{key}', 1)",
        "UPDATE k SET n = 2",
        "DELETE FROM k",
    )
    changes = rows(read_all(reader, start))
    assert [c.op for c in changes] == [Operation.INSERT, Operation.UPDATE, Operation.DELETE]
    for change in changes:
        assert change.key == (key,) and change.column_types["u"] == "uuid"
        assert fn.primary_key_text(change) == f'["{key}"]'
        assert fn.to_cloudevent(change).get_attributes()["subject"] == f'["{key}"]'
        assert fn.to_kafka_message(change).key == f'["{key}"]'.encode()


def test_rows_written_before_a_column_list_change_keep_what_the_table_map_says(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE v (id INT PRIMARY KEY, u UUID, f FLOAT(7,3))")
    key = "45d7a48a-5123-48c0-a9c2-8063f496c55e"
    execute(
        connection,
        f"INSERT INTO v VALUES (1, '{key}', 1.5)",
        "ALTER TABLE v ADD COLUMN n INT",
        f"INSERT INTO v VALUES (2, '{key}', 1.5, 7)",
    )
    before, after = rows(read_all(reader, start))
    # The declaration read now has four columns, the first row three: the table map,
    # the only account of that row, decides; nothing is guessed.
    assert dict(before.column_types) == {"id": "int", "u": "binary(16)", "f": "float"}
    assert before.after is not None and before.after["u"] == bytes.fromhex(key.replace("-", ""))
    assert dict(after.column_types) == {"id": "int", "u": "uuid", "f": "float(7,3)", "n": "int"}
    assert after.after is not None and after.after["u"] == key


def test_a_changed_declaration_names_the_rows_after_it(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE w (id INT PRIMARY KEY, f FLOAT(10,2))")
    execute(connection, "INSERT INTO w VALUES (1, 2.12345)")
    first = rows(read_all(reader, start))  # the same reader reads on: its lookups are cached
    middle = reader.master_position()
    execute(
        connection, "ALTER TABLE w MODIFY f FLOAT(10,4)", "INSERT INTO w VALUES (2, 2.12345)"
    )
    second = rows(read_all(reader, middle))
    assert [c.column_types["f"] for c in first + second] == ["float(10,2)", "float(10,4)"]
    assert first[0].after is not None and second[0].after is not None
    assert (first[0].after["f"], second[0].after["f"]) == (2.12, 2.1235)
    with connection.cursor() as cursor:
        cursor.execute("SELECT f FROM w WHERE id = 2")
        assert cursor.fetchall() == ((2.1235,),)


def test_enum_and_set_members_as_information_schema_escapes_them_keep_the_declaration(
    fresh_database: Any, reader: BinlogReader
) -> None:
    connection = fresh_database.connect()
    execute(
        connection,
        "CREATE TABLE m (id INT PRIMARY KEY, u UUID, "
        "e ENUM('a\\\\b', 'x\\ny', 'q''r', 'n\\0l', 'Up  Case', ''), s SET('A''', 'b\\\\'))",
    )
    start = reader.master_position()
    execute(connection, "INSERT INTO m VALUES (1, UUID(), 'Up  Case', 'b\\\\')")
    (change,) = rows(read_all(reader, start))
    (snapshot,) = rows(list(reader.snapshot()))
    assert dict(change.column_types) == dict(snapshot.column_types) == {
        "id": "int",
        "u": "uuid",
        "e": "enum('a\\b','x\ny','q''r','n\0l','Up  Case','')",
        "s": "set('A''','b\\')",
    }
    assert change.after == snapshot.after
    assert change.after is not None and change.after["e"] == "Up  Case"


def test_a_system_versioned_table_keeps_its_declaration_beside_its_hidden_columns(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    # information_schema does not show row_start/row_end; the binlog carries them.
    connection, start = tables_at(
        "CREATE TABLE sv (id INT PRIMARY KEY, u UUID, f FLOAT(7,3)) WITH SYSTEM VERSIONING"
    )
    key = "45d7a48a-5123-48c0-a9c2-8063f496c55e"
    execute(connection, f"INSERT INTO sv VALUES (1, '{key}', 1.2345)")
    (change,) = rows(read_all(reader, start))
    assert dict(change.column_types) == {
        "id": "int", "u": "uuid", "f": "float(7,3)",
        "row_start": "timestamp(6)", "row_end": "timestamp(6)",
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("SELECT u, f FROM sv")
        assert change.after is not None
        assert cursor.fetchall() == ((change.after["u"], change.after["f"]),) == ((key, 1.234),)
