"""Each deployment at its own pace in a cluster, all real: a member's deployment whose
Elasticsearch is cut off (a proxy, stopped) is detached alone while the other's
transactional Kafka writes go on; `dbus fn pause` through ZooKeeper holds a
deployment's position, which moves with its source to the next runtime that owns
it; resumed there, it gets everything, in key order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from e2e_support import Scratch
from support import Proxy, kafka_count, route_code, wait_for
from test_deployment_pace import _documents, _kafka_keys, cut_while_writing

from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings
from dbus_spark.cluster.member import ClusterMember
from dbus_spark.interfaces.settings import member_config
from dbus_spark.spark.job import start_member, stop
from dbus_spark.state.checkpoint import last_config_path
from dbus_spark.state.progress import ProgressBook

# Exclusive (run apart from the parallel integration pass): bounds a healthy deployment's latency
# (detach after 2 s).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

CLUSTER = "pace"


@pytest.fixture
def dbus(
    scratch: Scratch, zk_root: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., str]:
    """`dbus ...` against the test's cluster; its output (exit 0 asserted)."""
    services = scratch.services
    monkeypatch.setenv("DBUS_ZOOKEEPER", f"{services.zookeeper.hosts}{zk_root}")
    monkeypatch.setenv("DBUS_CLUSTER", CLUSTER)
    monkeypatch.setenv("DBUS_BUNDLE_CACHE", str(scratch.tmp_path / "bundles"))
    monkeypatch.setenv("PACE_SHOP_DSN", services.mariadb.dsn)
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return str(result.output)

    return run


class Members:
    """Cluster members started in this process, each with its own checkpoint."""

    def __init__(self, scratch: Scratch, spark: Any, zk_root: str, elasticsearch: str) -> None:
        self._scratch, self._spark, self._es = scratch, spark, elasticsearch
        self._settings = ZooKeeperSettings(
            hosts=f"{scratch.services.zookeeper.hosts}{zk_root}", cluster=CLUSTER,
            session_timeout=6.0,
        )  # fmt: skip
        self.running: dict[str, tuple[ClusterMember, Any]] = {}

    def start(self, name: str) -> ClusterMember:
        base = member_config(
            kafka=self._scratch.services.kafka.bootstrap_servers, elasticsearch=self._es,
            checkpoint=str(self._scratch.tmp_path / f"checkpoint-{name}"), detach_after=2.0,
        )  # fmt: skip
        member = ClusterMember(self._settings, name, base, last_config_path(base.checkpoint_dir))
        self.running[name] = (member, start_member(member, spark=self._spark))
        return member

    def stop(self, name: str) -> None:
        member, query = self.running.pop(name)
        stop(query, self._spark)
        member.stop()

    def stop_all(self) -> None:
        for name in list(self.running):
            self.stop(name)


@pytest.fixture
def members(
    scratch: Scratch, spark: Any, zk_root: str, es_proxy: Proxy
) -> Iterator[Members]:
    started = Members(scratch, spark, zk_root, f"http://127.0.0.1:{es_proxy.port}")
    try:
        yield started
    finally:
        started.stop_all()


def _deploy(dbus: Callable[..., str], scratch: Scratch, name: str, table: str, route: str) -> None:
    # Its table is empty when it is deployed: no bootstrap, so each row comes once.
    code = route_code(table, route)
    folder = Path(scratch.function_folder(name, code, [table], initial="none"))
    manifest = folder / "dbus.toml"
    manifest.write_text(manifest.read_text() + 'sources = ["shop"]\n')
    dbus("fn", "deploy", str(folder))


def _pace_of(member: ClusterMember) -> dict[str, Any]:
    """What ``member`` last committed to ZooKeeper of shop's deployments not with its stream."""
    committed = member.coordinator.committed_position("shop")
    return dict(((committed.history or {}).get("pace") or {}) if committed else {})


