"""One busy binlog read by two shards at once: every change arrives, each key in order;
and no task of the runtime's is ever run twice at once."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from elasticsearch.helpers import scan
from support import kafka_events
from test_runtime_slice import _wait_for

from dbus_fn.events import BinlogPosition
from dbus_spark.planning.source import SHARD_MIN_BYTES
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

KEYS = 200
ROUNDS = 12


def _history() -> dict[int, list[tuple[str, int]]]:
    """Each key's changes, in commit order, as the workload below makes them."""
    ver = dict.fromkeys(range(1, KEYS + 1), 0)
    changes = {key: [("inserted", 0)] for key in ver}
    for round_ in range(1, ROUNDS + 1):
        for key in ver:
            if key % (round_ % 4 + 1) == 0:
                ver[key] = round_
                changes[key].append(("updated", round_))
        gone = round_ * 13
        changes[gone] += [("deleted", ver[gone]), ("inserted", round_)]
        ver[gone] = round_
    return changes


def test_two_shards_deliver_every_change_once_per_key_in_commit_order(
    spark: Any, scratch: Scratch
) -> None:
    services, fresh_database, kafka_topic, es_index, _tmp_path, function_folder = scratch
    conn = fresh_database.connect()
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE counters (id INT PRIMARY KEY, ver INT NOT NULL, pad VARCHAR(255))"
        )
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        begin = BinlogPosition(file, int(pos))
        # The whole history is written before the runtime starts, so its first
        # micro-batch is one range far over SHARD_MIN_BYTES, read as two shards.
        cur.execute(f"INSERT INTO counters SELECT seq, 0, REPEAT('x', 200) FROM seq_1_to_{KEYS}")
        for round_ in range(1, ROUNDS + 1):
            cur.execute(f"UPDATE counters SET ver = {round_} WHERE id % {round_ % 4 + 1} = 0")
            cur.execute(f"DELETE FROM counters WHERE id = {round_ * 13}")
            cur.execute(f"INSERT INTO counters VALUES ({round_ * 13}, {round_}, 'back')")
        cur.execute("SHOW MASTER STATUS")
        assert int(cur.fetchone()[1]) - begin.pos > 2 * SHARD_MIN_BYTES
        cur.execute("SELECT id, ver, pad FROM counters")
        table = {str(i): {"id": i, "ver": v, "pad": p} for i, v, p in cur.fetchall()}
    expected = _history()

    counters = f"{fresh_database.name}.counters"
    folder = function_folder(
        "counters",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{counters}")
        def both(event: fn.RowChange) -> list[str]:
            return ["kafka://{kafka_topic}", "es://{es_index}"]
        ''',
        [counters],
    )
    config = scratch.runtime_config(folder)
    config = replace(
        config,
        decode_shards=2,
        sources=tuple(replace(b, start=begin) for b in config.sources),
    )
    query = start(config, spark=spark)
    try:
        events = kafka_events(
            services.kafka.bootstrap_servers,
            kafka_topic,
            sum(len(changes) for changes in expected.values()),
            180,
        )
        assert query.exception() is None
        # The query runs on until the index holds the table too: a batch whose
        # Elasticsearch write failed is replayed, to both sinks.
        with Elasticsearch(services.elasticsearch.url) as es:

            def documents() -> dict[str, Any] | None:
                if not es.indices.exists(index=es_index):
                    return None
                es.indices.refresh(index=es_index)
                docs = {hit["_id"]: hit["_source"] for hit in scan(es, index=es_index)}
                return docs if docs == table else None

            _wait_for(documents, 60, "the index to equal the table")
    finally:
        stop(query, spark)

    seen: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for key, event in events:
        data = event.get_data()
        row = data["after"] or data["before"]
        seen[json.loads(key)[0]].append((event.get_type().rsplit(".", 1)[-1], row["ver"]))
    assert seen == expected


def test_the_runtimes_spark_never_runs_a_copy_of_a_task_beside_it(spark: Any) -> None:
    """No speculative tasks: two attempts of one read at once would write its lanes
    side by side (exactly once, ``dbus_spark.sinks.kafka_positions``)."""
    assert spark.sparkContext.getConf().get("spark.speculation") == "false"
