"""The state one runtime's coordinator shares among its parts: session, ownership, leadership."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kazoo.client import KazooClient

from dbus_fn.coordination._client import AwayHosts, ZooKeeperSettings
from dbus_fn.coordination._handoff import Waiting
from dbus_fn.coordination._layout import check_name
from dbus_fn.errors import CoordinationError, FencedError
from dbus_fn.events import BinlogPosition

log = logging.getLogger("dbus_fn.coordination")

CommitOutcome = Literal["committed", "held"]
SessionState = Literal["connected", "suspended", "lost", "stopped"]

TICK = 0.5
"""Seconds between the background thread's passes when nothing wakes it."""
RESYNC = 5.0
"""Seconds after which assignments are read again even if no watch fired."""


@dataclass(frozen=True, slots=True)
class Ownership:
    """One owned source: the epoch it was assigned at, and the assignment node's version."""

    source: str
    epoch: int
    assignment_version: int


@dataclass(frozen=True, slots=True)
class CommittedPosition:
    """A source's committed position and who committed it at which epoch."""

    position: BinlogPosition
    epoch: int
    runtime: str
    committed: str
    history: dict[str, Any] | None = None
    """The runtime's history progress for the source (chunks read, per deployment and
    table), committed with the position: it moves with the source."""


class CoordinatorState:
    """What a ``Coordinator``'s parts (commits, leadership, the session) read and write,
    always under ``_lock``."""

    def __init__(
        self,
        zk_hosts: str,
        cluster: str,
        runtime_id: str,
        capacity: float = 1.0,
        *,
        auth: str | None = None,
        root: str | None = None,
        session_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        settings: ZooKeeperSettings | None = None,
        handoff: float = 0.0,
    ) -> None:
        self.settings = settings or ZooKeeperSettings(
            hosts=zk_hosts,
            cluster=cluster,
            auth=auth,
            root=root,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
        )
        self.runtime_id = check_name(runtime_id, "runtime id")
        if not capacity >= 0:
            raise CoordinationError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = float(capacity)
        if not (handoff >= 0 and math.isfinite(handoff)):
            raise CoordinationError(f"handoff must be finite seconds >= 0, got {handoff!r}")
        # Seconds this runtime's writes may stay in flight after a confirmed hold.
        self.handoff = float(handoff)
        self.api = ""
        """Where this runtime serves its metrics, API and dashboard (registered with
        its membership, for ``dbus cluster status``); set before ``start``."""
        self.layout = self.settings.layout
        self._client: KazooClient | None = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: SessionState = "stopped"
        self._away_since: float | None = None  # monotonic: when the connection dropped
        # The servers kazoo reconnects with: named often once away a while.
        self._hosts = AwayHosts(self.settings)
        self._generation = 0  # bumped on every SUSPENDED/LOST: invalidates a confirmation
        self._confirmed = False
        # The connection dropped while this runtime's view was confirmed and fresh:
        # it keeps the work it had until the same session confirms it again.
        self._keeping = False
        self._owned: dict[str, Ownership] = {}
        self._position_versions: dict[str, int | None] = {}
        self._pending: dict[str, tuple[BinlogPosition, int]] = {}
        self._histories: dict[str, dict[str, Any]] = {}
        self._replica_ids: dict[str, int] = {}
        self._registered = False
        self._election_node: str | None = None
        self._leader = False
        self._term: int | None = None
        self._assign_dirty = True
        self._rebalance_dirty = True
        self._refreshed_at = 0.0
        self._rebalanced_at = 0.0
        self._problem: str | None = None
        self.rebalances = 0
        # Leader memory of handoffs: sources that may have a new owner only at
        # their due time, and the first due one (the thread wakes for it).
        self._waiting: dict[str, Waiting] = {}
        self._handoff_due: float | None = None
        self._last_ok = 0.0  # monotonic time of the last step that talked to ZooKeeper
        # A paused process (SIGSTOP, a long GC or swap) wakes up believing it is
        # connected; past this age its view counts as unconfirmed until the
        # background thread talks to ZooKeeper again. Kazoo itself declares the
        # connection lost after 2/3 of the session timeout without an answer.
        self._stale_after = max(self.settings.session_timeout * 2 / 3, 4 * TICK)
        # One callable each, so re-arming a watch never piles up callbacks in kazoo.
        self._on_assignments = self._dirty("assign")
        self._on_members = self._dirty("rebalance")

    def owned_sources(self) -> dict[str, int]:
        """source -> epoch this runtime owns and may start work on now.

        Empty while the session is suspended or lost, until ownership is
        confirmed again.
        """
        with self._lock:
            if not self._usable():
                return {}
            return {name: own.epoch for name, own in sorted(self._owned.items())}

    def _usable(self) -> bool:
        """Connected, ownership confirmed, and heard from ZooKeeper recently (lock held)."""
        fresh = time.monotonic() - self._last_ok <= self._stale_after
        return self._state == "connected" and self._confirmed and fresh

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise CoordinationError(f"runtime {self.runtime_id}: the coordinator is not started")
        return self._client

    def _dirty(self, *what: str) -> Callable[[Any], None]:
        def mark(_event: Any) -> None:
            with self._lock:
                if "assign" in what:
                    self._assign_dirty = True
                if "rebalance" in what:
                    self._rebalance_dirty = True
            self._wake.set()

        return mark

    def _fenced(self, source: str, epoch: int | None, why: str) -> FencedError:
        return FencedError(
            f"runtime {self.runtime_id} may not commit a position for source {source} at epoch "
            f"{epoch}: {why}; stop working on it (owned now: "
            f"{', '.join(self.owned_sources()) or 'none'})",
            source=source,
            runtime=self.runtime_id,
            epoch=epoch,
        )
