"""Declared column types through the runtime: FLOAT(M,D), zerofill, geometry subtypes
and MariaDB UUID/INET reach Kafka and Elasticsearch as SELECT shows them, each
column named by its declaration."""

from __future__ import annotations

import json
from typing import Any

import pytest
from declared_type_rows import DECLARED, create, write_and_change
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from support import kafka_events, wait_for

from dbus_fn.columns import row_to_json
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e


def test_declared_types_reach_kafka_and_elasticsearch_as_select_shows_them(
    spark: Any, scratch: Scratch
) -> None:
    services, database, topic, index = (
        scratch.services, scratch.fresh_database, scratch.kafka_topic, scratch.es_index,
    )  # fmt: skip
    connection = database.connect()
    create(connection)
    table = f"{database.name}.t"
    folder = scratch.function_folder(
        "declared",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def everywhere(event: fn.RowChange) -> list[str]:
            return ["kafka://{topic}", "es://{index}"]
        ''',
        [table],
        dead_letter=f"kafka://{topic}.dead",
    )
    query = start(scratch.runtime_config(folder), spark=spark)
    try:
        wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch")
        assert query.exception() is None
        inserted, updated = write_and_change(connection)
        messages = kafka_events(services.kafka.bootstrap_servers, topic, 13, 180)
        events = [event for _, event in messages]
        with Elasticsearch(services.elasticsearch.url) as es:

            def settled() -> Any:
                if not es.indices.exists(index=index):
                    return None
                es.indices.refresh(index=index)
                hits = es.search(index=index, query={"match_all": {}})["hits"]["hits"]
                documents = {hit["_source"]["id"]: hit["_source"] for hit in hits}
                done = set(documents) == {1, 2, 4, 5} and all(
                    documents[i]["u"] == updated[i]["u"] for i in documents
                )
                return documents if done else None

            documents = wait_for(settled, 120, "the index to hold rows 1, 2, 4 and 5, updated")
            mapping = es.indices.get_mapping(index=index)[index]["mappings"]["properties"]
    finally:
        stop(query, spark)
    kinds = [e.get_type().rsplit(".", 1)[-1] for e in events]
    assert sorted(kinds) == sorted(["inserted"] * 6 + ["updated"] * 5 + ["deleted"] * 2)
    for event in events:
        data = event.get_data()
        assert data["columns"] == DECLARED
        image = data["after"] or data["before"]
        assert event.get_subject() == json.dumps([image["id"]])
        if data["after"] is None:
            assert data["before"] == row_to_json(updated[image["id"]], DECLARED)
        elif event.get_type().endswith("inserted"):
            assert data["after"] == row_to_json(inserted[image["id"]], DECLARED)
        else:
            assert data["after"] == row_to_json(updated[image["id"]], DECLARED)
            if data["before"] is not None:
                assert data["before"] == row_to_json(inserted[image["id"]], DECLARED)
    for key, document in documents.items():
        assert document == row_to_json(updated[key], DECLARED)
    maximums = next(
        e.get_data()["after"] for e in events
        if e.get_type().endswith("inserted") and e.get_data()["after"]["id"] == 2
    )  # fmt: skip
    assert (maximums["f355"], maximums["f72z"], maximums["u"], maximums["bz"]) == (
        30.12346, 99999.95, "ffffffff-ffff-ffff-ffff-ffffffffffff", 18446744073709551615,
    )  # fmt: skip
    assert {name: mapping[name]["type"] for name in ("f355", "bz", "u", "i6")} == {
        "f355": "double", "bz": "keyword", "u": "keyword", "i6": "keyword",
    }  # fmt: skip
