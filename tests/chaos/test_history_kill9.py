"""kill -9 a runtime again and again while it bootstraps under writes: each run goes on
from the last committed chunk, and the sinks end equal to the table.

One runtime bootstraps two deployments at once, each of a source of its own (a source
plans its chunks apart from the others): one delivers at least once, from a private
MariaDB; the other with ``delivery = "exactly-once"``, from a private MySQL, whose
``read_committed`` consumer also gets each row's snapshot once (a chunk read again after
a kill sends nothing its first read committed). The one run (a module fixture) serves a
test per deployment: a kill is a restart of Spark, and one runtime killed three times
proves for both what two runtimes killed three times each proved for one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pytest
from convergence import RuntimeProcess, say_seed
from history_support import (
    Churn,
    TopicState,
    catalog_folder,
    chunk_reads,
    chunk_thresholds,
    create_products,
    wait_sinks_equal_table,
)
from scratch import scratch_database, scratch_index, scratch_topic
from support import FIRST_BATCH, wait_for

from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

ROWS = 12_000
CHUNK_ROWS = 600
"""About 20 chunks of the table, and more as the churn inserts keys up to twice ROWS:
each of the three runs before a kill commits two to four of them (its first batch or
two), so the bootstrap is mid-way at every kill."""
BOOTSTRAP_END = 600.0
"""Seconds the last run may take to read the bootstrap's rest, a guard against a stall,
not a bound on its speed: alone on the machine that run read 39 chunks per deployment
(of 24,000 rows then) in 80 s, and the parallel pass stretches a runtime's batches two
to three times."""
KILLS = 3
CHUNKS_PER_BATCH = 2  # a source's chunk tasks in a batch (local[2]: one per core)
SOURCES = {"at-least-once": "mariadb", "exactly-once": "mysql"}
"""Each delivery's deployment, and the source (the server) it bootstraps from."""


@dataclass
class Bootstrap:
    """One deployment's bootstrap in the shared run."""

    source: str
    task: str
    connection: Any
    topic: TopicState
    index: str
    done_at_kill: list[int] = field(default_factory=list)
    equal: str = "not checked"
    """What ``wait_sinks_equal_table`` said ("" once the sinks equal the table)."""


@dataclass
class Bootstraps:
    """What the module's one run left, per delivery."""

    seed: int
    store: Any
    runtime: RuntimeProcess
    each: dict[str, Bootstrap] = field(default_factory=dict)
    last_stop: int | None = None

    def task(self, delivery: str) -> Any:
        found = self.each[delivery]
        return HistoryStore(self.store).tasks(found.source).get(found.task)


def _kill_three_times(run: Bootstraps, rng: random.Random) -> None:
    runtime = run.runtime
    for _ in range(KILLS):
        runtime.start()
        runtime.wait_first_commit(FIRST_BATCH)
        time.sleep(rng.uniform(0.5, 3.0))
        runtime.kill9()
        for delivery, bootstrap in run.each.items():
            found = run.task(delivery)
            assert found is not None and not found.finished, (
                f"the {delivery} bootstrap ended before a kill"
            )
            bootstrap.done_at_kill.append(found.chunks)
        print(
            f"killed run {runtime.current.number}; chunks committed: "
            + ", ".join(f"{d} {b.done_at_kill[-1]}" for d, b in run.each.items())
        )


