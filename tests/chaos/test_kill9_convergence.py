"""kill -9 the runtime again and again under load: nothing lost, every index equals its table.

One runtime reads two private servers, a MariaDB and a MySQL (sources ``mariadb`` and
``mysql``), and runs four deployments: for each server, one that delivers at least once
and one with ``delivery = "exactly-once"`` in its manifest, each to topics and indices
of its own. The runtime runs as `dbus runtime start` in its own session; the test
SIGKILLs its whole process group (the CLI, Spark's JVM, its Python workers) at random
moments, seeded and printed, and restarts it on the same checkpoint, while a writer on
each server runs a mixed workload on three tables. After the last restart catches up,
for every deployment: every committed change is in its table's topic, one key's changes
in commit order, and each table's index equals the table, value for value. A
``read_committed`` consumer of an exactly-once deployment's topics also sees no change
twice.

The one run (a module fixture) serves the three tests, each of which states what holds
for its deployments: a kill is a restart of Spark under load, and one runtime killed
five times proves for all four deployments what three runtimes killed five times each
proved for three.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from convergence import (
    Convergence,
    Routes,
    RuntimeProcess,
    Workload,
    check_convergence,
    converge_all,
    dead_letters,
    delete_outputs,
    new_routes,
    say_seed,
    write_function_folder,
)
from elasticsearch import Elasticsearch
from scratch import FreshDatabase
from support import FIRST_BATCH, PrivateServices

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

SERVERS = ("mariadb", "mysql")
DELIVERIES = ("at-least-once", "exactly-once")
KILLS = 5
"""Kills of the one runtime, each a restart of Spark under both servers' loads."""
# Where a kill lands: in Spark's start-up (before the run commits anything), or
# in steady micro-batches, a random moment after the run's first commit.
STARTUP_SHARE = 0.3
KILL_IN_STARTUP = (1.0, 10.0)
KILL_AFTER_FIRST_COMMIT = (0.0, 8.0)
PAUSE = 0.04
"""Seconds between a writer's transactions, on average: twice the one-server tests', so
the two servers together write about what one writes there."""
CONVERGED_WITHIN = 240.0
"""Seconds from the loads' end for the last run to deliver everything: a guard against a
hang, not a bound on speed (a run caught up in 2-30 s alone on the machine)."""

Deployment = tuple[str, str]
"""(server, delivery)."""


@dataclass
class KilledRuns:
    """What the module's one run left: the runs, each server's load, each deployment's
    routes and its verdict once the loads ended."""

    seed: int
    runtime: RuntimeProcess
    databases: dict[str, FreshDatabase]
    workloads: dict[str, Workload]
    routes: dict[Deployment, Routes]
    verdicts: dict[Deployment, Convergence] = field(default_factory=dict)
    dead: dict[Deployment, dict[str, int]] = field(default_factory=dict)
    caught_up: float | None = None
    load_seconds: float = 0.0
    last_stop: int | None = None
    tail: str = ""


