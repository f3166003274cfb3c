"""A runtime as a cluster member: it runs what `dbus fn deploy` registered, picks up a
deploy, a rollback and a delete without a restart, and commits positions to ZooKeeper."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support import kafka_consumer

from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings
from dbus_spark.cluster.member import ClusterMember
from dbus_spark.interfaces.settings import member_config
from dbus_spark.spark.job import start_member, stop
from dbus_spark.state.checkpoint import last_config_path

# Exclusive (run apart from the parallel integration pass): bounds how fast a cluster sees a deploy
# (10 s).
pytestmark = [pytest.mark.e2e, pytest.mark.exclusive]

CLUSTER = "e2e"
OBSERVED_WITHIN = 10.0


def _function(folder: Path, database: str, topic: str, version: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "items.py").write_text(
        textwrap.dedent(
            f'''
            import dbus_fn as fn

            @fn.projection(tables="{database}.items")
            def tag(event: fn.RowChange) -> dict:
                return {{**event.row, "release": "{version}"}}

            @fn.route(tables="{database}.items")
            def out(event: fn.RowChange) -> str:
                return "kafka://{topic}"
            '''
        )
    )
    (folder / "dbus.toml").write_text(
        f'name = "items"\nversion = "{version}"\nmodule = "items.py"\n'
        f'tables = ["{database}.items"]\nsources = ["shop"]\n'
    )
    return folder


@pytest.fixture
def dbus(
    services: Any, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    monkeypatch.setenv("DBUS_ZOOKEEPER", f"{services.zookeeper.hosts}{zk_root}")
    monkeypatch.setenv("DBUS_CLUSTER", CLUSTER)
    monkeypatch.setenv("DBUS_BUNDLE_CACHE", str(tmp_path / "bundles"))
    monkeypatch.setenv("E2E_SHOP_DSN", services.mariadb.dsn)
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    return run


@pytest.fixture
def member(
    spark: Any, services: Any, zk_root: str, fresh_database: Any, dbus: Any, tmp_path: Path
) -> Iterator[ClusterMember]:
    with fresh_database.connect().cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))")
    dbus("cluster", "init")
    dbus("cluster", "source", "add", "shop", "--dsn-env", "E2E_SHOP_DSN",
         "--table", f"{fresh_database.name}.*")  # fmt: skip
    settings = ZooKeeperSettings(
        hosts=f"{services.zookeeper.hosts}{zk_root}", cluster=CLUSTER, session_timeout=6.0
    )
    base = member_config(
        kafka=services.kafka.bootstrap_servers,
        elasticsearch=services.elasticsearch.url,
        checkpoint=str(tmp_path / "checkpoint"),
    )
    joined = ClusterMember(settings, "rt-1", base, last_config_path(base.checkpoint_dir))
    query = start_member(joined, spark=spark)
    try:
        yield joined
    finally:
        stop(query, spark)
        joined.stop()


class _Topic:
    """Reads one topic as the test goes, keyed by row id."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = kafka_consumer(
            bootstrap, {"auto.offset.reset": "earliest"}, group=topic
        )
        self._consumer.subscribe([topic])
        self.releases: dict[int, str] = {}

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.2)
            if msg is not None and not msg.error():
                after = json.loads(msg.value())["after"]
                self.releases[after["id"]] = after["release"]

    def close(self) -> None:
        self._consumer.close()


def _until_release(
    topic: _Topic, cursor: Any, next_id: Callable[[], int], release: str | None
) -> float:
    """Insert a row every 0.3 s until a row inserted from now on arrives as
    ``release`` (None: until such a row does not arrive at all); return the seconds."""
    began = time.monotonic()
    first = None
    while time.monotonic() - began < 60:
        row = next_id()
        first = row if first is None else first
        cursor.execute("INSERT INTO items VALUES (%s, 'x')", (row,))
        topic.drain(0.3)
        fresh = {topic.releases[r] for r in range(first, row + 1) if r in topic.releases}
        if release is not None and release in fresh:
            return time.monotonic() - began
        if release is None:
            topic.drain(3.0)
            if row not in topic.releases:
                return time.monotonic() - began
    raise AssertionError(f"release {release} never showed up")


def test_deploy_rollback_and_delete_reach_a_running_runtime(
    member: ClusterMember, dbus: Any, fresh_database: Any, kafka_topic: str, services: Any,
    tmp_path: Path,
) -> None:  # fmt: skip
    database = fresh_database.name
    dbus("fn", "deploy", str(_function(tmp_path / "v1", database, kafka_topic, "1.0.0")))
    topic = _Topic(services.kafka.bootstrap_servers, kafka_topic)
    cursor = fresh_database.connect().cursor()
    counter = iter(range(1, 10_000))
    try:
        first = _until_release(topic, cursor, lambda: next(counter), "1.0.0")
        dbus("fn", "deploy", str(_function(tmp_path / "v2", database, kafka_topic, "2.0.0")))
        deployed = _until_release(topic, cursor, lambda: next(counter), "2.0.0")
        dbus("fn", "rollback", "items", "--to", "1.0.0")
        rolled_back = _until_release(topic, cursor, lambda: next(counter), "1.0.0")
        dbus("fn", "delete", "items")
        deleted = _until_release(topic, cursor, lambda: next(counter), None)
    finally:
        topic.close()
    print(f"first {first:.1f}s, deploy {deployed:.1f}s, rollback {rolled_back:.1f}s, "
          f"delete {deleted:.1f}s")  # fmt: skip
    assert deployed < OBSERVED_WITHIN
    assert rolled_back < OBSERVED_WITHIN
    assert deleted < OBSERVED_WITHIN
    committed = member.coordinator.committed_position("shop")
    assert committed is not None
    assert committed.runtime == "rt-1"
