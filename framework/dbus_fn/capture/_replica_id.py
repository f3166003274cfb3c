"""Replication server ids: one per replication connection, never the source's own.

A server refuses (MySQL) or silently disconnects (MariaDB: the newer connection
wins) two replicas with one id, so ids must be unique across everything that
reads a source: its real replicas and every dbus reader. ``replica_id_for`` gives
a stable id from a reader's name in a range real replicas rarely use;
``check_replica_id`` validates one against the source before reading.
"""

from __future__ import annotations

import zlib
from typing import Any

from dbus_fn.errors import ConfigError, SourceError

MIN_REPLICA_ID = 1
MAX_REPLICA_ID = 2**32 - 1
# Ids at or above 2**31 are left to dbus; real replicas are numbered from 1 up.
DBUS_RANGE = (2**31, 2**32 - 2)
REPORT_PREFIX = "dbus:"


def replica_id_for(name: str, *, salt: int = 0) -> int:
    """A stable server id for the reader called ``name`` (e.g. ``source/runtime-2``).

    Coordination allocates ids for a cluster and bumps ``salt`` on a collision;
    a single machine can use this directly.
    """
    low, high = DBUS_RANGE
    return low + zlib.crc32(f"{name}#{salt}".encode()) % (high - low + 1)


def validate_replica_id(replica_id: int) -> int:
    if isinstance(replica_id, bool) or not isinstance(replica_id, int):
        raise ConfigError(
            f"invalid server_id {replica_id!r}: expected an integer from 1 to {MAX_REPLICA_ID}",
            setting="server_id",
        )
    if not MIN_REPLICA_ID <= replica_id <= MAX_REPLICA_ID:
        raise ConfigError(
            f"invalid server_id {replica_id}: expected an integer from 1 to {MAX_REPLICA_ID}; "
            "use dbus_fn.capture.replica_id_for(name) for a stable unique one",
            setting="server_id",
        )
    return replica_id


def check_replica_id(
    replica_id: int, *, source: str, source_server_id: int, replicas: list[dict[str, Any]], me: str
) -> None:
    """Refuse the source's own id and an id a different replica already uses.

    ``replicas`` are the rows of ``SHOW SLAVE HOSTS``; ``me`` is the host name
    this reader reports. A replica reporting ``me`` is an earlier connection of
    this same reader (it is replaced), not a conflict.
    """
    if replica_id == source_server_id:
        raise SourceError(
            f"server_id {replica_id} is the source {source!r}'s own server_id; "
            "give the reader another one (dbus_fn.capture.replica_id_for(name))",
            source=source,
        )
    for replica in replicas:
        if int(replica.get("Server_id", -1)) != replica_id:
            continue
        host = str(replica.get("Host") or "")
        if host != me:
            raise SourceError(
                f"server_id {replica_id} is already used by another replica of {source!r} "
                f"(reported host {host or 'unknown'!r}); two replication connections must "
                "never share one: give this reader another server_id",
                source=source,
            )