def test_a_member_detaches_a_cut_off_deployment_alone_and_a_paused_one_moves_with_its_source(
    scratch: Scratch, dbus: Callable[..., str], members: Members, es_proxy: Proxy
) -> None:
    database = scratch.fresh_database
    with database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    table = f"{database.name}.orders"
    topic, index = scratch.kafka_topic, scratch.es_index
    kafka = scratch.services.kafka.bootstrap_servers
    dbus("cluster", "init")
    dbus("cluster", "source", "add", "shop", "--dsn-env", "PACE_SHOP_DSN", "--table",
         f"{database.name}.*")  # fmt: skip
    _deploy(dbus, scratch, "to_kafka", table, f"kafka://{topic}")
    _deploy(dbus, scratch, "to_es", table, f"es://{index}")
    first = members.start("rt-1")

    # Elasticsearch cut off: to_es alone is detached; to_kafka's rows go on.
    during = cut_while_writing(scratch, es_proxy, index)
    assert kafka_count(kafka, topic, expected=during, within=60) == during
    wait_for(lambda: "to_es" in _pace_of(first), 30, "to_es's state in ZooKeeper", every=0.5)
    pace = _pace_of(first)
    assert set(pace) == {"to_es"}, pace
    assert "Elasticsearch" in pace["to_es"]["reason"]
    assert "pace to_es: " in dbus("cluster", "status")
    assert "[shop: " in next(
        line for line in dbus("fn", "list").splitlines() if line.startswith("to_es ")
    )
    es_proxy.restore()
    wanted = set(range(1, during + 1))
    wait_for(lambda: _documents(scratch.services.elasticsearch.url, index) == wanted, 120,
             "the index to hold every row again", every=1.0)  # fmt: skip
    wait_for(lambda: not _pace_of(first), 60, "to_es to rejoin", every=0.5)

    # Paused through ZooKeeper: the position holds, and moves with the source.
    said = dbus("fn", "pause", "to_kafka")
    assert said.startswith("shop: to_kafka paused at "), said
    with database.connect() as conn, conn.cursor() as cur:
        for i in range(during + 1, during + 21):
            cur.execute("INSERT INTO orders VALUES (%s, %s)", (i, i))
        for i in range(during + 1, during + 21, 2):
            cur.execute("UPDATE orders SET total = total + 1 WHERE id = %s", (i,))
    wanted |= set(range(during + 1, during + 21))
    wait_for(lambda: _documents(scratch.services.elasticsearch.url, index) == wanted, 60,
             "to_es to go on while to_kafka is paused", every=0.5)  # fmt: skip
    wait_for(lambda: _pace_of(first).get("to_kafka", {}).get("state") == "paused", 30,
             "the pause committed with the position", every=0.5)  # fmt: skip
    assert kafka_count(kafka, topic, expected=during + 1, within=3) == during
    members.stop("rt-1")
    second = members.start("rt-2")
    wait_for(lambda: "shop" in second.coordinator.owned_sources(), 60, "rt-2 to own shop",
             every=0.5)  # fmt: skip
    book = ProgressBook(second.checkpoint_dir)
    wait_for(lambda: "to_kafka" in book.load().get("shop", {}), 60,
             "rt-2 to take the pause over", every=0.5)  # fmt: skip
    assert book.load()["shop"]["to_kafka"].paused
    time.sleep(3)  # batches on rt-2: still nothing for the paused one
    assert kafka_count(kafka, topic, expected=during + 1, within=3) == during

    said = dbus("fn", "resume", "to_kafka")
    assert said.startswith("shop: to_kafka resumed"), said
    got = _kafka_keys(kafka, topic, during + 30)
    assert len(got) == during + 30
    for key in range(during + 1, during + 21):
        kinds = [kind for k, kind in got if k == key]
        assert kinds == (["inserted", "updated"] if (key - during) % 2 else ["inserted"]), (
            key, kinds,
        )  # fmt: skip
    wait_for(lambda: not book.load().get("shop"), 60, "to_kafka to rejoin", every=0.5)
