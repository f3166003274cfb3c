"""MySQL with a ROW binlog and GTIDs, as a source dbus captures from, and a replica of
it that a source can fail over to.

Debian's stable release has no MySQL, and the unstable suite's ``mysql-server-core``
(MySQL 9.7) needs a newer C library than the host's. So the server is installed
once per machine into a Debian root of its own (``debootstrap --variant=minbase
sid``, then ``apt-get install mysql-server-core`` inside it: 45 to 70 s here, 520 MB),
kept under ``~/.cache/dbus/mysql`` (``$XDG_CACHE_HOME``) as Maven keeps the Kafka and
Elasticsearch downloads in ``~/.m2``, so every checkout and home uses the one copy.
It runs from the host with that root's dynamic loader and libraries: no chroot, its
datadir under the service's folder like MariaDB's, as root with ``--user=root``.

``mysql-replica`` (started only when named) replicates ``mysql`` by GTID
auto-position and writes what it applies to its own binlog, as a replica that may
be promoted must. It is read-only until promoted (``STOP REPLICA; RESET REPLICA
ALL; SET GLOBAL read_only = OFF``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pymysql

from dbus_deploy.services._config import ServicesConfig
from dbus_deploy.services._errors import ServiceStartError, ToolMissingError
from dbus_deploy.services._install import debian_mirror, run_install_step
from dbus_deploy.services._process import last_log_line, run_logged
from dbus_deploy.services._sql_server import ReplicaOf, SqlServer
from dbus_fn.local_services import MARIADB_PASSWORD as PASSWORD
from dbus_fn.local_services import MARIADB_USER as USER

SUITE = "sid"
PACKAGE = "mysql-server-core"
MIRROR = "http://deb.debian.org/debian"
"""Where the root's packages come from unless the host's apt names a mirror."""
_LIBRARIES = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")
_LOADER = "lib64/ld-linux-x86-64.so.2"

def mysql_root(config: ServicesConfig) -> Path:
    """The Debian root MySQL is installed in: one per machine (and user), shared by
    every home's ``mysql`` and ``mysql-replica``."""
    cache = config.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(cache) if cache else Path(config.environ.get("HOME", "~")).expanduser() / ".cache"
    return base / "dbus" / "mysql"


def _mirror() -> str:
    try:
        return debian_mirror("bookworm") or MIRROR
    except Exception:  # an unreadable apt configuration: the public mirror
        return MIRROR


def install_root(config: ServicesConfig) -> Path:
    """Make the Debian root with MySQL in it, once (two processes take turns); its path."""
    root = mysql_root(config)
    if (root / "usr/sbin/mysqld").is_file():
        return root
    if os.geteuid() != 0:
        raise ToolMissingError(
            "root", "mysql", "run `dbus services up mysql` as root once (debootstrap needs it)"
        )
    if shutil.which("debootstrap", path=config.environ.get("PATH", os.defpath)) is None:
        raise ToolMissingError("debootstrap", "mysql", "apt-get install debootstrap")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name("mysql.lock"), "w") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        if (root / "usr/sbin/mysqld").is_file():
            return root
        partial = root.with_name("mysql.partial")
        shutil.rmtree(partial, ignore_errors=True)
        log_file = config.home / "logs" / "mysql-install.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**config.environ, "DEBIAN_FRONTEND": "noninteractive"}
        began = time.monotonic()
        run_install_step(
            ["debootstrap", "--variant=minbase", SUITE, str(partial), _mirror()],
            log_file=log_file, service="mysql", step=f"debootstrap {SUITE}", env=env,
        )  # fmt: skip
        # The unstable suite's Release file may be older than its Valid-Until says.
        apt = ["chroot", str(partial), "apt-get", "-q", "-o", "Acquire::Check-Valid-Until=false"]
        run_install_step(
            [*apt, "update"], log_file=log_file, service="mysql", step="apt-get update", env=env
        )
        run_install_step(
            [*apt, "install", "-y", "--no-install-recommends", PACKAGE],
            log_file=log_file, service="mysql", step=f"apt-get install {PACKAGE}", env=env,
        )  # fmt: skip
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (partial / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        shutil.rmtree(root, ignore_errors=True)
        partial.rename(root)
        with log_file.open("a") as log:
            log.write(f"MySQL installed in {root} in {time.monotonic() - began:.0f}s\n")
    return root


class MySQL(SqlServer):
    name = "mysql"
    section = "mysqld"
    log_name = "mysqld.err"
    other_logs = ("mysqld.out",)
    start_timeout = 90.0
    stop_grace = 60.0
    server_id = 11

    @property
    def root_dir(self) -> Path:
        return mysql_root(self.config)

    def apt_packages(self) -> dict[str, str]:
        if (self.root_dir / "usr/sbin/mysqld").is_file() or shutil.which("debootstrap"):
            return {}
        return {"debootstrap": self.name}

    def install(self) -> None:
        install_root(self.config)

    def _settings(self) -> dict[str, object]:
        root = self.root_dir
        return {
            **super()._settings(),
            "basedir": root / "usr",
            "lc_messages_dir": root / "usr/share/mysql",
            "character_sets_dir": root / "usr/share/mysql/charsets",
            "plugin_dir": root / "usr/lib/mysql/plugin",
            "mysqlx": "OFF",
            "secure_file_priv": "",
            "gtid_mode": "ON",
            "enforce_gtid_consistency": "ON",
        }

    def _server(self) -> list[str]:
        return self._mysqld()

    def _mysqld(self, *args: str) -> list[str]:
        """``mysqld`` run by its root's loader on its root's libraries."""
        root = self.root_dir
        libraries = ":".join(str(root / part) for part in _LIBRARIES)
        return [str(root / _LOADER), "--library-path", libraries,
                str(root / "usr/sbin/mysqld"), f"--defaults-file={self.cnf}", *args]  # fmt: skip

    def _initialise(self) -> None:
        """Create the system tables once, into a datadir --initialize makes itself."""
        shutil.rmtree(self.data, ignore_errors=True)
        install_log = self.logs / "initialize.log"
        failure = run_logged(
            self._mysqld("--initialize-insecure", f"--log-error={install_log}"),
            log_file=install_log,
            cwd=self.root,
            timeout=300,
        )
        if failure is not None:
            # Leave no half-initialised datadir that the next `up` would trust.
            shutil.rmtree(self.data, ignore_errors=True)
            self.data.mkdir(parents=True)
            raise ServiceStartError(
                self.name,
                f"mysqld --initialize-insecure failed ({failure})",
                log_file=install_log,
                last_log_line=last_log_line(install_log),
            )


class MySQLReplica(ReplicaOf, MySQL):
    """A replica of ``mysql`` by GTID auto-position, read-only until promoted."""

    name = "mysql-replica"
    primary = "mysql"
    logs_updates = "log_replica_updates"
    server_id = 12

    def _follow(self, cursor: Any, host: str, port: int) -> None:
        with contextlib.suppress(pymysql.MySQLError):
            cursor.execute("STOP REPLICA")  # a start cut short may have left it running
        cursor.execute(
            "CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s, SOURCE_PORT = %s, "
            "SOURCE_USER = %s, SOURCE_PASSWORD = %s, SOURCE_AUTO_POSITION = 1, "
            "GET_SOURCE_PUBLIC_KEY = 1, SOURCE_CONNECT_RETRY = 1",
            (host, port, USER, PASSWORD),
        )
        cursor.execute("START REPLICA")
