"""MariaDB with a ROW binlog, as every capture test and the demo need it, and
a replica of it that a source can fail over to.

Debian's ``mariadb-server`` provides the binaries; the server runs from its own
datadir under the state directory with ``mariadbd`` directly (no systemd, no
/etc/mysql). It runs as root with ``--user=root``, so the state directory
may be anywhere root can write, even a private test temp dir.

``mariadb-replica`` (started only when named) replicates ``mariadb`` by GTID and
writes what it applies to its own binlog (``log_slave_updates``), as a replica
that may be promoted must. It is read-only until promoted.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dbus_deploy.services._errors import ServiceStartError
from dbus_deploy.services._process import last_log_line, run_logged
from dbus_deploy.services._sql_server import ReplicaOf, SqlServer
from dbus_fn.local_services import MARIADB_PASSWORD as PASSWORD
from dbus_fn.local_services import MARIADB_USER as USER

MARIADBD = Path("/usr/sbin/mariadbd")
INSTALL_DB = Path("/usr/bin/mariadb-install-db")


class MariaDB(SqlServer):
    name = "mariadb"
    section = "mariadbd"
    log_name = "mariadb.err"
    other_logs = ("mariadbd.out",)
    start_timeout = 60.0
    stop_grace = 60.0
    server_id = 1

    def apt_packages(self) -> dict[str, str]:
        if MARIADBD.exists() and INSTALL_DB.exists():
            return {}
        return {"mariadb-server": self.name}

    def _settings(self) -> dict[str, object]:
        return {
            **super()._settings(),
            "collation_server": "utf8mb4_general_ci",
            "gtid_domain_id": 0,
            "gtid_strict_mode": "ON",
        }

    def _server(self) -> list[str]:
        return [str(MARIADBD), f"--defaults-file={self.cnf}"]

    def _initialise(self) -> None:
        """Create the system tables once, into an empty datadir."""
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(parents=True)
        install_log = self.logs / "install-db.log"
        failure = run_logged(
            [
                str(INSTALL_DB),
                f"--defaults-file={self.cnf}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            log_file=install_log,
            cwd=self.root,
            timeout=300,
        )
        if failure is not None:
            # Leave no half-initialised datadir that the next `up` would trust.
            shutil.rmtree(self.data / "mysql", ignore_errors=True)
            raise ServiceStartError(
                self.name,
                f"mariadb-install-db failed ({failure})",
                log_file=install_log,
                last_log_line=last_log_line(self.log_file, install_log),
            )


class MariaDBReplica(ReplicaOf, MariaDB):
    """A replica of ``mariadb`` by GTID, read-only until a test or a user promotes it
    (``STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF``)."""

    name = "mariadb-replica"
    primary = "mariadb"
    logs_updates = "log_slave_updates"
    server_id = 2

    def _follow(self, cursor: Any, host: str, port: int) -> None:
        cursor.execute("STOP SLAVE")  # a start cut short may have left it running
        cursor.execute(
            "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, "
            "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
            (host, port, USER, PASSWORD),
        )
        cursor.execute("START SLAVE")
