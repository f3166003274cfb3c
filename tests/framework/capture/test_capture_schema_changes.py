"""Schema changes mid-stream: right column names before and after, DDL as events."""

from __future__ import annotations

from typing import Any

import pytest
from capture_support import TablesAt, execute, read_all, rows, schema_changes

from dbus_fn.capture import BinlogReader

pytestmark = [
    pytest.mark.integration,
    # DDL as each server writes it: MySQL's online schema changes and JSON too.
    pytest.mark.parametrize("server", ["mariadb", "mysql"]),
]


def images(items: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(change.table, dict(change.row)) for change in rows(items)]


def test_add_drop_modify_and_rename_column_keep_names_right_before_and_after(
    database: Any, tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10))")
    execute(
        connection,
        "INSERT INTO t VALUES (1, 10, 'x')",
        "ALTER TABLE t ADD COLUMN c INT DEFAULT 7",
        "INSERT INTO t VALUES (2, 20, 'y', 8)",
        "ALTER TABLE t DROP COLUMN a",
        "INSERT INTO t VALUES (3, 'z', 9)",
        "ALTER TABLE t MODIFY COLUMN c BIGINT UNSIGNED",
        "INSERT INTO t VALUES (4, 'w', 18446744073709551615)",
        "ALTER TABLE t RENAME COLUMN b TO name",
        "INSERT INTO t VALUES (5, 'v', 1)",
        "ALTER TABLE t CHANGE COLUMN name label VARCHAR(40) FIRST",
        "INSERT INTO t (id, label, c) VALUES (6, 'u', 2)",
    )
    items = read_all(reader, start)
    assert images(items) == [
        ("t", {"id": 1, "a": 10, "b": "x"}),
        ("t", {"id": 2, "a": 20, "b": "y", "c": 8}),
        ("t", {"id": 3, "b": "z", "c": 9}),
        ("t", {"id": 4, "b": "w", "c": 18446744073709551615}),
        ("t", {"id": 5, "name": "v", "c": 1}),
        ("t", {"label": "u", "id": 6, "c": 2}),
    ]
    changes = rows(items)
    assert (
        changes[2].column_types["c"] == "int" and changes[3].column_types["c"] == "bigint unsigned"
    )
    assert list(changes[5].column_types) == ["label", "id", "c"]
    assert changes[5].column_types["label"] == "varchar(40)"
    assert len({c.schema_version for c in changes}) == 6
    ddl = schema_changes(items)
    assert [(d.table, d.statement.split()[3]) for d in ddl] == [("t", "ADD")] + [
        ("t", w) for w in ("DROP", "MODIFY", "RENAME", "CHANGE")
    ]
    assert all(d.database == database.name for d in ddl)


def test_rename_table_moves_rows_to_the_new_name(tables_at: TablesAt, reader: BinlogReader) -> None:
    connection, start = tables_at("CREATE TABLE old_name (id INT PRIMARY KEY)")
    execute(
        connection,
        "INSERT INTO old_name VALUES (1)",
        "RENAME TABLE old_name TO new_name",
        "INSERT INTO new_name VALUES (2)",
        "ALTER TABLE new_name RENAME TO newer_name",
        "INSERT INTO newer_name VALUES (3)",
    )
    items = read_all(reader, start)
    assert images(items) == [
        ("old_name", {"id": 1}),
        ("new_name", {"id": 2}),
        ("newer_name", {"id": 3}),
    ]
    assert [d.table for d in schema_changes(items)] == ["old_name", "new_name"]


def test_copy_and_swap_like_online_schema_change_tools(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    """gh-ost / pt-osc: build a shadow table, copy, swap names atomically, drop the old."""
    connection, start = tables_at(
        "CREATE TABLE orders (id INT PRIMARY KEY, total INT)",
        "INSERT INTO orders VALUES (1, 100)",
    )
    execute(
        connection,
        "INSERT INTO orders VALUES (2, 200)",
        "CREATE TABLE _orders_gho LIKE orders",
        "ALTER TABLE _orders_gho ADD COLUMN status VARCHAR(10) NOT NULL DEFAULT 'new'",
        "INSERT INTO _orders_gho (id, total) SELECT id, total FROM orders",
        "RENAME TABLE orders TO _orders_del, _orders_gho TO orders",
        "DROP TABLE _orders_del",
        "INSERT INTO orders VALUES (3, 300, 'paid')",
        "UPDATE orders SET status = 'done' WHERE id = 1",
    )
    items = read_all(reader, start)
    captured = [(t, r) for t, r in images(items) if t == "orders"]
    assert captured == [
        ("orders", {"id": 2, "total": 200}),
        ("orders", {"id": 3, "total": 300, "status": "paid"}),
        ("orders", {"id": 1, "total": 100, "status": "done"}),
    ]
    swap = [d for d in schema_changes(items) if d.statement.startswith("RENAME")]
    assert len(swap) == 1 and swap[0].table == "orders"


def test_json_column_added_later_is_parsed_after_the_alter(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, doc LONGTEXT)")
    execute(
        connection,
        "INSERT INTO t VALUES (1, '{\"a\": 1}')",
        "ALTER TABLE t ADD COLUMN j JSON",
        "INSERT INTO t VALUES (2, '{\"a\": 2}', '{\"b\": [1]}')",
    )
    changes = rows(read_all(reader, start))
    assert changes[0].row["doc"] == '{"a": 1}' and changes[0].column_types["doc"] == "longtext"
    assert changes[1].row["j"] == {"b": [1]} and changes[1].column_types["j"] == "json"


def test_ddl_the_parser_cannot_read_never_stops_capture(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY)")
    execute(
        connection,
        "INSERT INTO t VALUES (1)",
        "CREATE VIEW v AS SELECT id FROM t",
        "CREATE PROCEDURE p() BEGIN SELECT 1; END",
        "ALTER /* odd */ TABLE `t` COMMENT 'it''s `odd`'",
        "CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.id = NEW.id",
        "DROP TRIGGER tr",
        "INSERT INTO t VALUES (2)",
    )
    items = read_all(reader, start)
    assert [r.row["id"] for r in rows(items)] == [1, 2]
    ddl = schema_changes(items)
    assert len(ddl) == 5
    assert [d.table for d in ddl] == [None, None, "t", None, None]
