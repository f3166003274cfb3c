"""A deployment's own sinks, all real: a manifest's ``[sinks.kafka]`` sends that
deployment's events to its own Kafka cluster (a second broker on other ports),
with a client setting taken from the runtime's environment; the other deployment
goes on writing to the runtime's Kafka. The second cluster stopped detaches its
deployment alone, and once it is back that deployment catches up. With both
deployments exactly once, the second cluster stopped for a minute under load: each
cluster ends with every change once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from support import es_count, kafka_count, route_code, wait_for

from dbus_deploy.services import down, up
from dbus_spark.state.progress import ProgressBook

# Exclusive (run apart from the parallel integration pass): bounds a healthy deployment's latency
# (detach after 2 s).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]


def _folder(
    scratch: Scratch, name: str, table: str, topic: str, sinks: str = "", delivery: str = ""
) -> Path:
    folder = Path(scratch.function_folder(name, route_code(table, f"kafka://{topic}"), [table]))
    manifest = folder / "dbus.toml"
    if delivery:  # a top-level key: before any [sinks.*] table
        text = manifest.read_text()
        manifest.write_text(f'delivery = "{delivery}"\n' + text)
    if sinks:
        manifest.write_text(manifest.read_text() + sinks)
    return folder


def _topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


def _insert(scratch: Scratch, ids: range) -> None:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, %s)", [(i, i * 3) for i in ids])


@pytest.mark.parametrize(
    ("delivery", "outage"), [("at-least-once", 0.0), ("exactly-once", 60.0)],
    ids=["at-least-once", "exactly-once"],
)
def test_two_deployments_reach_their_own_kafka_clusters_and_one_cluster_down_detaches_one(
    scratch: Scratch, private_services: Any, monkeypatch: pytest.MonkeyPatch, delivery: str,
    outage: float,
) -> None:  # fmt: skip
    """``outage``: how long the second cluster stays down, rows written meanwhile."""
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    table = f"{scratch.fresh_database.name}.orders"
    second = private_services("kafka")
    theirs_kafka = second.endpoints.kafka.bootstrap_servers
    ours_kafka = scratch.services.kafka.bootstrap_servers
    assert theirs_kafka != ours_kafka
    # A client setting from the runtime's environment, as a credential would come.
    monkeypatch.setenv("THEIRS_CLIENT_ID", "theirs-producer")
    ours_topic, theirs_topic = scratch.kafka_topic, f"{scratch.kafka_topic}.theirs"
    ours = _folder(scratch, "ours", table, ours_topic, delivery=delivery)
    theirs = _folder(
        scratch, "theirs", table, theirs_topic,
        f'\n[sinks.kafka]\nbootstrap_servers = "{theirs_kafka}"\n'
        'client_id_env = "THEIRS_CLIENT_ID"\nlinger_ms = 2\n',
        delivery=delivery,
    )  # fmt: skip
    checkpoint = str(scratch.tmp_path / "checkpoint")
    runtime = spawn_cli_runtime(
        scratch, ours, checkpoint, "--functions", str(theirs), "--detach-after", "2"
    )
    alive = lambda: runtime.poll() is None  # noqa: E731
    book = ProgressBook(checkpoint)
    try:
        from support import runtime_api

        runtime_api(Path(checkpoint))
        _insert(scratch, range(1, 21))
        assert kafka_count(ours_kafka, ours_topic, expected=20, within=120) == 20
        assert kafka_count(theirs_kafka, theirs_topic, expected=20, within=120) == 20
        # Each cluster holds its own deployment's topic, not the other's.
        assert theirs_topic not in _topics(ours_kafka)
        assert ours_topic not in _topics(theirs_kafka)

        down(["kafka"], config=second.config)
        stopped = time.monotonic()
        for first in range(21, 61, 5):  # the load goes on while the cluster is away
            _insert(scratch, range(first, first + 5))
            time.sleep(outage / 8)
        assert kafka_count(ours_kafka, ours_topic, expected=60, within=60) == 60
        wait_for(lambda: "theirs" in book.load().get("shop", {}), 60, "theirs detached",
                 every=0.5, alive=alive)  # fmt: skip
        behind = book.load()["shop"]
        assert set(behind) == {"theirs"}, behind
        assert theirs_kafka in behind["theirs"].reason, behind["theirs"].reason

        time.sleep(max(0.0, outage - (time.monotonic() - stopped)))
        up(["kafka"], config=second.config)
        assert kafka_count(theirs_kafka, theirs_topic, expected=60, within=120) >= 60
        wait_for(lambda: not book.load().get("shop"), 90, "theirs to rejoin", every=0.5,
                 alive=alive)  # fmt: skip
        _insert(scratch, range(61, 71))
        assert kafka_count(ours_kafka, ours_topic, expected=70, within=60) == 70
        assert kafka_count(theirs_kafka, theirs_topic, expected=70, within=60) >= 70
        time.sleep(1)
        assert alive()
        if delivery == "exactly-once":
            # Every change once in each cluster, read to the end (read_committed).
            assert kafka_count(ours_kafka, ours_topic, within=10) == 70
            assert kafka_count(theirs_kafka, theirs_topic, within=10) == 70
    finally:
        stop_cli_runtime(scratch, runtime)


def test_a_deployment_s_own_elasticsearch_cut_off_detaches_it_and_it_catches_up(
    scratch: Scratch, es_proxy: Any
) -> None:
    """``theirs`` names its own Elasticsearch (a proxy in front of a real node, another
    address than the runtime's): cutting it detaches theirs alone, naming that address."""
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    table, index = f"{scratch.fresh_database.name}.orders", scratch.es_index
    own = f"http://127.0.0.1:{es_proxy.port}"
    ours = _folder(scratch, "ours", table, scratch.kafka_topic)
    theirs = Path(scratch.function_folder("theirs", route_code(table, f"es://{index}"), [table]))
    manifest = theirs / "dbus.toml"
    manifest.write_text(
        manifest.read_text()
        + f'dead_letter_route = "es://{index}-dead"\n[sinks.es]\nhosts = "{own}"\n'
        + "request_timeout = 30\n"
    )
    checkpoint = str(scratch.tmp_path / "checkpoint")
    runtime = spawn_cli_runtime(
        scratch, ours, checkpoint, "--functions", str(theirs), "--detach-after", "2"
    )
    alive = lambda: runtime.poll() is None  # noqa: E731
    es, kafka = scratch.services.elasticsearch.url, scratch.services.kafka.bootstrap_servers
    book = ProgressBook(checkpoint)
    try:
        from support import runtime_api

        runtime_api(Path(checkpoint))
        _insert(scratch, range(1, 11))
        wait_for(lambda: es_count(es, index) == 10, 120, "theirs' first rows", every=0.5,
                 alive=alive)  # fmt: skip
        es_proxy.cut()
        _insert(scratch, range(11, 41))
        assert kafka_count(kafka, scratch.kafka_topic, expected=40, within=60) == 40
        wait_for(lambda: "theirs" in book.load().get("shop", {}), 60, "theirs detached",
                 every=0.5, alive=alive)  # fmt: skip
        assert own in book.load()["shop"]["theirs"].reason
        es_proxy.restore()
        wait_for(lambda: es_count(es, index) == 40, 120, "theirs caught up", every=1.0,
                 alive=alive)  # fmt: skip
    finally:
        stop_cli_runtime(scratch, runtime)
