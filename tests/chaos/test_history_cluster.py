"""A deployment bootstrapped in a cluster: `dbus fn deploy` starts it, its progress is
committed to ZooKeeper with the source's position, and when the member reading it
is SIGKILLed the member that gains the source goes on from the last committed
chunk; the sinks end equal to the table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from convergence import RuntimeProcess
from history_support import (
    Churn,
    TopicState,
    catalog_folder,
    chunk_reads,
    create_products,
    wait_sinks_equal_table,
)
from support import FIRST_BATCH, wait_for

from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings, close, cluster_status, connect

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

CLUSTER = "history"
DSN_VARIABLE = "DBUS_HISTORY_DSN"
ROWS = 12_000
CHUNK_ROWS = 600
SESSION = 4.0
CHUNKS_PER_BATCH = 1  # local[1]: one chunk task per batch


def _dbus(settings: ZooKeeperSettings, *args: str) -> str:
    env = {"DBUS_ZOOKEEPER": settings.hosts, "DBUS_CLUSTER": settings.cluster}
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_bootstrap_moves_with_its_source_and_ends_equal(
    fresh_database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    private_zookeeper: tuple[Any, str],
    kafka_topic: str,
    es_index: str,
    tmp_path: Path,
) -> None:
    _, hosts = private_zookeeper
    settings = ZooKeeperSettings(hosts=hosts, cluster=CLUSTER)
    connection = fresh_database.connect()
    create_products(connection, ROWS)
    table = f"{fresh_database.name}.products"
    folder = catalog_folder(tmp_path / "catalog", table, kafka_topic, es_index)
    _dbus(settings, "cluster", "init")
    _dbus(settings, "cluster", "source", "add", "shop", "--dsn-env", DSN_VARIABLE,
          "--table", table)  # fmt: skip
    members = {
        runtime_id: RuntimeProcess.for_member(
            runtime_id=runtime_id,
            cluster=CLUSTER,
            zookeeper=hosts,
            session_timeout=SESSION,
            kafka=kafka_service.bootstrap_servers,
            elasticsearch=elasticsearch_service.url,
            folder=tmp_path / runtime_id,
            env={DSN_VARIABLE: fresh_database.endpoint.dsn},
            start="latest",
            options=["--chunk-rows", str(CHUNK_ROWS)],
        )
        for runtime_id in ("rt-1", "rt-2")
    }
    client = connect(settings)
    task_name = f"catalog:{table}"

    def progress() -> tuple[int, bool, str]:
        """Chunks committed to ZooKeeper, whether the task ended, and its status line."""
        status = cluster_status(client, settings)
        source = next((s for s in status.sources if s.name == "shop"), None)
        text = source.history.get(task_name, "") if source is not None else ""
        chunks = int(text.split(" in ")[1].split()[0]) if " in " in text else 0
        return chunks, "done" in text, text

    churn = Churn(fresh_database.connect(), ROWS, CHUNK_ROWS)
    topic = TopicState(kafka_service.bootstrap_servers, kafka_topic)
    first, second = members["rt-1"], members["rt-2"]
    try:
        churn.start()
        first.start()
        # Deployed to a running member, which reads the table for it.
        first.wait_first_commit(FIRST_BATCH)
        _dbus(settings, "fn", "deploy", str(folder))
        wait_for(lambda: progress()[0] >= 4, 180, "rt-1 to commit 4 chunks", every=0.3,
                 alive=first.alive)  # fmt: skip
        status_line = _dbus(settings, "cluster", "status")
        first.kill9()
        committed_at_kill, ended, _ = progress()
        assert not ended, "the bootstrap ended before the kill"
        second.start()
        wait_for(lambda: progress()[1], 300, "rt-2 to end the bootstrap", every=0.5,
                 alive=second.alive)  # fmt: skip
        total, _, final = progress()
        second_reads = chunk_reads(second)
        # A backfill asked of the cluster reaches the owner through ZooKeeper; its
        # progress is followed in what the owner commits.
        backfill = _dbus(settings, "fn", "backfill", "catalog", "--table", table)
        time.sleep(2)
        churn.stopped.set()
        churn.join()
        wait_sinks_equal_table(connection, topic, elasticsearch_service.url, es_index,
                               second.alive)  # fmt: skip
        assert second.stop() == 0, second.tail()
    finally:
        churn.stopped.set()
        topic.close()
        for member in members.values():
            member.stop()
        close(client)
    first_reads = chunk_reads(first)
    print(f"status while rt-1 read:\n{status_line}")
    print(f"chunks {total}: rt-1 read {first_reads} ({committed_at_kill} committed at the "
          f"kill), rt-2 read {second_reads}; {final}")  # fmt: skip
    print(backfill)
    assert f"history {task_name}: bootstrap reading" in status_line
    assert "backfill of catalog: started 1 task(s) on shop" in backfill
    assert f"{task_name}: done, " in backfill
    assert final.startswith("bootstrap done")
    # rt-2 went on from what rt-1 committed: it read none of those chunks again.
    assert committed_at_kill >= 4
    assert total - committed_at_kill <= second_reads <= total - committed_at_kill + 1
    assert first_reads <= committed_at_kill + 2 * CHUNKS_PER_BATCH
