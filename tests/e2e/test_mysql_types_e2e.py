"""Every column type MySQL has, with its extremes, read three ways on a MySQL 9 source:
`dbus source record`, and the runtime into Kafka and into Elasticsearch. Each equals
SELECT, value for value: the types MariaDB shares (``column_type_rows``), then what
MySQL alone has: JSON holding opaque values (TIME, DATETIME, DATE, DECIMAL, bytes),
VECTOR, spatial values with an SRID, invisible columns and a generated invisible
key, written partly as partial JSON updates and compressed transactions."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Sequence
from typing import Any

import numpy
import pytest
from click.testing import CliRunner
from column_type_rows import COLUMNS, ROWS, create, insert, normalise_select
from e2e_support import Scratch
from support import kafka_events, own_events, wait_for, wait_index_holds

from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.cli import cli
from dbus_fn.columns import row_to_json
from dbus_fn.json_format import read_jsonl
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

EXTRA = {
    "jo": ("JSON", "json"),
    "v": ("VECTOR(3)", "vector(3)"),
    "p": ("POINT SRID 4326", "point"),
    "g": ("GEOMETRY", "geometry"),
    "h": ("INT INVISIBLE", "int"),
}
"""MySQL's own columns of table ``t``, after COLUMNS: (declaration, column type)."""

TYPES = {"id": "int", **{n: t for n, (_, t) in COLUMNS.items()},
         **{n: t for n, (_, t) in EXTRA.items()}}  # fmt: skip

OPAQUE = (
    "JSON_OBJECT('time', CAST('{time}' AS TIME(6)), 'datetime', "
    "CAST('2023-09-24 18:54:12.5' AS DATETIME(1)), 'date', CAST('2024-02-29' AS DATE), "
    "'decimal', CAST('{amount}' AS DECIMAL(12,3)), 'bytes', CAST(x'00ff10' AS BINARY), "
    "'nested', JSON_ARRAY(CAST('00:00:01' AS TIME), 1.5, 'x'))"
)
"""A JSON document whose values MySQL's binary JSON keeps as opaque ones."""

EXTRA_ROWS = [
    dict(jo=OPAQUE.format(time="-838:59:59", amount="-99.99"),
         v="STRING_TO_VECTOR('[1.5, -0.1, 3.4e38]')",
         p="ST_GeomFromText('POINT(45.5 -120.25)', 4326)",
         g="ST_GeomFromText('POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1,2 1,2 2,1 1))')", h="-1"),
    dict(jo=OPAQUE.format(time="838:59:59", amount="123456789.125"),
         v="STRING_TO_VECTOR('[0, 1e-7, -2]')", p="ST_GeomFromText('POINT(-90 180)', 4326)",
         g="ST_GeomFromText('GEOMETRYCOLLECTION(POINT(1 2),LINESTRING(0 0,1 1))')",
         h="2147483647"),
    dict(jo="'{}'", v="STRING_TO_VECTOR('[1, 2, 3]')",
         p="ST_GeomFromText('POINT(0 0)', 4326)", g="ST_GeomFromText('POINT(-1.5 2.25)')",
         h="0"),
]  # fmt: skip
"""MySQL's own columns of ROWS' three rows, as SQL."""

CHANGES = [
    # Partial JSON updates: the server logs the changed paths alone.
    "SET SESSION binlog_row_value_options = 'PARTIAL_JSON'",
    "UPDATE t SET jo = JSON_SET(jo, '$.decimal', 7.5), j = JSON_REMOVE(j, '$.k') WHERE id = 2",
    "UPDATE t SET jo = JSON_REPLACE(jo, '$.time', CAST('01:02:03.5' AS TIME(1))), i = i + 1 "
    "WHERE id = 1",
    # One compressed transaction (a zstd payload event) of an update and a delete.
    "SET SESSION binlog_transaction_compression = ON",
    "BEGIN",
    "UPDATE t SET v = STRING_TO_VECTOR('[0.5, 0.25, -1]'), vc = 'compressed', "
    "p = ST_GeomFromText('POINT(1 2)', 4326) WHERE id = 1",
    "DELETE FROM t WHERE id = 3",
    "INSERT INTO k (a, h) VALUES ('third', 3)",
    "UPDATE k SET a = 'first!' WHERE a = 'first'",
    "COMMIT",
]


def _vector(raw: bytes) -> list[float]:
    """A VECTOR as SELECT gives it (float32s, little-endian), as capture documents it:
    each the shortest decimal of its float32."""
    return [float(str(numpy.float32(x))) for x in struct.unpack(f"<{len(raw) // 4}f", raw)]


