"""A private primary and its replica, MariaDB or MySQL, for the failover tests and bench.

``private_pair`` runs ``dbus services up mariadb mariadb-replica`` (or ``mysql
mysql-replica``) in a home of its own on free ports, so killing its primary touches
no other test, with the ``shop.orders`` table made on the primary and replicated.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors
from support import database_endpoint, free_ports, wait_for

from dbus_deploy.services import (
    PORT_VARIABLES,
    Endpoints,
    MariaDBEndpoint,
    ServicesConfig,
    down,
    endpoints,
    load_config,
    up,
)
from dbus_deploy.services._process import running_pid

TABLE = "shop.orders"


@dataclass
class Pair:
    """A private primary and its replica."""

    config: ServicesConfig
    endpoints: Endpoints
    flavour: str = "mariadb"
    """The services' name: ``mariadb`` or ``mysql``."""

    @property
    def mysql(self) -> bool:
        return self.flavour == "mysql"

    @property
    def primary_endpoint(self) -> MariaDBEndpoint:
        return database_endpoint(self.endpoints, self.flavour)

    @property
    def replica_endpoint(self) -> MariaDBEndpoint:
        return database_endpoint(self.endpoints, f"{self.flavour}_replica")

    @property
    def failover_dsn(self) -> str:
        """A DSN of both servers, the primary first."""
        replica = self.replica_endpoint
        return f"{self.primary_endpoint.dsn},{replica.host}:{replica.port}"

    def primary(self) -> Any:
        return self.primary_endpoint.connect()

    def replica(self) -> Any:
        return self.replica_endpoint.connect()

    def kill_primary(self) -> None:
        service = self.config.service_dir(self.flavour)
        pid = running_pid(service / f"{self.flavour}.pid", service)
        assert pid is not None, f"{self.flavour} runs before the failover"
        os.kill(pid, signal.SIGKILL)

    def promote_replica(self) -> None:
        """What a failover tool does: let the replica apply what it received, then make
        it a writable primary."""
        word, state = ("REPLICA", "Replica_SQL_Running_State") if self.mysql else (
            "SLAVE", "Slave_SQL_Running_State")  # fmt: skip
        with self.replica() as connection, connection.cursor(pymysql.cursors.DictCursor) as cur:

            def applied() -> bool:
                cur.execute(f"SHOW {word} STATUS")
                status = cur.fetchone()
                return "read all relay log" in status[state]

            wait_for(applied, 30, "the replica to apply its relay log")
            cur.execute(f"STOP {word}")
            cur.execute(f"RESET {word} ALL")
            if self.mysql:
                cur.execute("SET GLOBAL super_read_only = OFF")
            cur.execute("SET GLOBAL read_only = OFF")

    def server_id(self, connection: Any) -> str:
        """The id a change names its server by: ``@@server_id`` on MariaDB,
        ``@@server_uuid`` on MySQL (of a connection, which it closes)."""
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT @@server_uuid" if self.mysql else "SELECT @@server_id")
            return str(cursor.fetchone()[0])

    def stop_replication(self) -> None:
        """The replica stops applying the primary's transactions (it falls behind)."""
        with self.replica() as connection, connection.cursor() as cursor:
            cursor.execute("STOP REPLICA" if self.mysql else "STOP SLAVE")

    def caught_up(self) -> None:
        wait_for(
            lambda: self.gtid(self.replica()) == self.gtid(self.primary()),
            30,
            "the replica to apply every commit of the primary",
        )

    def gtid(self, connection: Any) -> str:
        """``@@gtid_binlog_pos`` (MySQL: ``@@gtid_executed``) of a connection, which it
        closes."""
        variable = "gtid_executed" if self.mysql else "gtid_binlog_pos"
        with connection, connection.cursor() as cursor:
            cursor.execute(f"SELECT @@{variable}")
            return str(cursor.fetchone()[0]).replace("\n", "")


@contextlib.contextmanager
def private_pair(folder: Path, flavour: str = "mariadb") -> Iterator[Pair]:
    """A primary and its replica (``mariadb`` or ``mysql``) with their state in
    ``folder``, stopped afterwards."""
    env = dict(os.environ)
    env["DBUS_HOME"] = str(folder / "home")
    env.update(zip(PORT_VARIABLES, map(str, free_ports(len(PORT_VARIABLES))), strict=True))
    config = load_config(env)
    up([flavour, f"{flavour}-replica"], config=config)
    try:
        found = Pair(config, endpoints(config), flavour)
        with found.primary() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE shop")
            cursor.execute(
                "CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(40) NOT NULL)"
            )
        found.caught_up()
        yield found
    finally:
        down(config=config)
