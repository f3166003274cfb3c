"""Capture from a real MySQL 9 (``dbus services up mysql``): where its binlog ends, its
binary JSON with every opaque value as SELECT shows it, a resume, compressed
transactions, partial JSON updates read as whole documents, VECTOR columns, images
without every column, which stop the read instead of being lost, and MySQL's default
login on a server without TLS. Each read runs with the native decoder and with
mysql-replication's."""

from __future__ import annotations

import contextlib
import json
import struct
import uuid
from typing import Any

import pytest
from capture_support import StallingProxy, commits, execute, read_all, rows, without_tls
from support import own_events

from dbus_fn import BinlogPosition
from dbus_fn.capture import BinlogReader, Shard, SourceSpec, replica_id_for
from dbus_fn.capture._gtid_sets import GtidSet
from dbus_fn.errors import SourceError

pytestmark = pytest.mark.integration


def test_the_binlog_end_is_where_show_binary_log_status_says_with_the_gtid_set(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    # Other tests commit meanwhile: the end lies between the statuses around it.
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")

    def status() -> tuple[int, int, GtidSet]:
        with connection.cursor() as cursor:
            cursor.execute("SHOW BINARY LOG STATUS")
            file, pos, *_rest, executed = cursor.fetchone()
        return int(file.rsplit(".", 1)[1]), pos, GtidSet.parse(executed)

    with connection.cursor() as cursor:
        cursor.execute("SELECT @@GLOBAL.gtid_executed")  # every commit returned so far
        committed = GtidSet.parse(cursor.fetchone()[0])
    before = status()
    end = mysql_reader.master_position()
    after = status()
    assert before[:2] <= (int(end.file.rsplit(".", 1)[1]), end.pos) <= after[:2]
    assert committed.issubset(GtidSet.parse(end.gtid))
    assert mysql_reader.server_info().flavour.startswith("MySQL 9.")


# Each document holds opaque values (a TIME, a DATETIME, a DECIMAL cast into it),
# which MySQL's binary JSON keeps in their own binary form.
DOCUMENTS = [
    "JSON_OBJECT('time_key', CAST('18:54:12' AS TIME), "
    "'datetime_key', CAST('2023-09-24 18:54:12' AS DATETIME), "
    "'decimal', CAST('99.99' AS DECIMAL(10,2)))",
    "JSON_ARRAY(CAST('-838:59:59' AS TIME), CAST('838:59:58.999999' AS TIME(6)), "
    "CAST('01:02:03.5' AS TIME(1)))",
    "JSON_OBJECT('d', CAST('2024-02-29' AS DATE), 'min', CAST('1000-01-01' AS DATE), "
    "'max', CAST('9999-12-31 23:59:59.999999' AS DATETIME(6)))",
    "JSON_OBJECT('n', CAST('-0.001' AS DECIMAL(10,3)), 'whole', CAST('42' AS DECIMAL(5,0)), "
    "'big', CAST('12345678901234567890.123456789' AS DECIMAL(40,9)))",
    "JSON_OBJECT('bytes', CAST(x'00ff01' AS BINARY), 'bits', b'101', 'year', CAST(2024 AS YEAR))",
    "JSON_OBJECT('nested', JSON_ARRAY(JSON_OBJECT('t', CAST('00:00:00' AS TIME)), 'x', 1.5, "
    "NULL, TRUE), 'unicode', 'grüße ✓')",
]


def test_json_documents_with_opaque_values_read_as_select_shows_them(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE docs (id INT PRIMARY KEY, j JSON)")
    start = mysql_reader.master_position()
    for number, document in enumerate(DOCUMENTS, 1):
        execute(connection, f"INSERT INTO docs VALUES ({number}, {document})")
    execute(connection, "UPDATE docs SET j = JSON_ARRAY(CAST('23:59:59' AS TIME)) WHERE id = 1")
    changes = rows(read_all(mysql_reader, start))
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, j FROM docs ORDER BY id")
        selected = {row_id: json.loads(text) for row_id, text in cursor.fetchall()}
    inserted = {change.after["id"]: change.after["j"] for change in changes[:-1]}
    assert inserted.keys() == selected.keys()
    for row_id in range(2, len(DOCUMENTS) + 1):
        assert inserted[row_id] == selected[row_id], DOCUMENTS[row_id - 1]
    update = changes[-1]
    assert update.before is not None
    assert update.before["j"] == inserted[1] == {
        "time_key": "18:54:12.000000", "datetime_key": "2023-09-24 18:54:12.000000",
        "decimal": 99.99,
    }  # fmt: skip
    assert update.after["j"] == selected[1] == ["23:59:59.000000"]


def test_the_default_login_reads_from_a_server_without_tls(mysql_database: Any) -> None:
    """caching_sha2_password's whole login over a plain connection (a new user, whom the
    server has not cached): the password goes encrypted with the server's RSA key."""
    connection = mysql_database.connect()
    user, password = f"plain_{uuid.uuid4().hex[:8]}", "a secret"
    execute(connection,
            f"CREATE USER '{user}'@'%' IDENTIFIED WITH caching_sha2_password BY '{password}'",
            f"GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '{user}'@'%'",
            "CREATE TABLE t (id INT PRIMARY KEY)")  # fmt: skip
    endpoint = mysql_database.endpoint
    proxy = StallingProxy(endpoint.host, endpoint.port, greeting=without_tls)
    spec = SourceSpec(name="plain", dsn=f"mysql://{user}:a%20secret@127.0.0.1:{proxy.port}",
                      tables=(f"{mysql_database.name}.*",))  # fmt: skip
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        start = reader.master_position()
        execute(connection, "INSERT INTO t VALUES (1)")
        assert [(c.op.value, c.row["id"]) for c in rows(read_all(reader, start))] == [
            ("insert", 1)
        ]
        login = reader._query("SELECT CURRENT_USER(), "
                              "(SELECT variable_value FROM performance_schema.session_status "
                              "WHERE variable_name = 'Ssl_cipher')")  # fmt: skip
        assert login == [(f"{user}@%", "")], "logged in as the user, without TLS"
    finally:
        reader.close()
        proxy.close()
        with contextlib.suppress(Exception):
            execute(connection, f"DROP USER '{user}'@'%'")


def test_a_resume_from_each_commit_yields_exactly_the_items_after_it(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
    start = mysql_reader.master_position()
    execute(connection, "INSERT INTO t VALUES (1, 'a')", "INSERT INTO t VALUES (2, 'b')",
            "UPDATE t SET v = 'c' WHERE id = 1", "DELETE FROM t WHERE id = 2")  # fmt: skip
    end = mysql_reader.master_position()
    everything = read_all(mysql_reader, start, end)
    assert [(c.op.value, c.row["id"]) for c in rows(everything)] == [
        ("insert", 1), ("insert", 2), ("update", 1), ("delete", 2)
    ]  # fmt: skip
    for commit in commits(everything):
        index = everything.index(commit)
        at = BinlogPosition(commit.position.file, commit.position.pos)
        resumed = read_all(mysql_reader, at, end)
        assert [repr(item) for item in resumed] == [repr(item) for item in everything[index + 1 :]]


def test_invisible_keys_and_columns_and_instant_column_changes_read_whole(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    start = mysql_reader.master_position()
    execute(
        connection,
        # MySQL makes the key itself (my_row_id, invisible) for a table created without one.
        "SET SESSION sql_generate_invisible_primary_key = ON",
        "CREATE TABLE g (a VARCHAR(10), h INT INVISIBLE, v INT AS (h + 1) VIRTUAL, "
        "s INT AS (h * 2) STORED)",
        "INSERT INTO g (a, h) VALUES ('x', 1)",
        "ALTER TABLE g ADD COLUMN n INT DEFAULT 5, ALGORITHM=INSTANT",
        "UPDATE g SET a = 'y'",
        "ALTER TABLE g DROP COLUMN n, ALGORITHM=INSTANT",
        "UPDATE g SET a = 'z'",
    )
    changes = rows(read_all(mysql_reader, start))
    assert [(change.op.value, change.key) for change in changes] == [
        ("insert", (1,)), ("update", (1,)), ("update", (1,)),
    ]  # fmt: skip
    assert changes[1].after == {"my_row_id": 1, "a": "y", "h": 1, "v": 2, "s": 2, "n": 5}
    with connection.cursor() as cursor:
        cursor.execute("SELECT my_row_id, a, h, v, s FROM g")
        (selected,) = cursor.fetchall()
    assert tuple(changes[2].after.values()) == selected


def test_compressed_transactions_read_as_the_same_changes_uncompressed(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    execute(connection, "CREATE TABLE a (id INT PRIMARY KEY, v TEXT)",
            "CREATE TABLE b (id INT PRIMARY KEY, j JSON)")  # fmt: skip
    start = mysql_reader.master_position()
    # A session setting any client may use: each of its transactions is one payload event.
    execute(
        connection,
        "SET SESSION binlog_transaction_compression = ON",
        "BEGIN",
        "INSERT INTO a VALUES (1, REPEAT('x', 50000)), (2, 'y')",
        "UPDATE a SET v = 'z' WHERE id = 2",
        "COMMIT",
        "INSERT INTO b VALUES (1, JSON_OBJECT('t', CAST('01:02:03' AS TIME)))",
        "DELETE FROM a WHERE id = 1",
        "SET SESSION binlog_transaction_compression = OFF",
        "INSERT INTO a VALUES (3, 'plain')",
    )
    end = mysql_reader.master_position()
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
        logged = cursor.fetchall()
    # Other tests' sessions may compress too: count the payloads of this database's
    # tables (the events each holds are listed after it, its table map second).
    ours = [
        at for at, row in enumerate(logged) if row[2] == "Transaction_payload"
        and any(f"({mysql_database.name}." in str(inner[5]) for inner in logged[at + 1 : at + 3])
    ]  # fmt: skip
    assert len(ours) == 3
    items = read_all(mysql_reader, start, end)
    changes = rows(items)
    assert [(c.table, c.op.value, c.row["id"]) for c in changes] == [
        ("a", "insert", 1), ("a", "insert", 2), ("a", "update", 2), ("b", "insert", 1),
        ("a", "delete", 1), ("a", "insert", 3),
    ]  # fmt: skip
    assert changes[0].after == {"id": 1, "v": "x" * 50000}
    assert changes[2].before == {"id": 2, "v": "y"} and changes[2].after == {"id": 2, "v": "z"}
    assert changes[3].after == {"id": 1, "j": {"t": "01:02:03.000000"}}
    assert [c.rows for c in commits(items) if c.rows] == [3, 1, 1, 1]
    # Each commit is a place to resume from, the compressed ones too.
    for commit in commits(items):
        index = items.index(commit)
        at = BinlogPosition(commit.position.file, commit.position.pos)
        resumed = read_all(mysql_reader, at, end)
        assert [repr(item) for item in resumed] == [repr(item) for item in items[index + 1 :]]


# Each is one UPDATE a session with binlog_row_value_options=PARTIAL_JSON logs as diffs
# of the before image's document (most of them: a diff longer than the document it
# changes is logged whole, as is a column not set by JSON_SET/REPLACE/REMOVE).
PARTIAL_UPDATES = [
    "UPDATE docs SET j = JSON_SET(j, '$.a', 2) WHERE id = 1",
    "UPDATE docs SET j = JSON_REPLACE(j, '$.b', 'shorter', '$.missing', 1) WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.new', JSON_OBJECT('x', 1), '$.c', 0) WHERE id = 1",
    "UPDATE docs SET j = JSON_REMOVE(j, '$.nested.list[1]', '$.b') WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.nested.list[0]', 10, '$.nested.list[9]', 'end') "
    "WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.nested.deep.k', 'v', '$.\"key with space\"', TRUE) "
    "WHERE id = 1",
    "UPDATE docs SET j = JSON_REPLACE(j, '$.nested.list[last]', NULL) WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.t', CAST('-01:02:03.5' AS TIME(1)), "
    "'$.d', CAST('1.50' AS DECIMAL(4,2)), '$.day', CAST('2024-02-29' AS DATE)) WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.a', 3), k = JSON_REMOVE(k, '$[0]') WHERE id = 1",
    "UPDATE docs SET j = JSON_SET(j, '$.a', 4), k = JSON_ARRAY('whole', 1) WHERE id = 1",
    "UPDATE docs SET k = JSON_SET(k, '$[0]', 'both rows'), note = 'n' WHERE id IN (1, 2)",
]


def test_partial_json_updates_read_as_the_documents_select_shows(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    document = {"a": 1, "b": "long enough to be kept in place", "c": [1, 2],
                "nested": {"list": [1, 2, 3, 4], "deep": {"x": None}}}  # fmt: skip
    execute(connection, "CREATE TABLE docs (id INT PRIMARY KEY, j JSON, k JSON, note TEXT)",
            f"INSERT INTO docs VALUES (1, '{json.dumps(document)}', '[1, 2, 3]', ''), "
            "(2, '{}', '[\"x\", \"y\"]', '')")  # fmt: skip
    start = mysql_reader.master_position()
    execute(connection, "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")

    def selected() -> dict[int, dict[str, Any]]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, j, k, note FROM docs ORDER BY id")
            return {i: {"id": i, "j": json.loads(j), "k": json.loads(k), "note": note}
                    for i, j, k, note in cursor.fetchall()}  # fmt: skip

    expected = []
    # The last one in a compressed transaction: its events are inside a payload event.
    compressed = "SET SESSION binlog_transaction_compression = ON"
    for statement in [*PARTIAL_UPDATES, compressed, PARTIAL_UPDATES[-1].replace("both", "2")]:
        before = selected()
        execute(connection, statement)
        after = selected()
        expected += [(before[i], after[i]) for i in after if after[i] != before[i]]
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW BINLOG EVENTS IN '{start.file}' FROM {start.pos}")
        kinds = own_events(cursor.fetchall(), mysql_database.name)
    # The server wrote each as a partial update (the one that sets k whole too: its j
    # is partial), the last inside a payload event (which lists its events too).
    assert kinds.count("Update_rows_partial") == len(PARTIAL_UPDATES) + 1
    assert kinds.count("Transaction_payload") == 1
    changes = rows(read_all(mysql_reader, start))
    assert [(c.op.value, c.before, c.after) for c in changes] == [
        ("update", before, after) for before, after in expected
    ]
    # Members a diff inserts are in MySQL's order too (by key length, then bytes).
    assert [json.dumps(c.row["j"]) for c in changes] == [
        json.dumps(after["j"]) for _, after in expected
    ]
    # Each shard of two reads its own rows of them (by the key of the after image).
    end = mysql_reader.master_position()
    sharded = [rows(list(mysql_reader.read(start, stop=end, idle_timeout=10, shard=Shard(i, 2))))
               for i in range(2)]  # fmt: skip
    assert all(sharded) and sorted(map(repr, sharded[0] + sharded[1])) == sorted(map(repr, changes))
    assert changes[7].after is not None
    assert {k: changes[7].after["j"][k] for k in ("t", "d", "day")} == {
        "t": "-01:02:03.500000", "d": 1.5, "day": "2024-02-29"
    }  # fmt: skip


def _as_select_shows(values: list[float]) -> str:
    """A vector as MySQL's VECTOR_TO_STRING prints it."""
    return "[" + ",".join(f"{value:.5e}" for value in values) + "]"


def test_vector_columns_read_as_their_floats_from_the_binlog_and_a_snapshot(
    mysql_database: Any, mysql_reader: BinlogReader
) -> None:
    connection = mysql_database.connect()
    # The table map describes a VECTOR with metadata mysql-replication does not read;
    # the columns after one (a text, an enum) must read right too.
    execute(connection, "CREATE TABLE vec (id INT PRIMARY KEY, v VECTOR(3), w VARCHAR(5), "
            "big VECTOR(300), e ENUM('a','b'))")  # fmt: skip
    big = "[" + ",".join(f"{i * 0.37 - 50:.3f}" for i in range(300)) + "]"
    start = mysql_reader.master_position()
    execute(
        connection,
        "INSERT INTO vec VALUES (1, STRING_TO_VECTOR('[1,2.5,-3]'), 'é', NULL, 'b')",
        f"INSERT INTO vec VALUES (2, STRING_TO_VECTOR('[0.1,1e-3,123456]'), 'x', "
        f"STRING_TO_VECTOR('{big}'), 'a')",
        "UPDATE vec SET v = STRING_TO_VECTOR('[12345.678,-1.17e-30,1.2345678]') WHERE id = 1",
    )
    changes = rows(read_all(mysql_reader, start))
    assert [(c.op.value, c.row["id"]) for c in changes] == [
        ("insert", 1), ("insert", 2), ("update", 1)
    ]  # fmt: skip
    assert changes[0].after == {"id": 1, "v": [1.0, 2.5, -3.0], "w": "é", "big": None, "e": "b"}
    assert changes[1].after is not None and changes[1].after["v"] == [0.1, 0.001, 123456.0]
    assert changes[2].before == changes[0].after
    assert dict(changes[0].column_types) == {
        "id": "int", "v": "vector(3)", "w": "varchar(5)", "big": "vector(300)",
        "e": "enum('a','b')",
    }  # fmt: skip
    latest = {c.row["id"]: c.after for c in changes[1:]}
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, HEX(v), VECTOR_TO_STRING(v), HEX(big), "
                       "VECTOR_TO_STRING(big) FROM vec ORDER BY id")  # fmt: skip
        selected = cursor.fetchall()
    for row_id, v_hex, v_text, big_hex, big_text in selected:
        after = latest[row_id]
        assert after is not None
        for name, raw, text in (("v", v_hex, v_text), ("big", big_hex, big_text)):
            if raw is None:
                assert after[name] is None
                continue
            values = after[name]
            # Every float is the stored float32 itself, shown as SELECT shows it.
            assert struct.pack(f"<{len(values)}f", *values) == bytes.fromhex(raw)
            assert _as_select_shows(values) == text
    snapshot = [item.after for item in rows(list(mysql_reader.snapshot()))]
    assert snapshot == [latest[1], latest[2]]


@pytest.mark.parametrize(
    ("setting", "statement", "event"),
    [
        ("binlog_row_image = 'MINIMAL'",
         "UPDATE docs SET j = '[]' WHERE id = 1", "without every column"),
    ],
)  # fmt: skip
def test_a_row_event_the_capture_cannot_read_stops_the_read_where_it_is(
    mysql_database: Any, mysql_reader: BinlogReader, setting: str, statement: str, event: str
) -> None:
    connection = mysql_database.connect()
    document = json.dumps({"a": 1, "b": "long enough to be kept"})
    execute(connection, "CREATE TABLE docs (id INT PRIMARY KEY, j JSON)",
            f"INSERT INTO docs VALUES (1, '{document}')")  # fmt: skip
    start = mysql_reader.master_position()
    # A session setting any client may use: the server writes that session's changes so.
    execute(connection, f"SET SESSION {setting}", statement)
    with pytest.raises(SourceError, match=event) as stopped:
        read_all(mysql_reader, start)
    message = str(stopped.value)
    assert "\n" not in message
    assert f"{mysql_database.name}.docs" in message, "it names the table"
    assert setting.split(" = ")[0] in message, "it names the setting that avoids it"
    assert start.file in message, "it names where the read stopped"
