"""The whole path, all real: binlog → Spark runtime → a function → Kafka and Elasticsearch."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from support import es_documents, kafka_events, wait_for

from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

ITEMS = """
CREATE TABLE items (
    id INT PRIMARY KEY,
    name VARCHAR(64) NOT NULL,
    price DECIMAL(10, 2) NOT NULL,
    tags SET('new', 'sale', 'gift'),
    made DATETIME(6)
)
"""


def _wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    return wait_for(check, timeout, what, every=0.5)


@pytest.fixture
def runtime(
    spark: Any, scratch: Scratch
) -> Iterator[RuntimeConfig]:
    _services, fresh_database, kafka_topic, es_index, _tmp_path, function_folder = scratch
    with fresh_database.connect().cursor() as cur:
        cur.execute(ITEMS)
    items = f"{fresh_database.name}.items"
    folder = function_folder(
        "catalog",
        f'''
        import dbus_fn as fn

        @fn.projection(tables="{items}")
        def shout(event: fn.RowChange) -> dict:
            return {{**event.row, "name": event.row["name"].upper()}}

        @fn.route(tables="{items}")
        def everywhere(event: fn.RowChange) -> list[str]:
            return ["kafka://{kafka_topic}", "es://{es_index}"]
        ''',
        [items],
        dead_letter=f"kafka://{kafka_topic}.dead",
    )
    config = scratch.runtime_config(folder)
    query = start(config, spark=spark)
    try:
        _wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch")
        assert query.exception() is None
        yield config
    finally:
        stop(query, spark)


def test_inserts_updates_and_deletes_reach_kafka_and_elasticsearch(
    runtime: RuntimeConfig, fresh_database: Any, kafka_topic: str, es_index: str, services: Any
) -> None:
    with fresh_database.connect().cursor() as cur:
        cur.executemany(
            "INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
            [
                (1, "lamp", "19.90", "new,sale", "2026-01-02 03:04:05.123456"),
                (2, "desk", "250.00", "gift", "2026-01-02 03:04:05.000001"),
                (3, "chair", "75.50", None, None),
            ],
        )
        cur.execute("UPDATE items SET price = '17.00', tags = 'sale' WHERE id = 1")
        cur.execute("DELETE FROM items WHERE id = 3")

    events = kafka_events(services.kafka.bootstrap_servers, kafka_topic, 5, 120)
    kinds = [(json.loads(key), event.get_type().rsplit(".", 1)[-1]) for key, event in events]
    assert sorted(kinds) == sorted(
        [
            ([1], "inserted"),
            ([2], "inserted"),
            ([3], "inserted"),
            ([1], "updated"),
            ([3], "deleted"),
        ]
    )
    # One row's changes keep their order: the key pins them to one partition.
    assert [k for k in kinds if k[0] == [1]] == [([1], "inserted"), ([1], "updated")]
    updated = next(e for key, e in events if e.get_type().endswith("updated"))
    assert updated.get_data()["after"] == {
        "id": 1,
        "name": "LAMP",
        "price": "17.00",
        "tags": ["sale"],
        "made": "2026-01-02T03:04:05.123456",
    }
    deleted = next(e for key, e in events if e.get_type().endswith("deleted"))
    assert deleted.get_data()["before"]["id"] == 3
    assert deleted.get_data()["after"] is None
    assert updated.get_source() == f"/mysql/src/{fresh_database.name}/items"

    with Elasticsearch(services.elasticsearch.url) as es:

        def settled() -> Any:
            docs = es_documents(es, es_index) or {}
            return docs if set(docs) == {"1", "2"} and docs["1"]["price"] == "17.00" else None

        docs = _wait_for(settled, 60, "the index to hold rows 1 and 2 only")
    assert docs["1"] == {
        "id": 1,
        "name": "LAMP",
        "price": "17.00",
        "tags": ["sale"],
        "made": "2026-01-02T03:04:05.123456",
    }
    assert docs["2"]["name"] == "DESK"
    assert Decimal(docs["2"]["price"]) == Decimal("250.00")


def test_a_document_elasticsearch_refuses_is_a_dead_letter_of_the_change_and_the_rest_goes_on(
    runtime: RuntimeConfig, fresh_database: Any, kafka_topic: str, es_index: str, services: Any
) -> None:
    with Elasticsearch(services.elasticsearch.url) as es:
        # A mapping the rows can break: a name that is not a number is refused.
        es.indices.create(index=es_index, mappings={"properties": {"name": {"type": "long"}}})
        with fresh_database.connect().cursor() as cur:
            cur.executemany(
                "INSERT INTO items (id, name, price) VALUES (%s, %s, %s)",
                [(1, "12", "1.00"), (2, "widget", "2.00"), (3, "34", "3.00")],
            )

        def indexed() -> Any:
            es.indices.refresh(index=es_index)
            hits = es.search(index=es_index, query={"match_all": {}})["hits"]["hits"]
            return sorted(hit["_id"] for hit in hits) if len(hits) >= 2 else None

        assert _wait_for(indexed, 60, "the two acceptable rows in the index") == ["1", "3"]

    dead = kafka_events(services.kafka.bootstrap_servers, f"{kafka_topic}.dead", 1, 60)
    assert len(dead) == 1
    key, letter = dead[0]
    assert json.loads(key) == [2]
    assert letter.get_type().endswith(".deadletter")
    data = letter.get_data()
    assert data["function"] == f"es://{es_index}"
    assert data["stage"] == "sink"
    assert "400" in data["error"]["message"]
    assert "parsing_exception" in data["error"]["message"]
    # The dead letter carries the change as it was delivered (after the projection).
    assert data["original"]["data"]["after"]["name"] == "WIDGET"
    assert data["original"]["type"].endswith(".row.inserted")
    # Every row still went to Kafka: one refused document stops nothing else.
    delivered = kafka_events(services.kafka.bootstrap_servers, kafka_topic, 3, 60)
    assert sorted(json.loads(k) for k, _ in delivered) == [[1], [2], [3]]
