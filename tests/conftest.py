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
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


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


@dataclass
class FreshDatabase:
    """A database that exists for one test, and how to connect to it."""

    name: str
    endpoint: MariaDBEndpoint
    _opened: list[Any] = field(default_factory=list, repr=False)

    def connect(self, *, use_database: bool = True, **options: Any) -> Any:
        """A new PyMySQL connection as the ``dbus`` user (autocommit unless told otherwise).

        Connections are closed when the test ends.
        """
        connection = self.endpoint.connect(self.name if use_database else None, **options)
        self._opened.append(connection)
        return connection


@pytest.fixture
def fresh_database(mariadb_service: MariaDBEndpoint) -> Iterator[FreshDatabase]:
    """A new uuid-named MariaDB database, dropped after the test."""
    database = FreshDatabase(name=_unique("dbus_test"), endpoint=mariadb_service)
    admin = database.connect(use_database=False)
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{database.name}`")
    try:
        yield database
    finally:
        for connection in database._opened[1:]:
            if connection.open:
                connection.close()
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database.name}`")
        admin.close()


@pytest.fixture
def kafka_topic(kafka_service: KafkaEndpoint) -> Iterator[str]:
    """A new uuid-named Kafka topic (3 partitions), deleted after the test."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka_service.bootstrap_servers})
    topic = _unique("dbus-test").replace("_", "-")
    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(timeout=30)
    try:
        yield topic
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


@pytest.fixture
def es_index(elasticsearch_service: ElasticsearchEndpoint) -> Iterator[str]:
    """A fresh uuid-named index name (not created), deleted after the test."""
    from elasticsearch import Elasticsearch

    index = _unique("dbus-test").replace("_", "-")
    yield index
    with Elasticsearch(elasticsearch_service.url) as client:
        client.options(ignore_status=404).indices.delete(index=index)


@pytest.fixture
def zk_root(zookeeper_service: ZooKeeperEndpoint) -> Iterator[str]:
    """A fresh uuid-named chroot path (created), deleted recursively after the test."""
    from kazoo.client import KazooClient

    root = "/" + _unique("dbus_test")
    client = KazooClient(hosts=zookeeper_service.hosts)
    client.start(timeout=30)
    try:
        client.ensure_path(root)
        yield root
    finally:
        client.delete(root, recursive=True)
        client.stop()
        client.close()


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
