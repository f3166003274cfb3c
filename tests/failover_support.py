"""A private MariaDB primary and its replica, for the failover tests and bench.

``private_pair`` runs ``dbus services up mariadb mariadb-replica`` in a home of its
own on free ports, so killing its primary touches no other test, with the
``shop.orders`` table made on the primary and replicated.
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
from support import free_ports, wait_for

from dbus_deploy.services import (
    PORT_VARIABLES,
    Endpoints,
    ServicesConfig,
    down,
    endpoints,
    load_config,
    up,
)

TABLE = "shop.orders"


@dataclass
class Pair:
    """A private primary and its replica."""

    config: ServicesConfig
    endpoints: Endpoints

    def primary(self) -> Any:
        return self.endpoints.mariadb.connect()

    def replica(self) -> Any:
        return self.endpoints.mariadb_replica.connect()

    def kill_primary(self) -> None:
        pid = int((self.config.service_dir("mariadb") / "mariadb.pid").read_text())
        os.kill(pid, signal.SIGKILL)

    def promote_replica(self) -> None:
        """What a failover tool does: let the replica apply what it received, then make
        it a writable primary."""
        with self.replica() as connection, connection.cursor(pymysql.cursors.DictCursor) as cur:

            def applied() -> bool:
                cur.execute("SHOW SLAVE STATUS")
                status = cur.fetchone()
                return "read all relay log" in status["Slave_SQL_Running_State"]

            wait_for(applied, 30, "the replica to apply its relay log")
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL read_only = OFF")

    def caught_up(self) -> None:
        wait_for(
            lambda: self.gtid(self.replica()) == self.gtid(self.primary()),
            30,
            "the replica to apply every commit of the primary",
        )

    def gtid(self, connection: Any) -> str:
        """``@@gtid_binlog_pos`` of a connection, which it closes."""
        with connection, connection.cursor() as cursor:
            cursor.execute("SELECT @@gtid_binlog_pos")
            return str(cursor.fetchone()[0])


@contextlib.contextmanager
def private_pair(folder: Path) -> Iterator[Pair]:
    """A primary and its replica with their state in ``folder``, stopped afterwards."""
    env = dict(os.environ)
    env["DBUS_HOME"] = str(folder / "home")
    env.update(zip(PORT_VARIABLES, map(str, free_ports(len(PORT_VARIABLES))), strict=True))
    config = load_config(env)
    up(["mariadb", "mariadb-replica"], config=config)
    try:
        found = Pair(config, endpoints(config))
        with found.primary() as connection, connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE shop")
            cursor.execute(
                "CREATE TABLE shop.orders (id INT PRIMARY KEY, note VARCHAR(40) NOT NULL)"
            )
        found.caught_up()
        yield found
    finally:
        down(config=config)