@pytest.fixture(scope="module")
def bootstraps(
    module_servers: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    module_chaos_seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Bootstraps]:
    tmp_path = tmp_path_factory.mktemp("bootstraps")
    # Servers of the module's own: the churn and the bootstraps' reads are heavy, and
    # every reader of a shared server's binlog (a replica started from its start, a
    # test reading it from the earliest position) would wade through them.
    servers = {server: module_servers(server).database(server) for server in ("mariadb", "mysql")}
    with ExitStack() as stack:
        databases = {s: stack.enter_context(scratch_database(e)) for s, e in servers.items()}
        folders, churns = [], []
        each: dict[str, Bootstrap] = {}
        for delivery, source in SOURCES.items():
            database = databases[source]
            connection = database.connect()
            create_products(connection, ROWS)
            table = f"{database.name}.products"
            topic = stack.enter_context(scratch_topic(kafka_service))
            index = stack.enter_context(scratch_index(elasticsearch_service))
            name = f"catalog-{delivery}"
            folders.append(catalog_folder(tmp_path / name, table, topic, index, delivery,
                                          name=name, source=source))  # fmt: skip
            state = TopicState(kafka_service.bootstrap_servers, topic)
            stack.callback(state.close)
            each[delivery] = Bootstrap(source, f"{name}:{table}", connection, state, index)
            churns.append(Churn(database.connect(), ROWS, CHUNK_ROWS))
        checkpoint = tmp_path / "checkpoint"
        runtime = RuntimeProcess.for_runtime(
            sources={s: d.endpoint.dsn for s, d in databases.items()},
            functions=folders,
            kafka=kafka_service.bootstrap_servers,
            elasticsearch=elasticsearch_service.url,
            checkpoint=checkpoint,
            logs=tmp_path / "logs",
            start="latest",
            options=["--chunk-rows", str(CHUNK_ROWS)],
        )
        stack.callback(runtime.stop)
        run = Bootstraps(module_chaos_seed, progress_path(str(checkpoint)), runtime, each)
        for churn in churns:
            stack.callback(churn.stopped.set)
            churn.start()
        _kill_three_times(run, random.Random(f"history kills {module_chaos_seed}"))
        runtime.start()
        wait_for(lambda: all((t := run.task(d)) is not None and t.finished > 0 for d in each),
                 BOOTSTRAP_END, "both bootstraps to end", every=0.5,
                 alive=runtime.alive)  # fmt: skip
        time.sleep(2)
        for churn in churns:
            churn.stopped.set()
            churn.join()
        for bootstrap in each.values():
            try:
                wait_sinks_equal_table(bootstrap.connection, bootstrap.topic,
                                       elasticsearch_service.url, bootstrap.index,
                                       runtime.alive)  # fmt: skip
                bootstrap.equal = ""
            except AssertionError as exc:
                bootstrap.equal = str(exc)
        run.last_stop = runtime.stop()
        yield run


@pytest.mark.parametrize("delivery", list(SOURCES))
def test_a_bootstrap_killed_mid_way_resumes_from_its_last_chunk_and_ends_equal(
    delivery: str, bootstraps: Bootstraps
) -> None:
    run = bootstraps
    say_seed(run.seed)
    bootstrap = run.each[delivery]
    total = run.task(delivery).chunks
    reads = chunk_reads(run.runtime, f"catalog-{delivery}")
    twice = bootstrap.topic.snapshots_twice()
    print(
        f"{delivery} on {bootstrap.source}: chunks: {total}; read: {reads}; committed at each "
        f"kill: {bootstrap.done_at_kill}; {len(twice)} of {len(bootstrap.topic.history)} "
        "keys' snapshot rows twice"
    )
    assert bootstrap.equal == "", bootstrap.equal
    assert run.last_stop == 0, run.runtime.tail()
    # Progress only grew from kill to kill, and no run started over: each kill costs
    # at most the chunks of the batch it interrupted.
    done_at_kill = bootstrap.done_at_kill
    assert done_at_kill == sorted(done_at_kill) and done_at_kill[-1] > 0
    assert total <= reads <= total + KILLS * CHUNKS_PER_BATCH
    thresholds = chunk_thresholds(run.store, bootstrap.source, bootstrap.task)
    assert bootstrap.topic.merge_violations(thresholds)[:5] == []
    if delivery == "exactly-once":
        # A chunk read again after its records were committed sends none of them.
        assert twice[:10] == []
