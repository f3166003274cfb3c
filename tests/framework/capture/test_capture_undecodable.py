"""A value the capture cannot decode stops no read: the rest of its rows event is one
``UndecodedRows`` item, by position, and the read goes on with the next rows.

No server writes a value the decoders refuse, so each fault is injected where
decoding it would fail: a row decoder that raises at a marked row (as a malformed value
would, with either decoder), a column type no reader knows, a partial JSON update whose
diffs do not apply.
"""

from __future__ import annotations

from typing import Any

import pytest
from capture_support import TablesAt, execute, read_all, rows
from decode_faults import refuse_rows_holding
from support import table_map_ids

from dbus_fn.capture import BinlogReader
from dbus_fn.capture._column_readers import UnknownColumnType
from dbus_fn.capture._json_diff import UnappliedDiff
from dbus_fn.events import Operation, TransactionCommit, UndecodedRows

pytestmark = pytest.mark.integration

MARK = "undecodable"
INJECTED = "a malformed VARCHAR value (injected)"


def undecoded(items: list[Any]) -> list[UndecodedRows]:
    return [item for item in items if isinstance(item, UndecodedRows)]


def rows_events(reader: BinlogReader, start: Any, kind: str) -> list[int]:
    """The positions of the ``kind`` rows events (``Write_rows``...) of the test's table
    ``t`` after ``start``: other tests write on the same server meanwhile."""
    found = reader._sql(f"SHOW BINLOG EVENTS IN %s FROM {start.pos}", (start.file,), doing="t")
    ids = {str(table_id) for table_id in table_map_ids(found, _db(reader)).get("t", [])}
    return [
        int(event[1]) for event in found
        if str(event[2]).startswith(kind) and str(event[5]).split()[1] in ids
    ]  # fmt: skip


def _db(reader: BinlogReader) -> str:
    return reader.spec.tables[0].split(".", 1)[0]


@pytest.fixture
def refuse_marked_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_rows_holding(monkeypatch, MARK, INJECTED)


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_row_that_does_not_decode_is_one_item_by_position_and_the_read_goes_on(
    tables_at: TablesAt, reader: BinlogReader, refuse_marked_rows: None
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(40))")
    execute(
        connection,
        # One rows event: the first row decodes, the second and the third do not.
        f"INSERT INTO t VALUES (1, 'a'), (2, '{MARK}'), (3, 'c')",
        "INSERT INTO t VALUES (4, 'd')",
        f"UPDATE t SET note = '{MARK}' WHERE id = 4",
        "DELETE FROM t WHERE id = 1",
    )
    items = read_all(reader, start)
    assert [(c.op, c.row["id"]) for c in rows(items)] == [
        (Operation.INSERT, 1), (Operation.INSERT, 4), (Operation.DELETE, 1),
    ]  # fmt: skip
    first, second = undecoded(items)
    written, updated = rows_events(reader, start, "Write_rows")[0], rows_events(
        reader, start, "Update_rows"
    )[0]
    assert (first.op, first.position.file, first.position.pos, first.row_index) == (
        Operation.INSERT, start.file, written, 1,
    )  # fmt: skip
    assert (second.op, second.position.pos, second.row_index) == (Operation.UPDATE, updated, 0)
    for item in (first, second):
        assert (item.source, item.qualified_table) == (reader.spec.name, f"{_db(reader)}.t")
        assert (item.error_type, item.error) == ("ValueError", INJECTED)
        assert MARK.encode() in item.images, "the event's row images, as the binlog holds them"
    # In its transaction's place, before that transaction's commit. Other tests write
    # on the same server meanwhile: their transactions come through as commits with no
    # item of this test's table before them, and are left out.
    kinds = ["commit" if isinstance(item, TransactionCommit) else type(item).__name__
             for item in items]  # fmt: skip
    kinds = [kind for at, kind in enumerate(kinds)
             if kind != "commit" or (at > 0 and kinds[at - 1] != "commit")]  # fmt: skip
    assert kinds == ["RowChange", "UndecodedRows", "commit", "RowChange", "commit",
                     "UndecodedRows", "commit", "RowChange", "commit"]  # fmt: skip
    # A read again from the same start meets the same bytes and says the same.
    assert undecoded(read_all(reader, start)) == [first, second]


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_table_with_a_column_type_no_reader_knows_is_dead_letters_and_the_others_read(
    tables_at: TablesAt, reader: BinlogReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbus_fn.capture import _decode

    known = _decode.column_reader

    def column_reader(column: Any, **kwargs: Any) -> Any:
        if column.name == "odd":  # a type a newer server has and this dbus does not
            raise UnknownColumnType(
                "column 'odd' has binlog type code 250, which dbus cannot decode yet; "
                "exclude the table from the source's table patterns or report the type"
            )
        return known(column, **kwargs)

    monkeypatch.setattr(_decode, "column_reader", column_reader)
    connection, start = tables_at(
        "CREATE TABLE strange (id INT PRIMARY KEY, odd INT)",
        "CREATE TABLE plain (id INT PRIMARY KEY)",
    )
    execute(
        connection,
        "INSERT INTO strange VALUES (1, 1), (2, 2)",
        "INSERT INTO plain VALUES (1)",
        "UPDATE strange SET odd = 3",
        "INSERT INTO plain VALUES (2)",
    )
    items = read_all(reader, start)
    assert [(c.table, c.row["id"]) for c in rows(items)] == [("plain", 1), ("plain", 2)]
    found = undecoded(items)
    assert [(u.table, u.op, u.row_index, u.error_type) for u in found] == [
        ("strange", Operation.INSERT, 0, "UnknownColumnType"),
        ("strange", Operation.UPDATE, 0, "UnknownColumnType"),
    ]
    assert "binlog type code 250" in found[0].error and "exclude the table" in found[0].error


def test_a_partial_json_update_whose_diffs_do_not_apply_is_dead_letters_and_the_read_goes_on(
    mysql_database: Any, mysql_reader: BinlogReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE docs (id INT PRIMARY KEY, j JSON)",
            """INSERT INTO docs VALUES (1, '{"a": 1, "b": "long enough to be kept"}')""")
    start = mysql_reader.master_position()

    # A server writes no diff that does not apply: the applier's refusal is injected.
    def refused(document: Any, diffs: Any) -> Any:
        raise UnappliedDiff("REPLACE at $.a: the before image lacks that member")

    monkeypatch.setattr("dbus_fn.capture._decode.apply_diffs", refused)
    execute(connection, "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
            "UPDATE docs SET j = JSON_SET(j, '$.a', 2) WHERE id = 1",
            "SET SESSION binlog_row_value_options = ''",
            "UPDATE docs SET j = JSON_SET(j, '$.a', 3) WHERE id = 1")  # fmt: skip
    items = read_all(mysql_reader, start)
    [dead] = undecoded(items)
    assert (dead.op, dead.row_index, dead.error_type) == (Operation.UPDATE, 0, "UnappliedDiff")
    assert "the before image lacks that member" in dead.error
    assert [c.after["j"] for c in rows(items)] == [{"a": 3, "b": "long enough to be kept"}]
