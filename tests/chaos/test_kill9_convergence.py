"""kill -9 the runtime again and again under load: nothing lost, every index equals its table.

The runtime runs as `dbus runtime start` in its own session; the test SIGKILLs
its whole process group (the CLI, Spark's JVM, its Python workers) at random
moments, seeded and printed, and restarts it on the same checkpoint, while a
writer runs a mixed workload on three tables. After the last restart catches
up: every committed change is in its table's topic, one key's changes in commit
order, and each table's index equals the table, value for value. The same on a
MariaDB and on a MySQL source. With ``delivery = "exactly-once"`` in the deployment's
manifest, a ``read_committed`` consumer also sees no change twice.
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from convergence import (
    FIRST_COMMIT,
    RuntimeProcess,
    Workload,
    check_convergence,
    delete_outputs,
    new_routes,
    read_topic,
    topic_exists,
    wait_converged,
    write_function_folder,
)
from elasticsearch import Elasticsearch

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

KILLS = 5
"""Kills per server: ten in all, each a restart of Spark under load."""
# Where a kill lands: in Spark's start-up (before the run commits anything), or
# in steady micro-batches, a random moment after the run's first commit.
STARTUP_SHARE = 0.3
KILL_IN_STARTUP = (1.0, 10.0)
KILL_AFTER_FIRST_COMMIT = (0.0, 8.0)


def _sleep_watching(runtime: RuntimeProcess, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not runtime.alive():
            raise AssertionError(
                f"run {runtime.current.number} exited by itself:\n{runtime.tail()}"
            )
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("chaos_server", "delivery"),
    [("mariadb", "at-least-once"), ("mysql", "at-least-once"), ("mariadb", "exactly-once")],
    ids=["mariadb", "mysql", "mariadb-exactly-once"],
)
def test_kill9_at_random_moments_loses_nothing_and_indices_equal_tables(
    delivery: str,
    chaos_database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    chaos_seed: int,
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    bootstrap = kafka_service.bootstrap_servers
    workload = Workload(chaos_database.connect, seed=chaos_seed)
    workload.create_tables()
    routes = new_routes(chaos_database.name, workload.tables)
    runtime = RuntimeProcess.for_runtime(
        source_dsn=chaos_database.endpoint.dsn,
        functions=write_function_folder(tmp_path / "fn", routes, delivery),
        kafka=bootstrap,
        elasticsearch=elasticsearch_service.url,
        checkpoint=tmp_path / "checkpoint",
        logs=tmp_path / "logs",
    )
    rng = random.Random(f"kill schedule {chaos_seed}")
    conn = chaos_database.connect()
    es = Elasticsearch(elasticsearch_service.url, request_timeout=60)
    writing = False
    try:
        runtime.start()
        workload.start()
        load_began = time.monotonic()
        writing = True
        for number in range(1, KILLS + 1):
            if rng.random() < STARTUP_SHARE:
                delay = rng.uniform(*KILL_IN_STARTUP)
            else:
                delay = runtime.wait_first_commit(FIRST_COMMIT) + rng.uniform(
                    *KILL_AFTER_FIRST_COMMIT
                )
            _sleep_watching(runtime, delay - (time.time() - runtime.current.started))
            runtime.kill9()
            killed = runtime.current
            committed = killed.resumed_after
            print(
                f"kill {number}: run {killed.number} after {killed.killed_after:.1f}s "
                f"(first commit: {'-' if committed is None else f'{committed:.1f}s'})"
            )
            runtime.start()
        _sleep_watching(runtime, rng.uniform(5.0, 10.0))
        workload.stop()
        load_seconds = time.monotonic() - load_began
        writing = False
        verdict, caught_up = wait_converged(
            lambda: check_convergence(workload, routes, conn, bootstrap, es),
            timeout=180,
            alive=runtime.alive,
            on_timeout=runtime.tail,
            seed=workload.seed,
        )
        dead = (
            read_topic(bootstrap, routes.dead_letters)
            if topic_exists(bootstrap, routes.dead_letters)
            else []
        )
        assert dead == [], f"{len(dead)} dead letter(s); none expected"
        code = runtime.stop()
        assert code == 0, f"the runtime's last run stopped with {code}:\n{runtime.tail()}"
        runtime.wait_gone(30)
    finally:
        if writing:
            workload.stop()
        runtime.stop()
        es.close()
        delete_outputs(bootstrap, elasticsearch_service.url, routes)

    resumes = [run.resumed_after for run in runtime.runs[1:]]
    measured = sorted(r for r in resumes if r is not None)
    replayed = sum(v.replayed for v in verdict.kafka.values())
    rate = len(workload.committed) / load_seconds
    print(
        f"kills: {KILLS}; changes committed: {len(workload.committed)} in "
        f"{workload.transactions} transactions ({workload.rolled_back} rolled back) over "
        f"{load_seconds:.0f}s ({rate:.0f} changes/s); replayed messages: {replayed}, "
        f"{replayed / KILLS:.0f} per kill, {replayed / KILLS / rate:.1f}s of changes; "
        f"caught up {caught_up:.1f}s after the load stopped"
    )
    print(
        "restart to first committed batch: "
        + ", ".join("-" if r is None else f"{r:.1f}s" for r in resumes)
        + (f"; median {measured[len(measured) // 2]:.1f}s" if measured else "")
    )
    print(
        "per table (changes committed / Kafka messages / rows): "
        + ", ".join(
            f"{name} {len(workload.expected(name))}/{v.messages}/{verdict.rows[name]}"
            for name, v in verdict.kafka.items()
        )
    )
    print(f"total {time.monotonic() - began:.0f}s")
    # Every kill hit a run that was still alive (a run that had died on its own
    # would show its own exit code), and one more run finished the job.
    assert [run.returncode for run in runtime.runs[:-1]] == [-signal.SIGKILL] * KILLS
    assert len(runtime.runs) == KILLS + 1
    assert len(workload.committed) > 1000, "the workload was too small to prove anything"
    if delivery == "exactly-once":
        assert replayed == 0, f"{replayed} change(s) seen twice by a read_committed consumer"
