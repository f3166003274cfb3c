"""What the MariaDB and MySQL services share: an option file written at every start,
a unix socket, the ``dbus`` account made outside the binlog, health as that account's
login, and a replica that is pointed at its primary once.
"""

from __future__ import annotations

import hashlib
import tempfile
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import pymysql

from dbus_deploy.services._process import Launch
from dbus_deploy.services._service import Service
from dbus_fn.local_services import MARIADB_PASSWORD as PASSWORD
from dbus_fn.local_services import MARIADB_USER as USER
from dbus_fn.local_services import PORT_ENV

# Run at every start, outside the binlog so capture readers never see it.
BOOTSTRAP_SQL = f"""\
SET sql_log_bin = 0;
CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';
CREATE USER IF NOT EXISTS '{USER}'@'localhost' IDENTIFIED BY '{PASSWORD}';
GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'localhost' WITH GRANT OPTION;
"""


class SqlServer(Service):
    """A MariaDB or MySQL server: ``[section]`` of ``config/my.cnf`` holds ``_settings``."""

    section: ClassVar[str]
    """The option file's group the server reads (``mariadbd``, ``mysqld``)."""
    server_id: ClassVar[int]

    @property
    def cnf(self) -> Path:
        return self.conf / "my.cnf"

    @property
    def socket(self) -> Path:
        socket = self.run / f"{self.section}.sock"
        # A unix socket path may not exceed 107 bytes; deep state directories (pytest
        # temp dirs) get a short, still unique, path instead.
        if len(str(socket)) <= 100:
            return socket
        digest = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"dbus-{self.name}-{digest}.sock"

    def _settings(self) -> dict[str, object]:
        """The server's options: these, and what its flavour adds."""
        return {
            "user": "root",
            "datadir": self.data,
            "socket": self.socket,
            "pid_file": self.run / f"{self.section}.pid",
            "tmpdir": self.run,
            "bind_address": self.config.host,
            "port": self.port,
            "log_error": self.log_file,
            "skip_name_resolve": "ON",
            "character_set_server": "utf8mb4",
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
            "init_file": self.conf / "bootstrap.sql",
        }

    @abstractmethod
    def _server(self) -> list[str]:
        """The command that runs the server on ``cnf``."""

    @abstractmethod
    def _initialise(self) -> None:
        """Create the system tables once, into an empty datadir."""

    def prepare(self) -> Launch:
        self._make_dirs()
        self._write_config()
        if not (self.data / "mysql").is_dir():
            self._initialise()
        return Launch(
            argv=self._server(),
            log_file=self.logs / f"{self.section}.out",
            cwd=self.root,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TZ": "UTC"},
        )

    def _write_config(self) -> None:
        lines = ["# Written by `dbus services up`; edits are overwritten.", f"[{self.section}]"]
        lines += [f"{key} = {value}" for key, value in self._settings().items()]
        self.cnf.write_text("\n".join(lines) + "\n")
        (self.conf / "bootstrap.sql").write_text(BOOTSTRAP_SQL)

    def check_health(self) -> str | None:
        try:
            connection = pymysql.connect(
                host=self.config.host, port=self.port, user=USER, password=PASSWORD,
                connect_timeout=2,
            )  # fmt: skip
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


class ReplicaOf(SqlServer):
    """A replica of ``primary``, set to follow it once: a replica promoted since is not
    pointed at the primary again when it restarts."""

    primary: ClassVar[str]
    """The service it replicates (``mariadb``, ``mysql``)."""
    logs_updates: ClassVar[str]
    """The setting that has it log what it applies to its own binlog, as a replica
    that may be promoted must (``log_slave_updates``, ``log_replica_updates``)."""

    def _settings(self) -> dict[str, object]:
        return {
            **super()._settings(),
            self.logs_updates: "ON",
            "read_only": "ON",
            "relay_log": self.data / "relay",
            "relay_log_index": self.data / "relay.index",
        }

    @property
    def port(self) -> int:
        return self.config.ports[self.name.replace("-", "_")]

    def ports(self) -> list[tuple[int, str]]:
        return [(self.port, PORT_ENV[self.name.replace("-", "_")])]

    @property
    def follows(self) -> Path:
        """Written once replication is set up."""
        return self.conf / "follows-primary"

    @abstractmethod
    def _follow(self, cursor: Any, host: str, port: int) -> None:
        """Point the server at its primary and start replicating."""

    def _ready(self, cursor: Any) -> str | None:
        if self.follows.exists():
            return None
        # The primary may not answer yet: the replica's I/O thread retries each second.
        primary = self.config.ports[self.primary]
        try:
            self._follow(cursor, self.config.host, primary)
        except pymysql.MySQLError as exc:
            return f"cannot follow the primary: {exc.args[-1] if exc.args else exc}"
        self.follows.write_text(f"{self.config.host}:{primary}\n")
        return None
