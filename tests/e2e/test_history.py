"""History, all real: a deployment's sinks brought up to its table while the table
changes, merged per key with the live stream."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from support import kafka_consumer, wait_for

from dbus_fn.kafka_binding import from_kafka_message
from dbus_spark.history import HistoryStore, store_path
from dbus_spark.job import start, stop

pytestmark = pytest.mark.e2e

ROWS = 6000
CHUNK_ROWS = 500

PRODUCTS = """
CREATE TABLE products (
    id INT PRIMARY KEY,
    name VARCHAR(64) NOT NULL,
    price INT NOT NULL,
    note VARCHAR(32)
)
"""

CATALOG = '''
import dbus_fn as fn

@fn.filter(tables="{table}")
def skip_sevens(event: fn.RowChange) -> bool:
    return event.row["id"] % 10 != 7

@fn.projection(tables="{table}")
def public(event: fn.RowChange) -> dict:
    return {{"id": event.row["id"], "name": event.row["name"].upper(),
             "price": event.row["price"]}}

@fn.route(tables="{table}")
def both(event: fn.RowChange) -> list[str]:
    return ["kafka://{topic}", "es://{index}"]
'''


def expected(connection: Any) -> dict[int, dict[str, Any]]:
    """What the catalog functions make of the table as it is now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, name, price FROM products")
        return {
            id_: {"id": id_, "name": name.upper(), "price": price}
            for id_, name, price in cursor.fetchall()
            if id_ % 10 != 7
        }


def index_contents(url: str, index: str) -> dict[int, dict[str, Any]]:
    with Elasticsearch(url) as es:
        if not es.indices.exists(index=index):
            return {}
        es.indices.refresh(index=index)
        docs = {}
        for hit in _scan(es, index):
            docs[int(hit["_id"])] = hit["_source"]
        return docs


def _scan(es: Elasticsearch, index: str) -> Iterator[dict[str, Any]]:
    after: list[Any] | None = None
    while True:
        page = es.search(index=index, size=5000, sort=[{"id": "asc"}], search_after=after,
                         query={"match_all": {}})["hits"]["hits"]  # fmt: skip
        if not page:
            return
        yield from page
        after = page[-1]["sort"]


class TopicState:
    """The last message per key of a topic, and every event type seen, read as it grows."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.last: dict[int, dict[str, Any] | None] = {}
        self.types: dict[str, int] = {}
        self.history: dict[int, list[tuple[int, int, str]]] = {}
        """Per key, every message's (binlog file number, position, type suffix), in order."""

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(10000, 0.5):
                if msg.error():
                    continue
                event = from_kafka_message(msg.key(), msg.value(), msg.headers())
                suffix = event.get_type().rsplit(".", 1)[-1]
                self.types[suffix] = self.types.get(suffix, 0) + 1
                (key,) = json.loads(msg.key())
                self.last[key] = None if suffix == "deleted" else event.get_data()["after"]
                number = int(event.get_extension("binlogfile").rsplit(".", 1)[-1])
                place = (number, int(event.get_extension("binlogpos")), suffix)
                self.history.setdefault(key, []).append(place)

    def merge_violations(self) -> list[tuple[int, list[tuple[int, int, str]]]]:
        """Keys whose messages are not in strictly growing position order, or whose
        snapshot row is not the first: a change the snapshot already held was sent."""
        bad = []
        for key, places in self.history.items():
            positions = [(number, pos) for number, pos, _ in places]
            snapshot_later = any(suffix == "snapshot" for _, _, suffix in places[1:])
            if snapshot_later or positions != sorted(set(positions)):
                bad.append((key, places))
        return bad

    def contents(self) -> dict[int, dict[str, Any]]:
        return {key: value for key, value in self.last.items() if value is not None}

    def close(self) -> None:
        self.consumer.close()


