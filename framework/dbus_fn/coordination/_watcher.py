"""``FunctionWatcher``: the set of active function versions, as it changes.

A runtime polls it at each batch boundary (``poll()`` never blocks on a quiet
registry); a kazoo data watch on the registry's change counter marks it dirty,
and a periodic re-read covers anything a watch could miss (such as a session
re-established after a loss).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.recipe.watchers import DataWatch

from dbus_fn.coordination._client import ZooKeeperSettings, close, cluster_client, connect
from dbus_fn.coordination._registry import ActiveFunction, FunctionStore

ActiveSet = frozenset[ActiveFunction]


class FunctionWatcher:
    """Watches one cluster's function registry; hands out unpacked active versions.

    ``poll()`` returns the new set when it changed since the last call, else
    None; ``current`` is the last set read; ``changes()`` yields the set now and
    after each change.
    """

    def __init__(
        self,
        client: KazooClient,
        settings: ZooKeeperSettings,
        *,
        cache_dir: Path | None = None,
        resync_interval: float = 30.0,
    ) -> None:
        self._client = client
        self._settings = settings
        self._store = FunctionStore(client, settings)
        self._cache_dir = cache_dir
        self._resync_interval = resync_interval
        self._dirty = threading.Event()
        self._dirty.set()
        self._stopped = False
        self._owns_client = False
        self._current: ActiveSet = frozenset()
        self._read_at = 0.0
        self._started = False

    @classmethod
    def connect(
        cls, settings: ZooKeeperSettings, *, cache_dir: Path | None = None
    ) -> FunctionWatcher:
        """A watcher with its own client (closed by ``stop()``)."""
        with cluster_client(settings):
            pass  # refuse a missing cluster with its one-line error
        watcher = cls(connect(settings), settings, cache_dir=cache_dir)
        watcher._owns_client = True
        return watcher.start()

    def start(self) -> FunctionWatcher:
        if not self._started:
            self._started = True
            self._client.add_listener(self._on_state)
            DataWatch(self._client, self._settings.layout.functions, self._on_change)
        return self

    def _on_change(self, data: Any, stat: Any) -> bool | None:
        if self._stopped:
            return False  # ends the kazoo watch
        self._dirty.set()
        return None

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._dirty.set()

    @property
    def current(self) -> ActiveSet:
        return self._current

    def poll(self) -> ActiveSet | None:
        """The active set if it changed since the last call; None otherwise (or while
        ZooKeeper is unreachable: the runtime keeps what it runs)."""
        due = time.monotonic() - self._read_at >= self._resync_interval
        if not (self._dirty.is_set() or due):
            return None
        self._dirty.clear()
        try:
            fresh: ActiveSet = frozenset(self._store.materialize_active(self._cache_dir))
        except KazooException:
            self._dirty.set()
            return None
        self._read_at = time.monotonic()
        if fresh == self._current:
            return None
        self._current = fresh
        return fresh

    def changes(self, timeout: float | None = None) -> Iterator[ActiveSet]:
        """The current set, then each new one; ends after ``timeout`` s without change."""
        self.poll()
        yield self._current
        while not self._stopped:
            woke = self._dirty.wait(timeout if timeout is not None else self._resync_interval)
            if not woke and timeout is not None:
                return
            fresh = self.poll()
            if fresh is not None:
                yield fresh

    def stop(self) -> None:
        self._stopped = True
        self._dirty.set()
        self._client.remove_listener(self._on_state)
        if self._owns_client:
            close(self._client)
