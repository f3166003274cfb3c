"""The runtime follows its sources' failovers, on MariaDB (GTID states) and on MySQL
(GTID sets): one runtime reads two sources, a MariaDB pair and a MySQL pair; under
load on both, each primary is killed with SIGKILL in turn, its replica promoted, the
writes go on there; the runtime is killed -9 once after that and restarted on its
checkpoint. Afterwards every topic holds every committed change, one key's in commit
order, and every index equals its table. The one run (a module fixture) serves a test
per server.

Each source lists a private primary and its replica (``failover_support``). A writer
holds between two transactions while its primary is killed, once the replica has every
commit (``test_capture_failover`` says why).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import pymysql
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
from failover_support import Pair, private_pair
from support import wait_for

FLAVOURS = ("mariadb", "mysql")
CONVERGED_WITHIN = 240.0
"""Seconds from the loads' end for the last run to deliver everything: a guard against
a hang, not a bound on speed."""

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]


class Writer:
    """Runs the workload's transactions on the primary, then on the promoted replica."""

    def __init__(self, workload: Workload, pair: Pair) -> None:
        self.workload = workload
        self.connect = lambda: pair.primary_endpoint.connect("chaos", autocommit=False)
        self.pair = pair
        self.between = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="writer", daemon=True)

    def _run(self) -> None:
        try:
            conn, target = self.connect(), self.connect
            while not self.stop.is_set():
                with self.between:
                    if target is not self.connect:  # moved to the promoted replica
                        conn, target = self.connect(), self.connect
                    self.workload.step(conn)
                if self.stop.wait(0.01):
                    break
        except BaseException as exc:
            self.error = exc

    def move_to_replica(self) -> None:
        self.connect = lambda: self.pair.replica_endpoint.connect("chaos", autocommit=False)

    def wait_for(self, changes: int) -> None:
        wait_for(lambda: len(self.workload.committed) >= changes or self.error is not None,
                 120, f"{changes} committed changes")  # fmt: skip
        assert self.error is None, f"the writer failed: {self.error!r}"

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert self.error is None, f"the writer failed: {self.error!r}"


def _until_first_commit(runtime: RuntimeProcess, pairs: list[Pair]) -> None:
    """Write to a table of no deployment on each pair until the runtime, started from
    the latest positions, commits its first micro-batch."""
    for n in itertools.count(1):
        for pair in pairs:
            with pair.primary() as conn, conn.cursor() as cur:
                cur.execute("INSERT INTO shop.orders VALUES (%s, 'ready?')", (n,))
        if runtime.has_committed():
            return
        assert runtime.alive(), f"the runtime exited:\n{runtime.tail()}"
        assert n < 180, f"the runtime committed no batch in 3 minutes:\n{runtime.tail(400)}"
        time.sleep(1)


@dataclass
class Failovers:
    """What the module's one run left, per server: its load, its routes, the changes
    committed before its primary was killed, and its verdict once the loads ended."""

    seed: int
    workloads: dict[str, Workload] = field(default_factory=dict)
    routes: dict[str, Routes] = field(default_factory=dict)
    before: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, Convergence] = field(default_factory=dict)
    dead: dict[str, dict[str, int]] = field(default_factory=dict)
    log: str = ""
    caught_up: float | None = None
    last_stop: int | None = None
    tail: str = ""


def _fail_over(pair: Pair, writer: Writer) -> int:
    """Kill ``pair``'s primary between two of its writer's transactions, promote the
    replica and move the writer there; the changes committed before."""
    with writer.between:
        pair.caught_up()
        pair.kill_primary()
        before = len(writer.workload.committed)
        with pytest.raises(pymysql.err.OperationalError):
            pair.primary_endpoint.connect("chaos")
        pair.promote_replica()
        writer.move_to_replica()
    return before


def _wait_converged(run: Failovers, pairs: dict[str, Pair], bootstrap: str, es: Any,
                    runtime: RuntimeProcess) -> None:  # fmt: skip
    """Check both servers' deployments until both converged; keep the last verdicts
    either way."""
    replicas = {flavour: pair.replica_endpoint.connect("chaos") for flavour, pair in pairs.items()}
    run.verdicts, run.caught_up = converge_all(
        lambda: {
            flavour: check_convergence(
                run.workloads[flavour], run.routes[flavour], replicas[flavour], bootstrap, es
            )
            for flavour in pairs
        },
        timeout=CONVERGED_WITHIN,
        alive=runtime.alive,
    )
    if run.caught_up is None:
        run.tail = runtime.tail()


