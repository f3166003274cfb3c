"""Each test's own scratch space in the real services: a database, a Kafka topic, an
Elasticsearch index, a ZooKeeper chroot, uuid-named and removed when the block ends.

The fixtures of ``tests/conftest.py`` wrap these; ``tests/deploy`` checks them here.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dbus_deploy.services import (
    ElasticsearchEndpoint,
    KafkaEndpoint,
    MariaDBEndpoint,
    ZooKeeperEndpoint,
)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


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

    def close(self) -> None:
        """Close every connection this handed out that is still open."""
        for connection in self._opened:
            if connection.open:
                with contextlib.suppress(Exception):  # one the server dropped
                    connection.close()


@contextmanager
def scratch_database(endpoint: MariaDBEndpoint) -> Iterator[FreshDatabase]:
    """A new uuid-named MariaDB database, dropped (with its connections closed) after."""
    database = FreshDatabase(name=unique("dbus_test"), endpoint=endpoint)
    _admin(endpoint, f"CREATE DATABASE `{database.name}`")
    try:
        yield database
    finally:
        database.close()  # first: an open transaction would hold up the DROP
        _admin(endpoint, f"DROP DATABASE IF EXISTS `{database.name}`")


def _admin(endpoint: MariaDBEndpoint, statement: str) -> None:
    """Run one statement on a connection of its own: a test may restart the server."""
    connection = endpoint.connect(None)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement)
    finally:
        connection.close()


PARTITIONS = 3
"""A scratch topic's partitions."""


@contextmanager
def scratch_topic(endpoint: KafkaEndpoint) -> Iterator[str]:
    """A new uuid-named Kafka topic (3 partitions), deleted after."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from dbus_spark.sinks.kafka_admin import wait_writable

    admin = AdminClient({"bootstrap.servers": endpoint.bootstrap_servers})
    topic = unique("dbus-test").replace("_", "-")
    for future in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)]).values():
        future.result(timeout=30)
    try:
        _until_listed(admin, topic)
        # Listed is not yet writable: a broker lists a new partition before it hosts its
        # log, and a write in between is lost or refused (``dbus_spark.sinks.kafka_admin``),
        # which the sink waits out only for topics it makes itself. 30 s, the bound the
        # create above is given: both are the broker's own work on the new topic.
        wait_writable(admin, [topic], partitions=PARTITIONS, timeout=30.0)
        yield topic
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(timeout=60)


def _until_listed(admin: Any, topic: str) -> None:
    """Wait until the broker's metadata lists the topic: the controller answers the
    create first, and the broker's cache takes a moment more under load."""
    for _ in range(120):
        if topic in admin.list_topics(timeout=10).topics:
            return
        time.sleep(0.25)
    raise AssertionError(f"topic {topic} was created but the broker does not list it")


@contextmanager
def scratch_index(endpoint: ElasticsearchEndpoint) -> Iterator[str]:
    """A fresh uuid-named index name (not created), deleted after."""
    from elasticsearch import Elasticsearch

    index = unique("dbus-test").replace("_", "-")
    try:
        yield index
    finally:
        with Elasticsearch(endpoint.url) as client:
            client.options(ignore_status=404).indices.delete(index=index)


@contextmanager
def scratch_zk_root(endpoint: ZooKeeperEndpoint) -> Iterator[str]:
    """A fresh uuid-named chroot path (created), deleted recursively after."""
    from kazoo.client import KazooClient

    root = "/" + unique("dbus_test")
    client = KazooClient(hosts=endpoint.hosts)
    client.start(timeout=30)
    try:
        client.ensure_path(root)
        yield root
    finally:
        client.delete(root, recursive=True)
        client.stop()
        client.close()
