"""A Kafka source beside a binlog source in one runtime, killed -9 under load.

One runtime reads a private MariaDB (source ``shop``) and Kafka topics (source
``dc2``). A binlog deployment publishes each table of ``shop`` to a topic of its
own: the other data centre's dbus topics. The mirror example of ``functions/``
reads those two topics as source ``dc2`` and writes one index per table. The
runtime is killed with SIGKILL mid-load, twice, and restarted on its checkpoint.
Afterwards each topic holds every committed change, one key's in commit order
(the binlog deployment lost nothing), and each mirrored index equals its table
(the Kafka-sourced deployment lost nothing), with no dead letter. A third
deployment, relay, writes the Kafka source's changes to Kafka again, to topics of
its own, which hold every change too. With ``delivery = "exactly-once"`` in the
binlog and relay deployments (the runtime's Kafka reads go in lanes too), a
``read_committed`` consumer also sees no change twice in any of those topics.
"""

from __future__ import annotations

import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from convergence import (
    TABLES,
    RuntimeProcess,
    Workload,
    check_topic,
    compare_index,
    index_documents,
    read_topic,
    table_documents,
    topic_exists,
)
from elasticsearch import Elasticsearch
from scratch import FreshDatabase
from support import delete_topics, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

MIRROR = Path(__file__).resolve().parents[2] / "functions" / "mirror"


def per_table_folder(folder: Path, name: str, source: str, prefix: str, delivery: str) -> Path:
    """Deployment ``name`` over ``source``: each ``shop`` table to the topic
    ``<prefix>.<table>`` (its dead letters to ``<prefix>.dead``), with the manifest's
    ``delivery``."""
    folder.mkdir(parents=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(f'''
        import dbus_fn as fn

        @fn.route(tables="shop.*")
        def per_table(event: fn.RowChange) -> str:
            return "kafka://{prefix}." + event.table
    '''))  # fmt: skip
    (folder / "dbus.toml").write_text(textwrap.dedent(f"""
        name = "{name}"
        version = "1.0.0"
        module = "{name}.py"
        sources = ["{source}"]
        tables = ["shop.*"]
        dead_letter_route = "kafka://{prefix}.dead"
        delivery = "{delivery}"
    """))  # fmt: skip
    return folder


def _clean(bootstrap: str, es: Elasticsearch, topics: list[str], indices: list[str]) -> None:
    delete_topics(bootstrap, topics)
    for index in indices:
        es.options(ignore_status=404).indices.delete(index=index)


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_kafka_source_and_a_binlog_source_in_one_runtime_lose_nothing_over_kill9(
    delivery: str,
    private_mariadb: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    chaos_seed: int,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    endpoint = private_mariadb.endpoints.mariadb
    database = FreshDatabase("shop", endpoint)
    with endpoint.connect().cursor() as cur:
        cur.execute("CREATE DATABASE shop")
    tables = TABLES[:2]  # two tables, two topics
    workload = Workload(database.connect, seed=chaos_seed, tables=tables, pause=0.01)
    workload.create_tables()
    prefix = f"dbus-dc2-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.{t.name}" for t in tables]
    # What the Kafka source's changes become in Kafka again (a name its pattern skips).
    relay = f"dbus-relay-{uuid.uuid4().hex[:8]}"
    relayed = [f"{relay}.{t.name}" for t in tables]
    indices = [f"dc2.shop.{t.name}" for t in tables]
    es = Elasticsearch(elasticsearch_service.url, request_timeout=60)
    _clean(bootstrap, es, [], indices)  # the mirror's index names are fixed
    dbus = Path(sys.executable).parent / "dbus"
    publish = per_table_folder(tmp_path / "publish", "publish", "shop", prefix, delivery)
    relayer = per_table_folder(tmp_path / "relay", "relay", "dc2", relay, delivery)
    runtime = RuntimeProcess(
        [str(dbus), "runtime", "start",
         "--source", f"shop={endpoint.dsn}",
         "--source", f"dc2=kafka://{bootstrap}/{prefix}.*",
         "--functions", str(publish), "--functions", str(MIRROR), "--functions", str(relayer),
         "--kafka", bootstrap, "--elasticsearch", elasticsearch_service.url,
         "--checkpoint", str(tmp_path / "checkpoint"), "--from", "earliest",
         "--master", "local[2]"],
        tmp_path / "logs", tmp_path / "checkpoint",
    )  # fmt: skip
    connection = database.connect()
    try:
        runtime.start()
        workload.start()
        for kill in (1, 2):
            runtime.wait_first_commit(180)
            wait_for(lambda n=kill: len(workload.committed) >= 300 * n, 120, "the load")
            runtime.kill9()
            runtime.start()
        time.sleep(3)
        workload.stop()

        twice: dict[str, int] = {}

        def converged() -> list[str]:
            problems = []
            for table, index in zip(tables, indices, strict=True):
                for topic in (f"{prefix}.{table.name}", f"{relay}.{table.name}"):
                    messages = (
                        read_topic(bootstrap, topic) if topic_exists(bootstrap, topic) else []
                    )
                    verdict = check_topic(messages, workload.expected(table.name), table.name)
                    twice[topic] = verdict.replayed
                    if not verdict.ok:
                        problems.append(f"{topic}: {verdict.describe()}")
                    elif delivery == "exactly-once" and verdict.replayed:
                        problems.append(f"{topic}: {verdict.replayed} change(s) seen twice")
                differences = compare_index(
                    table_documents(connection, "shop", table), index_documents(es, index)
                )
                if differences:
                    problems.append(f"{index}: {len(differences)} differences {differences[:3]}")
            return problems

        deadline = time.monotonic() + 240
        while (problems := converged()) and time.monotonic() < deadline:
            assert runtime.alive(), f"the runtime exited:\n{runtime.tail()}"
            time.sleep(3)
        assert not problems, f"{problems}\nruntime log tail:\n{runtime.tail()}"
        for dead in (f"{prefix}.dead", f"{relay}.dead", "mirror.dead-letter"):
            if topic_exists(bootstrap, dead):
                assert read_topic(bootstrap, dead) == [], f"dead letters in {dead}"
        code = runtime.stop()
        assert code == 0, f"the runtime's last run stopped with {code}:\n{runtime.tail()}"
    finally:
        workload.stop()
        runtime.stop()
        _clean(bootstrap, es, [*topics, *relayed, f"{prefix}.dead", f"{relay}.dead"], indices)
        es.close()
        database.close()
    print(
        f"changes committed: {len(workload.committed)}; runs: {len(runtime.runs)}; "
        f"per table: {', '.join(f'{t.name} {len(workload.expected(t.name))}' for t in tables)}; "
        f"{delivery}, seen twice: {twice}"
    )
