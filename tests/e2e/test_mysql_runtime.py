"""The runtime on a MySQL 9 source (``dbus services up mysql``): where the binlog ends
comes from ``SHOW BINARY LOG STATUS``, and JSON documents holding TIME, DATETIME and
DECIMAL values reach Kafka and Elasticsearch as SELECT shows them, from compressed
transactions too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_support import Scratch
from support import kafka_events, wait_for, wait_index_holds

from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

DOCUMENT = (
    "JSON_OBJECT('time_key', CAST('{time}' AS TIME), 'datetime_key', "
    "CAST('2023-09-24 18:54:12' AS DATETIME), 'decimal', CAST('{amount}' AS DECIMAL(10,2)))"
)


def _selected(connection: Any) -> dict[int, dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, j, n FROM docs ORDER BY id")
        return {i: {"id": i, "j": json.loads(j), "n": n} for i, j, n in cursor.fetchall()}


@pytest.mark.parametrize("server", ["mysql"])
def test_a_mysql_source_reaches_kafka_and_elasticsearch_as_select_shows_it(
    spark: Any, scratch: Scratch
) -> None:
    services, mysql_database, kafka_topic, es_index, _tmp, function_folder = scratch
    connection = mysql_database.connect()
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE docs (id INT PRIMARY KEY, j JSON, n VARCHAR(20))")
    table = f"{mysql_database.name}.docs"
    folder = function_folder(
        "mysql_docs",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def everywhere(event: fn.RowChange) -> list[str]:
            return ["kafka://{kafka_topic}", "es://{es_index}"]
        ''',
        [table],
        dead_letter=f"kafka://{kafka_topic}.dead",
    )
    query = start(scratch.runtime_config(folder), spark=spark)
    try:
        wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch")
        assert query.exception() is None
        with connection.cursor() as cursor:
            for i, (time, amount) in enumerate([("18:54:12", "99.99"), ("-838:59:59", "-1.50"),
                                                 ("00:00:01", "0.01")], 1):  # fmt: skip
                document = DOCUMENT.format(time=time, amount=amount)
                cursor.execute(f"INSERT INTO docs VALUES ({i}, {document}, 'n{i}')")
            # A compressed transaction (one zstd payload event) is read as the same.
            cursor.execute("SET SESSION binlog_transaction_compression = ON")
            cursor.execute("UPDATE docs SET j = JSON_SET(j, '$.decimal', 7), n = 'm' WHERE id = 2")
            cursor.execute("DELETE FROM docs WHERE id = 3")
        selected = _selected(connection)
        messages = kafka_events(services.kafka.bootstrap_servers, kafka_topic, 5, 180)
        wait_index_holds(services.elasticsearch.url, es_index, selected,
                         "the index to hold the table as SELECT shows it")  # fmt: skip
        assert query.exception() is None
    finally:
        stop(query, spark)
    # Each key's changes in order (its partition keeps them so; keys may interleave).
    changes: dict[int, list[tuple[str, Any]]] = {}
    for _, event in messages:
        data = event.get_data()
        image = data["after"] or data["before"]
        changes.setdefault(image["id"], []).append((event.get_type().rsplit(".", 1)[-1], data))
    assert {key: [kind for kind, _ in found] for key, found in changes.items()} == {
        1: ["inserted"], 2: ["inserted", "updated"], 3: ["inserted", "deleted"],
    }  # fmt: skip
    assert changes[1][0][1]["after"] == selected[1]
    assert changes[2][0][1]["after"]["j"] == {
        "time_key": "-838:59:59.000000", "datetime_key": "2023-09-24 18:54:12.000000",
        "decimal": -1.5,
    }  # fmt: skip
    assert changes[2][1][1]["after"] == selected[2]
    assert changes[3][1][1]["before"]["j"]["time_key"] == "00:00:01.000000"
