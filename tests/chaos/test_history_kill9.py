"""kill -9 a runtime again and again while it bootstraps a deployment under writes:
each run goes on from the last committed chunk, and the sinks end equal to the table.
With ``delivery = "exactly-once"`` a ``read_committed`` consumer also gets each row's
snapshot once: a chunk read again after a kill sends nothing its first read committed."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from convergence import FIRST_COMMIT, RuntimeProcess
from history_support import (
    Churn,
    TopicState,
    catalog_folder,
    chunk_reads,
    chunk_thresholds,
    create_products,
    wait_sinks_equal_table,
)
from support import wait_for

from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

ROWS = 24_000
CHUNK_ROWS = 600
KILLS = 3
CHUNKS_PER_BATCH = 2  # local[2]: one chunk task per core


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_bootstrap_killed_mid_way_resumes_from_its_last_chunk_and_ends_equal(
    delivery: str,
    fresh_database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    kafka_topic: str,
    es_index: str,
    chaos_seed: int,
    tmp_path: Path,
) -> None:
    connection = fresh_database.connect()
    create_products(connection, ROWS)
    table = f"{fresh_database.name}.products"
    folder = catalog_folder(tmp_path / "catalog", table, kafka_topic, es_index, delivery)
    checkpoint = tmp_path / "checkpoint"
    runtime = RuntimeProcess.for_runtime(
        source_dsn=fresh_database.endpoint.dsn,
        functions=folder,
        kafka=kafka_service.bootstrap_servers,
        elasticsearch=elasticsearch_service.url,
        checkpoint=checkpoint,
        logs=tmp_path / "logs",
        start="latest",
        options=["--chunk-rows", str(CHUNK_ROWS)],
    )
    store = progress_path(str(checkpoint))
    task_name = f"catalog:{table}"

    def task() -> Any:
        return HistoryStore(store).tasks("chaos").get(task_name)

    rng = random.Random(f"history kills {chaos_seed}")
    churn = Churn(fresh_database.connect(), ROWS, CHUNK_ROWS)
    topic = TopicState(kafka_service.bootstrap_servers, kafka_topic)
    done_at_kill = []
    try:
        churn.start()
        for _ in range(KILLS):
            runtime.start()
            runtime.wait_first_commit(FIRST_COMMIT)
            time.sleep(rng.uniform(0.5, 3.0))
            runtime.kill9()
            found = task()
            assert found is not None and not found.finished, "the bootstrap ended before a kill"
            done_at_kill.append(found.chunks)
            print(f"killed run {runtime.current.number} with {found.chunks} chunks committed")
        runtime.start()
        wait_for(lambda: (t := task()) is not None and t.finished > 0, 300,
                 "the bootstrap to end", every=0.5, alive=runtime.alive)  # fmt: skip
        time.sleep(2)
        churn.stopped.set()
        churn.join()
        wait_sinks_equal_table(connection, topic, elasticsearch_service.url, es_index,
                               runtime.alive)  # fmt: skip
        assert runtime.stop() == 0, runtime.tail()
    finally:
        churn.stopped.set()
        topic.close()
        runtime.stop()
    total = task().chunks
    reads = chunk_reads(runtime)
    twice = topic.snapshots_twice()
    print(
        f"chunks: {total}; read: {reads}; committed at each kill: {done_at_kill}; "
        f"{delivery}: {len(twice)} of {len(topic.history)} keys' snapshot rows twice"
    )
    # Progress only grew from kill to kill, and no run started over: each kill costs
    # at most the chunks of the batch it interrupted.
    assert done_at_kill == sorted(done_at_kill) and done_at_kill[-1] > 0
    assert total <= reads <= total + KILLS * CHUNKS_PER_BATCH
    assert topic.merge_violations(chunk_thresholds(store, "chaos", task_name))[:5] == []
    if delivery == "exactly-once":
        # A chunk read again after its records were committed sends none of them.
        assert twice[:10] == []
