"""What a reader knows of its source server, and how the server's errors read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REPLICATION_GRANT = "REPLICATION SLAVE"
MONITOR_GRANT = "BINLOG MONITOR (MariaDB; REPLICATION CLIENT on MySQL)"

TRANSIENT_CODES = frozenset({1053, 1927, 2003, 2006, 2013, 2014, 2055, 1040, 1159, 1161})
"""Server and client error codes of a connection that may come back: retried."""
ACCESS_CODES = frozenset({1044, 1045, 1142, 1227, 1370, 1698})
"""Error codes of a login or a privilege refused: reported, never retried."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What capture needs to know about the source server, read once."""

    server_id: int
    version: str
    is_mariadb: bool
    server_uuid: str | None

    @property
    def identity(self) -> str:
        """The id that names this server in event ids: uuid on MySQL, server_id on MariaDB."""
        return self.server_uuid or str(self.server_id)


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