class Churn(threading.Thread):
    """Inserts, updates and deletes across the whole key range, chunk edges included."""

    def __init__(self, connection: Any, rows: int) -> None:
        super().__init__(daemon=True)
        self.connection = connection
        self.rows = rows
        self.stopped = threading.Event()
        self.writes = 0

    def run(self) -> None:
        rng = random.Random(7)
        edges = [n * CHUNK_ROWS + d for n in range(1, self.rows // CHUNK_ROWS) for d in (0, 1)]
        with self.connection.cursor() as cursor:
            while not self.stopped.is_set():
                key = rng.choice(edges) if rng.random() < 0.3 else rng.randint(1, self.rows * 2)
                action = rng.random()
                if action < 0.4:
                    cursor.execute(
                        "INSERT INTO products VALUES (%s, %s, %s, NULL) "
                        "ON DUPLICATE KEY UPDATE price = price + 1",
                        (key, f"new-{key}", key),
                    )
                elif action < 0.75:
                    cursor.execute(
                        "UPDATE products SET name = CONCAT('u', name), price = price + 1 "
                        "WHERE id = %s",
                        (key,),
                    )
                else:
                    cursor.execute("DELETE FROM products WHERE id = %s", (key,))
                self.writes += 1
                time.sleep(0.002)


@pytest.fixture
def products(fresh_database: Any) -> Any:
    connection = fresh_database.connect()
    with connection.cursor() as cursor:
        cursor.execute(PRODUCTS)
        for begin in range(1, ROWS + 1, 1000):
            cursor.executemany(
                "INSERT INTO products VALUES (%s, %s, %s, 'seed')",
                [(i, f"item-{i}", i * 3) for i in range(begin, min(begin + 1000, ROWS + 1))],
            )
    return connection


def test_a_bootstrap_under_concurrent_writes_ends_equal_to_the_table_in_kafka_and_elasticsearch(
    spark: Any, scratch: Scratch, products: Any
) -> None:
    services, database, topic, index, tmp_path, function_folder = scratch
    table = f"{database.name}.products"
    folder = function_folder(
        "catalog", CATALOG.format(table=table, topic=topic, index=index), [table]
    )
    config = replace(scratch.runtime_config(folder), chunk_rows=CHUNK_ROWS)
    churn = Churn(database.connect(), ROWS)
    churn.start()
    query = start(config, spark=spark)
    topic_state = TopicState(services.kafka.bootstrap_servers, topic)
    try:
        store_file = store_path(config.checkpoint_dir)

        def finished() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            task = HistoryStore(store_file).tasks("src").get(f"catalog:{table}")
            return task is not None and task.finished > 0

        wait_for(finished, 240, "the bootstrap to read every chunk", every=0.5)
        time.sleep(2)  # writes go on past the last chunk, into the live stream
        churn.stopped.set()
        churn.join()
        want = expected(products)
        assert churn.writes > 100 and len(want) > ROWS * 0.8

        def converged() -> bool:
            topic_state.poll(1)
            return (
                index_contents(services.elasticsearch.url, index) == want
                and topic_state.contents() == want
            )

        wait_for(converged, 180, "Kafka and Elasticsearch to equal the table", every=0.5)
    finally:
        churn.stopped.set()
        topic_state.close()
        stop(query, spark)
    task = HistoryStore(store_file).tasks("src")[f"catalog:{table}"]
    assert task.chunks >= ROWS // CHUNK_ROWS
    # Per key, a snapshot row comes first and nothing older follows it.
    assert topic_state.merge_violations()[:5] == []
    # Rows of the table came as snapshot rows, later changes as changes.
    assert topic_state.types.get("snapshot", 0) >= len(want) * 0.5
    assert topic_state.types.get("updated", 0) > 0


def test_a_deployment_that_asks_for_no_history_gets_changes_only(
    spark: Any, scratch: Scratch, products: Any, tmp_path: Path
) -> None:
    services, database, topic, index, _tmp, function_folder = scratch
    table = f"{database.name}.products"
    folder = function_folder(
        "catalog", CATALOG.format(table=table, topic=topic, index=index), [table],
        initial="none",
    )  # fmt: skip
    config = scratch.runtime_config(folder)
    query = start(config, spark=spark)
    topic_state = TopicState(services.kafka.bootstrap_servers, topic)
    try:
        with products.cursor() as cursor:
            cursor.execute("UPDATE products SET price = 0 WHERE id IN (1, 2)")

        def both() -> bool:
            topic_state.poll(1)
            return len(topic_state.last) == 2

        wait_for(both, 120, "the two updates", every=0.5)
        topic_state.poll(3)
    finally:
        topic_state.close()
        stop(query, spark)
    assert topic_state.types == {"updated": 2}
    assert HistoryStore(store_path(config.checkpoint_dir)).tasks("src") == {}
