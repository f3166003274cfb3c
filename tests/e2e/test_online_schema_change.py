"""The real pt-online-schema-change alters a table under a write load while a runtime
streams ``db.*`` into Kafka and Elasticsearch, on MariaDB and on MySQL: no helper-table
row reaches a sink, and the sinks equal the table afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from history_support import TopicState
from online_schema_change import WriteLoad, pt_online_schema_change, run_pt_online_schema_change
from support import wait_for

from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

ROWS = 5000
ADDED = "note"


def table_rows(database: Any) -> dict[int, dict[str, Any]]:
    with database.connect() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT * FROM t")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def latest_rows(topic: TopicState) -> dict[int, dict[str, Any]]:
    """The row each key's last message leaves (none after a delete)."""
    return {key: row for key, row in topic.last.items() if row is not None}


def index_rows(es: Elasticsearch, index: str) -> dict[int, dict[str, Any]]:
    if not es.indices.exists(index=index):
        return {}
    es.indices.refresh(index=index)
    hits = es.search(index=index, size=10000, query={"match_all": {}})["hits"]["hits"]
    return {int(hit["_id"]): hit["_source"] for hit in hits}


def same_rows(sink: dict[int, dict[str, Any]], table: dict[int, dict[str, Any]]) -> bool:
    """Whether a sink holds the table: every row, each as the table has it, but for the
    column the change added in rows not written since the swap (they keep their shape
    until their next change; docs/events.md#online-schema-change-tools)."""
    if set(sink) != set(table):
        return False
    return all(
        sink[key] == row or (ADDED not in sink[key] and sink[key] == _without_added(row))
        for key, row in table.items()
    )


def _without_added(row: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in row.items() if name != ADDED}


@pytest.fixture
def indices(scratch: Scratch) -> Iterator[dict[str, str]]:
    """The index each table would go to (the route names it after the table)."""
    names = {table: f"{scratch.es_index}-{table}" for table in ("t", "_t_new", "_t_old")}
    yield names
    with Elasticsearch(scratch.services.elasticsearch.url) as es:
        for name in names.values():
            es.options(ignore_status=404).indices.delete(index=name)


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_pt_online_schema_change_under_a_write_load_reaches_no_sink_as_a_table(
    spark: Any, scratch: Scratch, indices: dict[str, str]
) -> None:
    tool = pt_online_schema_change()
    services, database, topic, index, _tmp, function_folder = scratch
    folder = function_folder(
        "everything",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{database.name}.*")
        def by_table(event: fn.RowChange) -> list[str]:
            return ["kafka://{topic}", "es://{index}-" + event.table]
        ''',
        [f"{database.name}.*"],
    )
    query = start(scratch.runtime_config(folder), spark=spark)
    topic_contents = TopicState(services.kafka.bootstrap_servers, topic)
    es = Elasticsearch(services.elasticsearch.url)
    try:
        wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch",
                 every=0.5)  # fmt: skip
        assert query.exception() is None
        with database.connect() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT NOT NULL)")
            for first in range(1, ROWS + 1, 500):
                cursor.executemany(
                    "INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(first, first + 500)]
                )
        wait_for(lambda: query.exception() or len(index_rows(es, indices["t"])) == ROWS, 180,
                 "the rows to reach Elasticsearch", every=0.5)  # fmt: skip
        with WriteLoad(database, "t", next_id=ROWS + 1) as load:
            load.wait_for_statements(50)
            during = load.statements
            run_pt_online_schema_change(
                tool, database.endpoint, database.name, "t",
                f"ADD COLUMN {ADDED} VARCHAR(20) NOT NULL DEFAULT 'none'", chunk_size=250,
            )  # fmt: skip
            after = load.statements
            load.wait_for_statements(after + 100)
        assert after > during, "no write ran while the tool copied"
        table = table_rows(database)
        assert all(row[ADDED] == "none" for row in table.values())

        def settled() -> bool:
            topic_contents.poll(1.0)
            return bool(query.exception()) or (
                same_rows(index_rows(es, indices["t"]), table)
                and same_rows(latest_rows(topic_contents), table)
            )

        wait_for(settled, 240, "Kafka and Elasticsearch to hold the table")
        assert query.exception() is None
        topic_contents.poll(3.0)  # anything late (a helper's row) would come now
        assert topic_contents.sources == {f"/mysql/src/{database.name}/t"}
        assert len(topic_contents.ids) == ROWS + load.changes
        assert not es.indices.exists(index=indices["_t_new"])
        assert not es.indices.exists(index=indices["_t_old"])
        # Rows the load wrote after the swap carry the new column in both sinks.
        documents = index_rows(es, indices["t"])
        assert any(ADDED in doc for doc in documents.values())
        assert any(ADDED in row for row in latest_rows(topic_contents).values())
    finally:
        es.close()
        topic_contents.consumer.close()
        stop(query, spark)
