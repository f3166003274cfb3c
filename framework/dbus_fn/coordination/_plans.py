"""``PlanLog``: what a source's owner is about to read for history, written first.

A runtime's history reads (``dbus_spark.state.history``) send rows before their micro-
batch's position is committed. If the source then moves, its new owner must read
those parts again exactly as planned (the same key ranges, in a micro-batch that
ends where the planned one did), or a delete made after the old owner's read but
before the new owner's could be lost. So the owner's driver writes each plan here
before the micro-batch runs, fenced like a position commit: only while the
assignment names this runtime at the epoch the source is read under. The plans
are JSON this module does not read; the writer prunes what was committed since.
"""

from __future__ import annotations

import threading
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError, RolledBackError
from kazoo.handlers.threading import KazooTimeoutError

from dbus_fn.coordination._client import ZooKeeperSettings, connect, dump, load
from dbus_fn.errors import DbusError


class PlanLog:
    """One process's writer (and reader) of ``plans/<source>``; connects on first use."""

    def __init__(self, settings: ZooKeeperSettings, runtime_id: str) -> None:
        self.settings = settings
        self.runtime_id = runtime_id
        self._layout = settings.layout
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    def _connected(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                self._client = connect(self.settings)
            return self._client

    def read(self, source: str) -> list[Any]:
        """The plans written for ``source`` and not pruned (by any owner)."""
        return read_plans(self._connected(), self.settings, source)

    def committed_history(self, source: str) -> dict[str, Any]:
        """The history committed with ``source``'s position (``{}`` if none)."""
        try:
            raw, _ = self._connected().get(self._layout.position(source))
        except NoNodeError:
            return {}
        return dict(load(raw).get("history") or {})

    def write(self, source: str, epoch: int, plans: list[Any]) -> bool:
        """Replace ``source``'s plans; False (nothing written) unless this runtime owns
        the source at ``epoch`` now, or if ZooKeeper did not answer."""
        try:
            client = self._connected()
            raw, stat = client.get(self._layout.assignment(source))
            owner = load(raw)
            if owner.get("runtime") != self.runtime_id or owner.get("epoch") != epoch:
                return False
            data = dump({"runtime": self.runtime_id, "epoch": epoch, "plans": plans})
            path = self._layout.plans(source)
            client.ensure_path(path.rsplit("/", 1)[0], acl=self.settings.acl)
            for _ in range(2):
                tx = client.transaction()
                tx.check(self._layout.assignment(source), stat.version)
                if client.exists(path) is None:
                    tx.create(path, data, acl=self.settings.acl)
                else:
                    tx.set_data(path, data)
                results = tx.commit()
                if not any(isinstance(r, Exception) for r in results):
                    return True
                if not isinstance(results[0], RolledBackError):
                    return False  # the assignment changed: another owner now
            return False
        except (NoNodeError, KazooException, KazooTimeoutError, DbusError):
            return False

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.stop()
                self._client.close()
                self._client = None


def read_plans(client: KazooClient, settings: ZooKeeperSettings, source: str) -> list[Any]:
    try:
        raw, _ = client.get(settings.layout.plans(source))
    except NoNodeError:
        return []
    return list(load(raw).get("plans") or [])
