"""Fixtures for tests that talk to the real local services.

Session fixtures call the idempotent ``dbus services up`` for just the service a
test needs, so ``pytest tests/...`` works on its own: the first session on a
machine starts (and if need be installs) the service, later ones find it
running. Each test gets its own uuid-named database, topic, index or ZooKeeper
chroot, removed afterwards, so tests never see each other's data.
"""

from __future__ import annotations

import os
import socket
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from scratch import (
    FreshDatabase,
    scratch_database,
    scratch_index,
    scratch_topic,
    scratch_zk_root,
)

from dbus_deploy.services import (
    ElasticsearchEndpoint,
    Endpoints,
    KafkaEndpoint,
    MariaDBEndpoint,
    ServicesConfig,
    ZooKeeperEndpoint,
    down,
    endpoints,
    load_config,
    up,
)
from dbus_fn.errors import DbusError


def _ensure(*names: str) -> Endpoints:
    try:
        up(list(names))
    except DbusError as exc:
        pytest.fail(f"local services unavailable: {exc}", pytrace=False)
    return endpoints()


@pytest.fixture(scope="session")
def mariadb_service() -> MariaDBEndpoint:
    """MariaDB with a ROW binlog (``binlog_row_metadata=FULL``, GTIDs), running."""
    return _ensure("mariadb").mariadb


@pytest.fixture(scope="session")
def zookeeper_service() -> ZooKeeperEndpoint:
    return _ensure("zookeeper").zookeeper


@pytest.fixture(scope="session")
def kafka_service() -> KafkaEndpoint:
    return _ensure("kafka").kafka


@pytest.fixture(scope="session")
def elasticsearch_service() -> ElasticsearchEndpoint:
    return _ensure("elasticsearch").elasticsearch


@pytest.fixture(scope="session")
def services() -> Endpoints:
    """Every local service, running; their endpoints."""
    return _ensure("mariadb", "zookeeper", "kafka", "elasticsearch")


@pytest.fixture
def fresh_database(mariadb_service: MariaDBEndpoint) -> Iterator[FreshDatabase]:
    """A new uuid-named MariaDB database, dropped after the test."""
    with scratch_database(mariadb_service) as database:
        yield database


@pytest.fixture
def kafka_topic(kafka_service: KafkaEndpoint) -> Iterator[str]:
    """A new uuid-named Kafka topic (3 partitions), deleted after the test."""
    with scratch_topic(kafka_service) as topic:
        yield topic


@pytest.fixture
def es_index(elasticsearch_service: ElasticsearchEndpoint) -> Iterator[str]:
    """A fresh uuid-named index name (not created), deleted after the test."""
    with scratch_index(elasticsearch_service) as index:
        yield index


@pytest.fixture
def zk_root(zookeeper_service: ZooKeeperEndpoint) -> Iterator[str]:
    """A fresh uuid-named chroot path (created), deleted recursively after the test."""
    with scratch_zk_root(zookeeper_service) as root:
        yield root


@pytest.fixture
def private_zookeeper(tmp_path: Path) -> Iterator[tuple[ServicesConfig, str]]:
    """A ZooKeeper of the test's own (its own DBUS_HOME, a free port) that it may stop
    and start again: ``(config, hosts)``; ``down(["zookeeper"], config=config)``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env = {**os.environ, "DBUS_HOME": str(tmp_path / "zookeeper"), "DBUS_ZOOKEEPER_PORT": str(port)}
    config = load_config(env)
    try:
        up(["zookeeper"], config=config)
    except DbusError as exc:
        pytest.fail(f"a private ZooKeeper did not start: {exc}", pytrace=False)
    try:
        yield config, f"127.0.0.1:{port}"
    finally:
        down(config=config)


FunctionFolder = Callable[..., Path]


@pytest.fixture
def function_folder(tmp_path: Path) -> FunctionFolder:
    """Write a function folder as an author would: ``<name>.py`` and its ``dbus.toml``.

    ``function_folder(name, code, tables, dead_letter=None, version="1.0.0")`` returns
    the folder; ``code`` is dedented.
    """

    def write(
        name: str,
        code: str,
        tables: Sequence[str],
        *,
        dead_letter: str | None = None,
        version: str = "1.0.0",
    ) -> Path:
        folder = tmp_path / f"fn-{name}"
        folder.mkdir()
        (folder / f"{name}.py").write_text(textwrap.dedent(code))
        manifest = [
            f'name = "{name}"',
            f'version = "{version}"',
            f'module = "{name}.py"',
            "tables = [" + ", ".join(f'"{table}"' for table in tables) + "]",
        ]
        if dead_letter is not None:
            manifest.append(f'dead_letter_route = "{dead_letter}"')
        (folder / "dbus.toml").write_text("\n".join(manifest) + "\n")
        return folder

    return write
