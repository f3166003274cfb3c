"""Online schema change tools: their helper tables' rows are not changes of tables of
their own, and the swap at the end is the schema change of the table altered."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from capture_support import TablesAt, execute, read_all, rows, schema_changes
from click.testing import CliRunner
from online_schema_change import WriteLoad, pt_online_schema_change, run_pt_online_schema_change

from dbus_fn import Operation, RowChange
from dbus_fn.capture import BinlogReader, SourceSpec, position_to_json, replica_id_for
from dbus_fn.capture._ddl import renamed_tables
from dbus_fn.capture._helper_tables import is_helper_table
from dbus_fn.cli import cli
from dbus_fn.json_format import read_jsonl

ROWS = 10000

# What gh-ost issues for `ALTER TABLE t ADD COLUMN note ...` (gh-ost itself is not
# packaged anywhere reachable): the ghost and changelog tables, the row copy, the
# changes it applies from the binlog, the cut-over's sentry table, the swap.
GH_OST_PREPARE = (
    "CREATE /* gh-ost */ TABLE `{db}`.`_t_gho` LIKE `{db}`.`t`",
    "ALTER /* gh-ost */ TABLE `{db}`.`_t_gho` ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'new'",
    "CREATE /* gh-ost */ TABLE `{db}`.`_t_ghc` (id BIGINT AUTO_INCREMENT, "
    "last_update TIMESTAMP DEFAULT CURRENT_TIMESTAMP, hint VARCHAR(64) NOT NULL, "
    "value VARCHAR(4096) NOT NULL, PRIMARY KEY (id), UNIQUE KEY hint_uidx (hint))",
    "INSERT /* gh-ost */ INTO `{db}`.`_t_ghc` (id, hint, value) VALUES (2, 'state', "
    "'GhostTableMigrated') ON DUPLICATE KEY UPDATE value = VALUES(value)",
    "INSERT /* gh-ost */ IGNORE INTO `{db}`.`_t_gho` (id, a) SELECT id, a FROM `{db}`.`t` "
    "FORCE INDEX (PRIMARY) WHERE id BETWEEN 1 AND 3 LOCK IN SHARE MODE",
    # A change of t while the copy runs, and gh-ost applying it to the ghost table.
    "UPDATE `{db}`.`t` SET a = 21 WHERE id = 2",
    "REPLACE /* gh-ost */ INTO `{db}`.`_t_gho` (id, a) VALUES (2, 21)",
    "INSERT INTO `{db}`.`t` VALUES (4, 40)",
    "REPLACE /* gh-ost */ INTO `{db}`.`_t_gho` (id, a) VALUES (4, 40)",
    "DELETE FROM `{db}`.`t` WHERE id = 3",
    "DELETE /* gh-ost */ FROM `{db}`.`_t_gho` WHERE id = 3",
    "INSERT /* gh-ost */ INTO `{db}`.`_t_ghc` (id, hint, value) VALUES (3, 'heartbeat', "
    "'2026-01-01') ON DUPLICATE KEY UPDATE value = VALUES(value)",
)
GH_OST_ATOMIC_CUT_OVER = (
    "CREATE /* gh-ost */ TABLE `{db}`.`_t_del` (id INT AUTO_INCREMENT PRIMARY KEY) "
    "COMMENT='ghost-cut-over-sentry'",
    "DROP /* gh-ost */ TABLE IF EXISTS `{db}`.`_t_del`",
    "RENAME /* gh-ost */ TABLE `{db}`.`t` TO `{db}`.`_t_del`, `{db}`.`_t_gho` TO `{db}`.`t`",
)
GH_OST_TWO_STEP_CUT_OVER = (
    "RENAME /* gh-ost */ TABLE `{db}`.`t` TO `{db}`.`_t_del`",
    "RENAME /* gh-ost */ TABLE `{db}`.`_t_gho` TO `{db}`.`t`",
)
GH_OST_AFTER = (
    "DROP /* gh-ost */ TABLE IF EXISTS `{db}`.`_t_ghc`",
    "UPDATE `{db}`.`t` SET a = 11 WHERE id = 1",
    "INSERT INTO `{db}`.`t` VALUES (5, 50, 'late')",
    "DROP /* gh-ost */ TABLE IF EXISTS `{db}`.`_t_del`",
)


def changes_of(items: list[Any]) -> list[tuple[str, str, dict[str, Any] | None]]:
    return [(c.table, c.op.value, c.after and dict(c.after)) for c in rows(items)]


def gh_ost(tables_at: TablesAt, database: str, cut_over: tuple[str, ...]) -> Any:
    connection, start = tables_at(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL)",
        "INSERT INTO t VALUES (1, 10), (2, 20), (3, 30)",
    )
    execute(
        connection,
        *(s.format(db=database) for s in (*GH_OST_PREPARE, *cut_over, *GH_OST_AFTER)),
    )
    return start


GH_OST_CHANGES_OF_T = [
    ("t", "update", {"id": 2, "a": 21}),
    ("t", "insert", {"id": 4, "a": 40}),
    ("t", "delete", None),
    ("t", "update", {"id": 1, "a": 11, "note": "new"}),
    ("t", "insert", {"id": 5, "a": 50, "note": "late"}),
]


@pytest.mark.parametrize(
    ("cut_over", "swaps"),
    [
        (GH_OST_ATOMIC_CUT_OVER, GH_OST_ATOMIC_CUT_OVER[-1:]),
        (GH_OST_TWO_STEP_CUT_OVER, GH_OST_TWO_STEP_CUT_OVER),
    ],
    ids=["atomic", "two-step"],
)
def test_gh_ost_helper_rows_are_left_out_and_its_swap_is_the_change_of_t(
    fresh_database: Any,
    tables_at: TablesAt,
    reader: BinlogReader,
    cut_over: tuple[str, ...],
    swaps: tuple[str, ...],
) -> None:
    start = gh_ost(tables_at, fresh_database.name, cut_over)
    items = read_all(reader, start)
    assert changes_of(items) == GH_OST_CHANGES_OF_T
    ddl = schema_changes(items)
    assert [(d.database, d.table, d.statement) for d in ddl] == [
        (fresh_database.name, "t", s.format(db=fresh_database.name)) for s in swaps
    ]


def test_a_snapshot_taken_while_a_tool_copies_reads_t_alone(
    tables_at: TablesAt, reader: BinlogReader
) -> None:
    tables_at(
        "CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL)",
        "INSERT INTO t VALUES (1, 10), (2, 20)",
        "CREATE TABLE _t_new LIKE t",
        "ALTER TABLE _t_new ADD COLUMN note VARCHAR(10) NOT NULL DEFAULT 'new'",
        "INSERT INTO _t_new (id, a) SELECT id, a FROM t WHERE id = 1",
        "CREATE TABLE _t_gho LIKE t",
    )
    snapshot = rows(list(reader.snapshot()))
    assert [(c.table, dict(c.row)) for c in snapshot] == [
        ("t", {"id": 1, "a": 10}), ("t", {"id": 2, "a": 20}),
    ]  # fmt: skip


@pytest.fixture
def keeping_reader(source: SourceSpec) -> Iterator[BinlogReader]:
    spec = SourceSpec(source.name, source.dsn, source.tables, keep_helper_tables=True)
    binlog = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        yield binlog
    finally:
        binlog.close()


def test_a_source_told_to_keep_helper_tables_delivers_their_rows_and_ddl(
    fresh_database: Any, tables_at: TablesAt, keeping_reader: BinlogReader
) -> None:
    start = gh_ost(tables_at, fresh_database.name, GH_OST_ATOMIC_CUT_OVER)
    items = read_all(keeping_reader, start)
    tables = [table for table, _, _ in changes_of(items)]
    assert tables.count("_t_gho") == 6 and tables.count("_t_ghc") == 2
    assert [c for c in changes_of(items) if c[0] == "t"] == GH_OST_CHANGES_OF_T
    assert [d.table for d in schema_changes(items)] == [
        "_t_gho", "_t_gho", "_t_ghc", "_t_del", "_t_del", "t", "_t_ghc", "_t_del",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "args", "env", "kept"),
    [
        ([], [], {}, False),
        (["--keep-helper-tables"], [], {}, True),
        (["--keep-helper-tables"], ["--skip-helper-tables"], {}, False),
        (["--keep-helper-tables"], [], {"DBUS_KEEP_HELPER_TABLES": "0"}, False),
        ([], ["--keep-helper-tables"], {}, True),
        ([], [], {"DBUS_KEEP_HELPER_TABLES": "1"}, True),
    ],
)
def test_dbus_source_keeps_helper_tables_by_flag_variable_or_stored_source(
    fresh_database: Any,
    tables_at: TablesAt,
    tmp_path: Path,
    stored: list[str],
    args: list[str],
    env: dict[str, str],
    kept: bool,
) -> None:
    runner = CliRunner(env={"DBUS_SOURCES_FILE": str(tmp_path / "sources.json")})
    added = runner.invoke(cli, [
        "source", "add", "osc", fresh_database.endpoint.dsn, "-t", f"{fresh_database.name}.*",
        *stored,
    ])  # fmt: skip
    assert added.exit_code == 0, added.output
    listed = json.loads(runner.invoke(cli, ["source", "list", "--json"]).output)
    assert listed[0]["keep_helper_tables"] is bool(stored)
    start = position_to_json(gh_ost(tables_at, fresh_database.name, GH_OST_ATOMIC_CUT_OVER))
    output = tmp_path / "events.jsonl"
    recorded = runner.invoke(cli, [
        "source", "record", "osc", "--output", str(output), "--idle-timeout", "1",
        "--from", f"{start['file']}:{start['pos']}", *args,
    ], env=env)  # fmt: skip
    assert recorded.exit_code == 0, recorded.output
    events = read_jsonl(output)
    tables = {e.get_source().rsplit("/", 1)[-1] for e in events if ".row." in e.get_type()}
    assert tables == ({"t", "_t_gho", "_t_ghc"} if kept else {"t"})


def test_pt_online_schema_change_under_a_write_load_shows_only_the_changes_of_t(
    fresh_database: Any, tables_at: TablesAt, reader: BinlogReader
) -> None:
    """The real tool: its copy of t into ``_t_new`` (and what its triggers write there)
    is no change of any table; every change of t is, once, with the new column after
    the swap; the swap is the one schema change of t."""
    tool = pt_online_schema_change()
    connection, start = tables_at("CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL)")
    with connection.cursor() as cursor:
        for first in range(1, ROWS + 1, 500):
            cursor.executemany(
                "INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(first, first + 500)]
            )
    with WriteLoad(fresh_database, "t", next_id=ROWS + 1) as load:
        load.wait_for_statements(50)
        during = load.statements
        output = run_pt_online_schema_change(
            tool, fresh_database.endpoint, fresh_database.name, "t",
            "ADD COLUMN note VARCHAR(20) NOT NULL DEFAULT 'none'", chunk_size=250,
        )  # fmt: skip
        after = load.statements
        load.wait_for_statements(after + 50)
    assert after - during > 0, "no write ran while the tool copied"
    assert "RENAME TABLE" in output and "_t_new" in output
    items = read_all(reader, start)
    changes = rows(items)
    assert {c.table for c in changes} == {"t"}
    assert len(changes) == ROWS + load.changes
    swap = [d for d in schema_changes(items) if d.table == "t"]
    assert [d.statement.split()[0].upper() for d in swap] == ["RENAME"]
    assert all(d.table not in ("_t_new", "_t_old") for d in schema_changes(items))
    swapped_at = items.index(swap[0])
    assert all("note" not in c.row for c in rows(items[:swapped_at]))
    assert all(c.row.get("note") == "none" for c in rows(items[swapped_at:]))
    assert replay(changes) == table_rows(fresh_database.connect(), "id, a, note")


def replay(changes: list[RowChange]) -> dict[int, dict[str, Any]]:
    """The table the changes make, from empty; rows without a column added later show
    its default, as the table does."""
    table: dict[int, dict[str, Any]] = {}
    for change in changes:
        if change.op is Operation.DELETE:
            del table[change.row["id"]]
        else:
            table[change.row["id"]] = {"note": "none", **change.row}
    return table


def table_rows(connection: Any, columns: str) -> dict[int, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM t")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


@pytest.mark.parametrize(
    ("table", "helper"),
    [
        ("_orders_new", True), ("_orders_old", True), ("__orders_new", True),
        ("_orders_gho", True), ("_orders_ghc", True), ("_orders_del", True),
        ("_orders_20240101120000_del", True), ("_a_b_new", True),
        ("orders", False), ("orders_new", False), ("_new", False), ("_orders_newer", False),
        ("_orders_ghost", False), ("new_orders", False),
    ],
)  # fmt: skip
def test_helper_tables_are_known_by_name(table: str, helper: bool) -> None:
    assert is_helper_table(table) is helper


@pytest.mark.parametrize(
    ("statement", "names"),
    [
        ("RENAME TABLE t TO _t_old, _t_new TO t", ["t", "_t_old", "_t_new", "t"]),
        ("rename /* gh-ost */ table `d`.`t` to `d`.`_t_del`, `d`.`_t_gho` to `d`.`t`",
         ["d.t", "d._t_del", "d._t_gho", "d.t"]),
        ("RENAME TABLE `a``b` TO c WAIT 3", ["a`b", "c"]),
        ("ALTER TABLE t RENAME TO u", ["t", "u"]),
        ("ALTER TABLE t ADD x INT, RENAME AS d.u", ["t", "d.u"]),
        ("ALTER TABLE t RENAME COLUMN a TO b", []),
        ("ALTER TABLE t RENAME KEY a TO b", []),
        ("RENAME TABLE a TO b junk", []),
        ("RENAME USER a TO b", []),
    ],
)  # fmt: skip
def test_renamed_tables_names_every_table_of_a_rename(statement: str, names: list[str]) -> None:
    got = renamed_tables(statement, "db")
    assert [t if d == "db" else f"{d}.{t}" for d, t in got] == names