def _sleep_watching(runtime: RuntimeProcess, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not runtime.alive():
            raise AssertionError(
                f"run {runtime.current.number} exited by itself:\n{runtime.tail()}"
            )
        time.sleep(0.2)


def _databases(module_servers: Callable[[str], PrivateServices]) -> dict[str, FreshDatabase]:
    """Database ``chaos`` on each server, whose binlog holds only this module's changes."""
    found = {}
    for server in SERVERS:
        found[server] = FreshDatabase("chaos", module_servers(server).database(server))
        with found[server].connect(use_database=False).cursor() as cur:
            cur.execute("CREATE DATABASE chaos")
    return found


def _kill_again_and_again(run: KilledRuns) -> None:
    """Start the runtime and the loads, kill the runtime ``KILLS`` times, each time
    starting it again, and stop the loads a few seconds into the last run."""
    runtime, workloads = run.runtime, run.workloads
    rng = random.Random(f"kill schedule {run.seed}")
    runtime.start()
    for workload in workloads.values():
        workload.start()
    load_began = time.monotonic()
    try:
        _kill(runtime, rng)
    finally:
        for workload in workloads.values():
            workload.stop()
    run.load_seconds = time.monotonic() - load_began


def _kill(runtime: RuntimeProcess, rng: random.Random) -> None:
    for number in range(1, KILLS + 1):
        if rng.random() < STARTUP_SHARE:
            delay = rng.uniform(*KILL_IN_STARTUP)
        else:
            delay = runtime.wait_first_commit(FIRST_BATCH) + rng.uniform(*KILL_AFTER_FIRST_COMMIT)
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


def _wait_converged(run: KilledRuns, es: Elasticsearch, bootstrap: str) -> None:
    """Check every deployment until all converged; keep the last verdicts either way."""
    connections = {server: database.connect() for server, database in run.databases.items()}
    run.verdicts, run.caught_up = converge_all(
        lambda: {
            (server, delivery): check_convergence(
                run.workloads[server], routes, connections[server], bootstrap, es
            )
            for (server, delivery), routes in run.routes.items()
        },
        timeout=CONVERGED_WITHIN,
        alive=run.runtime.alive,
    )
    if run.caught_up is None:
        run.tail = run.runtime.tail()


@pytest.fixture(scope="module")
def killed_runs(
    module_servers: Callable[[str], PrivateServices],
    kafka_service: Any,
    elasticsearch_service: Any,
    module_chaos_seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[KilledRuns]:
    tmp_path = tmp_path_factory.mktemp("kill9")
    bootstrap = kafka_service.bootstrap_servers
    databases = _databases(module_servers)
    workloads = {
        server: Workload(database.connect, seed=module_chaos_seed + index, pause=PAUSE)
        for index, (server, database) in enumerate(databases.items())
    }
    for workload in workloads.values():
        workload.create_tables()
    routes = {
        (server, delivery): new_routes("chaos", workloads[server].tables)
        for server in SERVERS
        for delivery in DELIVERIES
    }
    folders = [
        write_function_folder(
            tmp_path / f"fn-{server}-{delivery}",
            routes[server, delivery],
            delivery,
            name=f"chaos-{server}-{delivery}",
            source=server,
        )
        for server, delivery in routes
    ]
    runtime = RuntimeProcess.for_runtime(
        sources={server: database.endpoint.dsn for server, database in databases.items()},
        functions=folders,
        kafka=bootstrap,
        elasticsearch=elasticsearch_service.url,
        checkpoint=tmp_path / "checkpoint",
        logs=tmp_path / "logs",
    )
    run = KilledRuns(module_chaos_seed, runtime, databases, workloads, routes)
    es = Elasticsearch(elasticsearch_service.url, request_timeout=60)
    try:
        _kill_again_and_again(run)
        _wait_converged(run, es, bootstrap)
        run.dead = {d: dead_letters(bootstrap, [r.dead_letters]) for d, r in routes.items()}
        if run.caught_up is not None:
            run.last_stop = runtime.stop()
            runtime.wait_gone(30)
        _print_figures(run)
        yield run
    finally:
        runtime.stop()
        es.close()
        for r in routes.values():
            delete_outputs(bootstrap, elasticsearch_service.url, r)
        for database in databases.values():
            database.close()


def _print_figures(run: KilledRuns) -> None:
    resumes = [r.resumed_after for r in run.runtime.runs[1:]]
    measured = sorted(r for r in resumes if r is not None)
    committed = sum(len(w.committed) for w in run.workloads.values())
    rate = committed / run.load_seconds
    print(
        f"kills: {KILLS}; changes committed: "
        + ", ".join(
            f"{server} {len(w.committed)} in {w.transactions} transactions "
            f"({w.rolled_back} rolled back)"
            for server, w in run.workloads.items()
        )
        + f" over {run.load_seconds:.0f}s ({rate:.0f} changes/s); "
        + ("not converged" if run.caught_up is None else f"caught up {run.caught_up:.1f}s")
        + " after the loads stopped"
    )
    for (server, delivery), verdict in run.verdicts.items():
        replayed = sum(v.replayed for v in verdict.kafka.values())
        print(
            f"{server} {delivery}: replayed messages {replayed}, "
            f"{replayed / KILLS:.0f} per kill; per table (changes committed / Kafka "
            "messages / rows): "
            + ", ".join(
                f"{name} {len(run.workloads[server].expected(name))}/{v.messages}/"
                f"{verdict.rows[name]}"
                for name, v in verdict.kafka.items()
            )
        )
    print(
        "restart to first committed batch: "
        + ", ".join("-" if r is None else f"{r:.1f}s" for r in resumes)
        + (f"; median {measured[len(measured) // 2]:.1f}s" if measured else "")
    )


CASES = {
    "mariadb": [("mariadb", "at-least-once")],
    "mysql": [("mysql", "at-least-once")],
    "exactly-once": [("mariadb", "exactly-once"), ("mysql", "exactly-once")],
}


@pytest.mark.parametrize("case", list(CASES))
def test_kill9_at_random_moments_loses_nothing_and_indices_equal_tables(
    case: str, killed_runs: KilledRuns
) -> None:
    run = killed_runs
    say_seed(run.seed)
    # Every kill hit a run that was still alive (a run that had died on its own
    # would show its own exit code), and one more run finished the job.
    assert [r.returncode for r in run.runtime.runs[:-1]] == [-signal.SIGKILL] * KILLS
    assert len(run.runtime.runs) == KILLS + 1
    for server, delivery in CASES[case]:
        workload = run.workloads[server]
        verdict = run.verdicts[server, delivery]
        assert len(workload.committed) > 1000, f"{server}: the load was too small to prove anything"
        assert verdict.ok, (
            f"{server} {delivery}: not converged {CONVERGED_WITHIN:.0f}s after the loads "
            f"stopped: {verdict.describe()} (chaos seed {run.seed}: replay with "
            f"DBUS_CHAOS_SEED={run.seed})\n{verdict.where_missing()}\n"
            f"runtime log tail:\n{run.tail}"
        )
        dead = run.dead[server, delivery]
        assert dead == {}, f"{server} {delivery}: dead letters, none expected: {dead}"
        if delivery == "exactly-once":
            replayed = sum(v.replayed for v in verdict.kafka.values())
            assert replayed == 0, (
                f"{server}: {replayed} change(s) seen twice by a read_committed consumer"
            )
    assert run.last_stop == 0, (
        f"the runtime's last run stopped with {run.last_stop}:\n{run.runtime.tail()}"
    )
