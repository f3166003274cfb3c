"""Fixtures for coordination tests: a cluster in a fresh ZooKeeper chroot each.

The ZooKeeper address carries the test's chroot (``127.0.0.1:2181/dbus_test_...``),
so the cluster tree (``/dbus/<cluster>`` inside it) is the test's alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from coordination_support import SESSION
from kazoo.client import KazooClient

from dbus_deploy.services import ZooKeeperEndpoint
from dbus_fn.cli import cli
from dbus_fn.coordination import Coordinator, ZooKeeperSettings, close, connect, ensure_cluster

CLUSTER = "test"


@pytest.fixture
def zk_hosts(zookeeper_service: ZooKeeperEndpoint, zk_root: str) -> str:
    return f"{zookeeper_service.hosts}{zk_root}"


@pytest.fixture
def settings(zk_hosts: str) -> ZooKeeperSettings:
    return ZooKeeperSettings(hosts=zk_hosts, cluster=CLUSTER, session_timeout=6.0)


@pytest.fixture
def client(settings: ZooKeeperSettings) -> Iterator[KazooClient]:
    made = connect(settings)
    yield made
    close(made)


@pytest.fixture
def cluster(client: KazooClient, settings: ZooKeeperSettings) -> ZooKeeperSettings:
    """The test's cluster, created."""
    ensure_cluster(client, settings)
    return settings


@pytest.fixture
def runtimes(cluster: ZooKeeperSettings) -> Iterator[Callable[..., Coordinator]]:
    """Start Coordinators in the test's cluster (session timeout ``SESSION``); all
    are stopped after the test."""
    made: list[Coordinator] = []

    def start(runtime_id: str, capacity: float = 1.0, handoff: float = 0.0) -> Coordinator:
        coordinator = Coordinator(
            cluster.hosts,
            cluster.cluster,
            runtime_id,
            capacity,
            session_timeout=SESSION,
            handoff=handoff,
        )
        made.append(coordinator.start())
        return coordinator

    yield start
    for coordinator in made:
        coordinator.stop()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bundles"
    monkeypatch.setenv("DBUS_BUNDLE_CACHE", str(folder))
    return folder


@pytest.fixture
def dbus(zk_hosts: str, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> Callable[..., object]:
    """Run ``dbus ...`` against the test's cluster; returns click's Result."""
    monkeypatch.setenv("DBUS_ZOOKEEPER", zk_hosts)
    monkeypatch.setenv("DBUS_CLUSTER", CLUSTER)
    monkeypatch.delenv("DBUS_ZK_AUTH", raising=False)
    runner = CliRunner()

    def run(*args: str) -> object:
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return run
