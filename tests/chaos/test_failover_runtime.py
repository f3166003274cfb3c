"""The runtime follows its source's failover, on MariaDB (GTID states) and on MySQL
(GTID sets): the primary is killed with SIGKILL under load, the replica promoted,
the writes go on there; the runtime is killed -9 once after that and restarted on
its checkpoint. Afterwards every topic holds every
committed change, one key's in commit order, and every index equals its table.

The source lists the private primary and its replica (``failover_support``). The
writer holds between two transactions while the primary is killed, once the
replica has every commit (``test_capture_failover`` says why).
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import pytest
from convergence import (
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
from failover_support import Pair, private_pair
from support import wait_for

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


def _until_first_commit(runtime: RuntimeProcess, pair: Pair) -> None:
    """Write to a table of no deployment until the runtime, started from the latest
    position, commits its first micro-batch."""
    for n in itertools.count(1):
        with pair.primary() as conn, conn.cursor() as cur:
            cur.execute("INSERT INTO shop.orders VALUES (%s, 'ready?')", (n,))
        if runtime.has_committed():
            return
        assert runtime.alive(), f"the runtime exited:\n{runtime.tail()}"
        assert n < 180, f"the runtime committed no batch in 3 minutes:\n{runtime.tail(400)}"
        time.sleep(1)


@pytest.mark.parametrize("flavour", ["mariadb", "mysql"])
def test_the_runtime_follows_a_killed_primary_to_its_promoted_replica(
    flavour: str, kafka_service: Any, elasticsearch_service: Any, chaos_seed: int, tmp_path: Path
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    with private_pair(tmp_path / "pair", flavour) as pair:
        with pair.primary() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE chaos")
        workload = Workload(lambda **kw: pair.primary_endpoint.connect("chaos", **kw),
                            seed=chaos_seed, pause=0.01)  # fmt: skip
        workload.create_tables()
        routes = new_routes("chaos", workload.tables)
        runtime = RuntimeProcess.for_runtime(
            source_dsn=pair.failover_dsn,
            functions=write_function_folder(tmp_path / "fn", routes),
            kafka=bootstrap,
            elasticsearch=elasticsearch_service.url,
            checkpoint=tmp_path / "checkpoint",
            logs=tmp_path / "logs",
            start="latest",
        )
        writer = Writer(workload, pair)
        es = Elasticsearch(elasticsearch_service.url, request_timeout=60)
        try:
            runtime.start()
            _until_first_commit(runtime, pair)  # from here on, every change is read
            writer.thread.start()
            writer.wait_for(400)
            with writer.between:
                pair.caught_up()
                pair.kill_primary()
                before = len(workload.committed)
                with pytest.raises(pymysql.err.OperationalError):
                    pair.primary_endpoint.connect("chaos")
                pair.promote_replica()
                writer.move_to_replica()
            writer.wait_for(before + 400)
            runtime.kill9()  # and a restart on the checkpoint, positions after the move
            runtime.start()
            writer.wait_for(before + 800)
            writer.finish()
            replica = pair.replica_endpoint.connect("chaos")
            verdict, caught_up = wait_converged(
                lambda: check_convergence(workload, routes, replica, bootstrap, es),
                timeout=240,
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
            log = runtime.log_text()
            assert "instead of" in log, "the runtime said where it reads now"
            code = runtime.stop()
            assert code == 0, f"the runtime's last run stopped with {code}:\n{runtime.tail()}"
        finally:
            writer.stop.set()
            runtime.stop()
            es.close()
            delete_outputs(bootstrap, elasticsearch_service.url, routes)
    print(
        f"changes committed: {len(workload.committed)} ({before} before the failover); "
        f"replayed messages: {sum(v.replayed for v in verdict.kafka.values())}; "
        f"caught up {caught_up:.1f}s after the load stopped; "
        f"rows per table: {verdict.rows}"
    )
