"""What a reader knows of its source server, and how the server's errors read."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dbus_fn.capture._dsn import ConnectionSettings
from dbus_fn.errors import SourceAccessError, SourceError, SourceUnreachableError

REPLICATION_GRANT = "REPLICATION SLAVE"
MONITOR_GRANT = "BINLOG MONITOR (MariaDB; REPLICATION CLIENT on MySQL)"

TRANSIENT_CODES = frozenset({1053, 1927, 2003, 2006, 2013, 2014, 2055, 1040, 1159, 1161})
"""Server and client error codes of a connection that may come back: retried."""
ACCESS_CODES = frozenset({1044, 1045, 1142, 1227, 1370, 1698})
"""Error codes of a login or a privilege refused: reported, never retried."""
SETTINGS_QUERY = (
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'version', 'log_bin', "
    "'binlog_format', 'binlog_row_image', 'binlog_row_metadata', 'log_bin_compress', "
    "'server_uuid')"
)
"""The settings a reader reads of its source server once, and checks."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What capture needs to know about the source server, read once: its flavour and
    version, and every statement that differs between them."""

    server_id: int
    version: str
    is_mariadb: bool
    server_uuid: str | None

    @property
    def identity(self) -> str:
        """The id that names this server in event ids: uuid on MySQL, server_id on MariaDB."""
        return self.server_uuid or str(self.server_id)

    @property
    def release(self) -> tuple[int, int, int]:
        """The version's numbers (``9.7.4-2`` -> ``(9, 7, 4)``; unknown parts 0)."""
        numbers = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", self.version)
        if numbers is None:
            return (0, 0, 0)
        major, minor, patch = (int(part or 0) for part in numbers.groups())
        return (major, minor, patch)

    @property
    def flavour(self) -> str:
        """``MariaDB`` or ``MySQL``, with the version, as errors name the server."""
        return f"{'MariaDB' if self.is_mariadb else 'MySQL'} {self.version}"

    @property
    def binlog_status_sql(self) -> str:
        """Where the binlog ends: MySQL 8.2 named it ``SHOW BINARY LOG STATUS`` and 8.4
        removed ``SHOW MASTER STATUS``, which MariaDB keeps."""
        if not self.is_mariadb and self.release >= (8, 2, 0):
            return "SHOW BINARY LOG STATUS"
        return "SHOW MASTER STATUS"

    @property
    def replicas_sql(self) -> str:
        """The replicas connected to the server: MySQL 8.0.22 named it ``SHOW
        REPLICAS`` and 8.4 removed ``SHOW SLAVE HOSTS``, which MariaDB keeps."""
        if not self.is_mariadb and self.release >= (8, 0, 22):
            return "SHOW REPLICAS"
        return "SHOW SLAVE HOSTS"


@dataclass(frozen=True, slots=True)
class CaptureLag:
    """How far a reader is behind its source.

    ``seconds`` compares the last event's timestamp with now, and is 0 once a
    heartbeat shows nothing newer is waiting; ``bytes`` is the distance from the
    read position to the end of the source's binlog. ``None`` before any read.
    """

    seconds: float | None
    bytes: int | None


def error_code(exc: BaseException) -> int | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if args and isinstance(args[0], int):
        return args[0]
    return None


def error_text(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2:
        return str(args[1])
    return str(exc) or type(exc).__name__


def unreachable_error(
    name: str, server: ConnectionSettings, exc: BaseException
) -> SourceUnreachableError:
    reason = error_text(exc)
    return SourceUnreachableError(
        f"source {name!r} at {server.redacted} is unreachable "
        f"({reason}); check that the server runs and the DSN's host and port",
        source=name,
        server=server.redacted,
        reason=reason,
    )


def translate_error(
    name: str, server: ConnectionSettings, exc: BaseException, *, doing: str
) -> SourceError:
    """A server's error while ``doing`` something, as the one line a user can act on."""
    code, text = error_code(exc), error_text(exc)
    if code in (1045, 1698):
        return SourceAccessError(
            f"source {name!r} ({server.redacted}) refused the login: {text}; "
            "check the DSN's user and password",
            source=name,
        )
    if code in ACCESS_CODES:
        grant = (
            MONITOR_GRANT
            if "MONITOR" in text.upper() or "CLIENT" in text.upper()
            else (
                REPLICATION_GRANT
                if "REPLICA" in text.upper() or "SLAVE" in text.upper()
                else f"{REPLICATION_GRANT}, {MONITOR_GRANT}"
            )
        )
        user = server.user
        return SourceAccessError(
            f"source {name!r}: user {user!r} lacks a privilege for {doing} ({text}); "
            f"run on the source: GRANT {grant.split(' (')[0]} ON *.* TO '{user}'@'<host>'",
            source=name,
            grant=grant,
        )
    if code in TRANSIENT_CODES or code is None:
        return unreachable_error(name, server, exc)
    return SourceError(f"source {name!r}: {doing} failed: [{code}] {text}", source=name)


def check_settings(name: str, variables: dict[str, str]) -> None:
    """Refuse a source server whose binlog settings (``SETTINGS_QUERY``) cannot be
    captured whole, naming each setting and the value it needs."""
    wanted = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
              "binlog_row_metadata": "FULL"}  # fmt: skip
    problems = []
    for variable, value in wanted.items():
        actual = variables.get(variable)
        if actual is None and variable == "binlog_row_metadata":
            problems.append(
                "binlog_row_metadata is missing (needs MariaDB >= 10.5 or MySQL >= 8.0.14, "
                "which log column names)"
            )
        elif actual is not None and actual.upper() != value:
            problems.append(f"{variable}={actual} (need {value})")
    # MariaDB's compressed events (rows and statements over log_bin_compress_min_len
    # bytes) are not read: their changes would be missed without a word.
    if variables.get("log_bin_compress", "OFF").upper() == "ON":
        problems.append("log_bin_compress=ON (its compressed events cannot be read)")
        wanted["log_bin_compress"] = "OFF"
    if problems:
        raise SourceError(
            f"source {name!r} cannot be captured: {'; '.join(problems)}; set "
            + ", ".join(f"{k}={v}" for k, v in wanted.items() if k != "log_bin")
            + " in the server's configuration (and enable log_bin)",
            source=name,
        )