def _normalised(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``t`` as SELECT gave it, in capture's Python form."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if name in COLUMNS:
            out[name] = normalise_select(name, value)
        elif value is None or name in ("id", "p", "g", "h"):
            out[name] = value
        elif name == "jo":
            out[name] = json.loads(value)
        else:
            out[name] = _vector(value)
    return out


def _select(connection: Any, statement: str) -> dict[int, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(statement)
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def _t(connection: Any) -> dict[int, dict[str, Any]]:
    """Table ``t`` as SELECT shows it, in its JSON form, by id (the invisible column named)."""
    found = _select(connection, f"SELECT {', '.join(f'`{n}`' for n in TYPES)} FROM t")
    return {key: row_to_json(_normalised(row), TYPES) for key, row in found.items()}


def _k(connection: Any) -> dict[int, dict[str, Any]]:
    """Table ``k`` (its key generated and invisible) as SELECT shows it, by key."""
    return _select(connection, "SELECT my_row_id, a, h FROM k")


def _check_events(
    events: Sequence[Any],
    t_before: dict[int, dict[str, Any]],
    t_after: dict[int, dict[str, Any]],
    k_after: dict[int, dict[str, Any]],
    what: str,
) -> None:
    """The row changes of ``t`` and ``k`` in ``events`` take each key from SELECT's
    rows before the changes to its rows after them, image by image (one key's changes
    in their order; keys may interleave)."""
    changes = [e for e in events if e.get_type().startswith("io.dbus.row.")]
    by_table: dict[str, list[Any]] = {}
    for event in changes:
        by_table.setdefault(event.get_source().rsplit("/", 1)[-1], []).append(event)
    t_events, k_events = by_table.pop("t", []), by_table.pop("k", [])
    assert by_table == {}, f"{what}: changes of other tables"
    assert sorted(e.get_type().rsplit(".", 1)[-1] for e in t_events) == [
        "deleted"] + ["inserted"] * 4 + ["updated"] * 3, what  # fmt: skip
    state: dict[int, Any] = {}
    for event in t_events:
        data = event.get_data()
        assert data["columns"] == TYPES, what
        image = data["after"] or data["before"]
        key = image["id"]
        if data["before"] is not None:
            assert data["before"] == state[key], f"{what}: the before image of {key}"
        state[key] = data["after"]
        if event.get_type().endswith("inserted"):
            assert data["after"] == t_before[key], f"{what}: row {key} as inserted"
    assert {key: row for key, row in state.items() if row is not None} == t_after, what
    assert sorted(e.get_type().rsplit(".", 1)[-1] for e in k_events) == [
        "inserted", "inserted", "updated"], what  # fmt: skip
    assert {e.get_data()["after"]["my_row_id"]: e.get_data()["after"] for e in k_events} == {
        key: row for key, row in k_after.items()
    }, what
    assert all(e.get_data()["key"] == ["my_row_id"] for e in k_events), what


@pytest.mark.parametrize("server", ["mysql"])
def test_every_mysql_type_reads_as_select_shows_it_by_record_kafka_and_elasticsearch(
    spark: Any, scratch: Scratch, monkeypatch: pytest.MonkeyPatch
) -> None:
    services, mysql_database, kafka_topic, es_index, tmp_path, _ff = scratch
    connection = mysql_database.connect()
    create(connection, ", ".join(f"`{name}` {sql}" for name, (sql, _) in EXTRA.items()))
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION sql_generate_invisible_primary_key = ON")
        cursor.execute("CREATE TABLE k (a VARCHAR(10), h INT INVISIBLE)")
    spec = SourceSpec(name="end", dsn=mysql_database.endpoint.dsn,
                      tables=(f"{mysql_database.name}.*",))  # fmt: skip
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"))
    try:
        begin = reader.master_position()
    finally:
        reader.close()
    t_table, k_table = f"{mysql_database.name}.t", f"{mysql_database.name}.k"
    folder = scratch.function_folder(
        "mysql_types",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{t_table}")
        def t_everywhere(event: fn.RowChange) -> list[str]:
            return ["kafka://{kafka_topic}", "es://{es_index}"]

        @fn.route(tables="{k_table}")
        def k_to_kafka(event: fn.RowChange) -> list[str]:
            return ["kafka://{kafka_topic}"]
        ''',
        [t_table, k_table],
        dead_letter=f"kafka://{kafka_topic}.dead",
    )
    query = start(scratch.runtime_config(folder), spark=spark)
    try:
        wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch")
        assert query.exception() is None
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO k (a, h) VALUES ('first', 1)")
        for values, extra in zip(ROWS, EXTRA_ROWS, strict=True):
            insert(connection, values, extra)
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO t (id) VALUES (NULL)")  # NULL in every column
        t_before = _t(connection)
        with connection.cursor() as cursor:
            for statement in CHANGES:
                cursor.execute(statement)
        t_after, k_after = _t(connection), _k(connection)
        messages = kafka_events(services.kafka.bootstrap_servers, kafka_topic, 11, 180)
        wait_index_holds(services.elasticsearch.url, es_index, t_after,
                         "the index to hold table t as SELECT shows it")  # fmt: skip
        assert query.exception() is None
    finally:
        stop(query, spark)
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW BINLOG EVENTS IN '{begin.file}' FROM {begin.pos}")
        kinds = own_events(cursor.fetchall(), mysql_database.name)
    # Every update after PARTIAL_JSON is a partial one, the two inside the payload too
    # (which SHOW BINLOG EVENTS lists after the payload event).
    assert kinds.count("Update_rows_partial") == 4 and kinds.count("Transaction_payload") == 1
    assert set(t_after) == {1, 2, 4} and t_before.keys() == {1, 2, 3, 4}
    assert t_after[1]["jo"]["time"] == "01:02:03.500000"
    assert t_before[1]["jo"]["bytes"].startswith("base64:type"), "the opaque bytes as SELECT"
    _check_events([event for _, event in messages], t_before, t_after, k_after, "Kafka")
    # `dbus source record` from the same place reads the same changes.
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path / "sources.json"))
    runner = CliRunner()
    added = runner.invoke(cli, ["source", "add", "my", mysql_database.endpoint.dsn,
                                "-t", f"{mysql_database.name}.*"])  # fmt: skip
    assert added.exit_code == 0, added.output
    output = tmp_path / "events.jsonl"
    recorded = runner.invoke(cli, [
        "source", "record", "my", "--output", str(output), "--idle-timeout", "3",
        "--from", f"{begin.file}:{begin.pos}",
    ])  # fmt: skip
    assert recorded.exit_code == 0, recorded.output
    _check_events(list(read_jsonl(output)), t_before, t_after, k_after, "source record")
