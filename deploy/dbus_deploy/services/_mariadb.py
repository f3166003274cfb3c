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

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pymysql

from dbus_deploy.services._errors import ServiceStartError
from dbus_deploy.services._process import Launch, last_log_line, run_logged
from dbus_deploy.services._service import Service
from dbus_fn.local_services import MARIADB_PASSWORD as PASSWORD
from dbus_fn.local_services import MARIADB_USER as USER
from dbus_fn.local_services import PORT_ENV

MARIADBD = Path("/usr/sbin/mariadbd")
INSTALL_DB = Path("/usr/bin/mariadb-install-db")

# Run at every start, outside the binlog so capture readers never see it.
_BOOTSTRAP_SQL = f"""\
SET sql_log_bin = 0;
CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';
CREATE USER IF NOT EXISTS '{USER}'@'localhost' IDENTIFIED BY '{PASSWORD}';
GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'localhost' WITH GRANT OPTION;
"""


class MariaDB(Service):
    name = "mariadb"
    log_name = "mariadb.err"
    other_logs = ("mariadbd.out",)
    start_timeout = 60.0
    stop_grace = 60.0

    @property
    def cnf(self) -> Path:
        return self.conf / "my.cnf"

    @property
    def socket(self) -> Path:
        socket = self.run / "mariadbd.sock"
        # A unix socket path may not exceed 107 bytes; deep state directories
        # (pytest temp dirs) get a short, still unique, path instead.
        if len(str(socket)) <= 100:
            return socket
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"dbus-mariadb-{digest}.sock"

    def apt_packages(self) -> dict[str, str]:
        if MARIADBD.exists() and INSTALL_DB.exists():
            return {}
        return {"mariadb-server": self.name}

    server_id = 1

    def _settings(self) -> dict[str, object]:
        return {
            "user": "root",
            "datadir": self.data,
            "socket": self.socket,
            "pid_file": self.run / "mariadbd.pid",
            "tmpdir": self.run,
            "bind_address": self.config.host,
            "port": self.port,
            "log_error": self.log_file,
            "skip_name_resolve": "ON",
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_general_ci",
            "max_connections": 500,
            "innodb_buffer_pool_size": "256M",
            # Rows over 16 MB (LONGBLOB) are written, replicated and captured whole.
            "max_allowed_packet": "1G",
            # What binlog capture needs: full row images with column names.
            "server_id": self.server_id,
            "log_bin": self.data / "binlog",
            "log_bin_index": self.data / "binlog.index",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL",
            "gtid_domain_id": 0,
            "gtid_strict_mode": "ON",
            "init_file": self.conf / "bootstrap.sql",
        }

    def _write_config(self) -> None:
        lines = ["# Written by `dbus services up`; edits are overwritten.", "[mariadbd]"]
        lines += [f"{key} = {value}" for key, value in self._settings().items()]
        self.cnf.write_text("\n".join(lines) + "\n")
        (self.conf / "bootstrap.sql").write_text(_BOOTSTRAP_SQL)

    def prepare(self) -> Launch:
        self._make_dirs()
        self._write_config()
        if not (self.data / "mysql").is_dir():
            self._initialise()
        return Launch(
            argv=[str(MARIADBD), f"--defaults-file={self.cnf}"],
            log_file=self.logs / "mariadbd.out",
            cwd=self.root,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "UTC"},
        )

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

    def check_health(self) -> str | None:
        try:
            connection = pymysql.connect(
                host=self.config.host,
                port=self.port,
                user=USER,
                password=PASSWORD,
                connect_timeout=2,
            )
        except pymysql.MySQLError as exc:
            return f"cannot connect: {exc.args[-1] if exc.args else exc}"
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
                return self._ready(cursor)
        finally:
            connection.close()

    def _ready(self, cursor: Any) -> str | None:
        """What else the server needs before it is healthy (None: nothing)."""
        return None


class MariaDBReplica(MariaDB):
    """A replica of ``mariadb`` by GTID, read-only until a test or a user promotes it
    (``STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF``)."""

    name = "mariadb-replica"
    server_id = 2

    @property
    def port(self) -> int:
        return self.config.ports["mariadb_replica"]

    def ports(self) -> list[tuple[int, str]]:
        return [(self.port, PORT_ENV["mariadb_replica"])]

    @property
    def follows(self) -> Path:
        """Written once replication is set up: a replica promoted since is not pointed
        at the primary again when it restarts."""
        return self.conf / "follows-primary"

    def _settings(self) -> dict[str, object]:
        return {
            **super()._settings(),
            "log_slave_updates": "ON",
            "read_only": "ON",
            "relay_log": self.data / "relay",
            "relay_log_index": self.data / "relay.index",
        }

    def _ready(self, cursor: Any) -> str | None:
        if self.follows.exists():
            return None
        # The primary may not answer yet: the replica's I/O thread retries each second.
        primary = self.config.ports["mariadb"]
        try:
            cursor.execute("STOP SLAVE")  # a start cut short may have left it running
            cursor.execute(
                "CHANGE MASTER TO MASTER_HOST = %s, MASTER_PORT = %s, MASTER_USER = %s, "
                "MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1",
                (self.config.host, primary, USER, PASSWORD),
            )
            cursor.execute("START SLAVE")
        except pymysql.MySQLError as exc:
            return f"cannot follow the primary: {exc.args[-1] if exc.args else exc}"
        self.follows.write_text(f"{self.config.host}:{primary}\n")
        return None
