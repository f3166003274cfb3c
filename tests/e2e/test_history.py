"""History, all real: a deployment's sinks brought up to its table while the table
changes, merged per key with the live stream."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from history_support import (
    CATALOG,
    Churn,
    TopicState,
    chunk_thresholds,
    create_products,
    expected,
    index_contents,
)
from support import wait_for

from dbus_spark.spark.job import start, stop
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore

pytestmark = pytest.mark.e2e

ROWS = 6000
CHUNK_ROWS = 500

@pytest.fixture
def products(scratch: Scratch) -> Any:
    connection = scratch.fresh_database.connect()
    create_products(connection, ROWS)
    return connection


# On MySQL too: the snapshot's position is a GTID set there, and each chunk's rows merge
# with the stream's changes by it.
@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_bootstrap_under_concurrent_writes_ends_equal_to_the_table_in_kafka_and_elasticsearch(
    spark: Any, scratch: Scratch, products: Any
) -> None:
    services, database, topic, index, _tmp, function_folder = scratch
    table = f"{database.name}.products"
    folder = function_folder(
        "catalog", CATALOG.format(table=table, topic=topic, index=index), [table]
    )
    config = replace(scratch.runtime_config(folder), chunk_rows=CHUNK_ROWS)
    churn = Churn(database.connect(), ROWS, CHUNK_ROWS)
    churn.start()
    query = start(config, spark=spark)
    topic_state = TopicState(services.kafka.bootstrap_servers, topic)
    try:
        store_file = progress_path(config.checkpoint_dir)

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
    since_of = chunk_thresholds(store_file, "src", f"catalog:{table}")
    assert topic_state.merge_violations(since_of)[:5] == []
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
    assert HistoryStore(progress_path(config.checkpoint_dir)).tasks("src") == {}