@pytest.fixture(scope="module")
def failovers(
    kafka_service: Any,
    elasticsearch_service: Any,
    module_chaos_seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Failovers]:
    tmp_path = tmp_path_factory.mktemp("failovers")
    bootstrap = kafka_service.bootstrap_servers
    run = Failovers(module_chaos_seed)
    with ExitStack() as stack:
        pairs = {f: stack.enter_context(private_pair(tmp_path / f"pair-{f}", f)) for f in FLAVOURS}
        folders = []
        for index, (flavour, pair) in enumerate(pairs.items()):
            with pair.primary() as conn, conn.cursor() as cur:
                cur.execute("CREATE DATABASE chaos")
            workload = Workload(
                lambda p=pair, **kw: p.primary_endpoint.connect("chaos", **kw),
                seed=module_chaos_seed + index, pause=0.01,
            )  # fmt: skip
            workload.create_tables()
            run.workloads[flavour] = workload
            run.routes[flavour] = routes = new_routes("chaos", workload.tables)
            stack.callback(delete_outputs, bootstrap, elasticsearch_service.url, routes)
            folders.append(write_function_folder(
                tmp_path / f"fn-{flavour}", routes, name=f"chaos-{flavour}", source=flavour
            ))  # fmt: skip
        runtime = RuntimeProcess.for_runtime(
            sources={flavour: pair.failover_dsn for flavour, pair in pairs.items()},
            functions=folders,
            kafka=bootstrap,
            elasticsearch=elasticsearch_service.url,
            checkpoint=tmp_path / "checkpoint",
            logs=tmp_path / "logs",
            start="latest",
        )
        stack.callback(runtime.stop)
        writers = {f: Writer(run.workloads[f], pair) for f, pair in pairs.items()}
        for writer in writers.values():
            stack.callback(writer.stop.set)
        es = stack.enter_context(Elasticsearch(elasticsearch_service.url, request_timeout=60))
        runtime.start()
        _until_first_commit(runtime, list(pairs.values()))  # from here on, every change is read
        for writer in writers.values():
            writer.thread.start()
        for writer in writers.values():
            writer.wait_for(400)
        for flavour, writer in writers.items():
            run.before[flavour] = _fail_over(pairs[flavour], writer)
        for flavour, writer in writers.items():
            writer.wait_for(run.before[flavour] + 400)
        runtime.kill9()  # and a restart on the checkpoint, positions after the moves
        runtime.start()
        for flavour, writer in writers.items():
            writer.wait_for(run.before[flavour] + 800)
        for writer in writers.values():
            writer.finish()
        _wait_converged(run, pairs, bootstrap, es, runtime)
        run.dead = {
            f: dead_letters(bootstrap, [routes.dead_letters]) for f, routes in run.routes.items()
        }
        run.log = runtime.log_text()
        if run.caught_up is not None:
            run.last_stop = runtime.stop()
        for flavour, verdict in run.verdicts.items():
            print(
                f"{flavour}: changes committed: {len(run.workloads[flavour].committed)} "
                f"({run.before[flavour]} before the failover); replayed messages: "
                f"{sum(v.replayed for v in verdict.kafka.values())}; rows per table: "
                f"{verdict.rows}"
            )
        print(
            "not converged" if run.caught_up is None
            else f"caught up {run.caught_up:.1f}s after the loads stopped"
        )  # fmt: skip
        yield run


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_runtime_follows_a_killed_primary_to_its_promoted_replica(
    flavour: str, failovers: Failovers
) -> None:
    run = failovers
    say_seed(run.seed)
    verdict = run.verdicts[flavour]
    assert verdict.ok, (
        f"{flavour}: not converged {CONVERGED_WITHIN:.0f}s after the loads stopped: "
        f"{verdict.describe()} (chaos seed {run.seed}: replay with DBUS_CHAOS_SEED="
        f"{run.seed})\n{verdict.where_missing()}\nruntime log tail:\n{run.tail}"
    )
    dead = run.dead[flavour]
    assert dead == {}, f"dead letters, none expected: {dead}"
    said = [line for line in run.log.splitlines() if f"source {flavour}: reading" in line]
    assert any("instead of" in line for line in said), "the runtime said where it reads now"
    assert run.last_stop == 0, f"the runtime's last run stopped with {run.last_stop}"
