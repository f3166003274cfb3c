"""``Coordinator``: one runtime's membership, leadership, owned sources and fenced commits.

A runtime makes one, ``start()``s it, and then per micro-batch reads
``owned_sources()`` (source -> epoch) and, once every sink has a batch, calls
``commit_position(source, position, epoch)``. Everything else happens on a
background thread:

* membership: an ephemeral ``runtimes/<id>`` node with host, pid and capacity;
* election: an ephemeral sequential ``election/member-`` node; the lowest is the
  leader. The leader's writes all carry a check of its own election node, so a
  leader whose session ended cannot write anything, even if it has not noticed;
* the leader assigns sources (``assign_sources``: sticky, weighted) whenever
  runtimes or sources change, and writes the whole decision with a new epoch in
  one transaction before anyone acts on it;
* every runtime watches ``assignments`` and owns what names it;
* a runtime with ``handoff`` h > 0 (its writes may stay in flight h seconds
  after a confirmed hold, see ``HoldCheck``) gives a source up in two steps:
  the leader releases it (the assignment names no runtime) and assigns it to
  the next owner only h seconds later (``_handoff``).

A commit is one transaction: the source's assignment node must still be at the
version this runtime read (so it still names this runtime, at this epoch) and
the position node at the version this runtime last wrote. A runtime that lost a
source, or whose session expired, cannot move its position: ``FencedError``.

Connection trouble: on SUSPENDED ``owned_sources()`` is empty (start no new
work), ``kept_sources()`` still names what the runtime owned (keep that work),
and commits of sources owned before are held in memory, newest per source;
when the same session reconnects they are flushed through the same fenced
transaction. On LOST (the session expired) all ownership and held
commits are dropped; the runtime registers again with a new session.

Where each part lives: the shared state in ``_state``, membership, election and
assignment in ``_leadership``, fenced and held commits in ``_commits``; this
module owns the lifecycle, the session events and the background thread.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError as KazooTimeout

from dbus_fn.coordination._client import (
    ZooKeeperSettings,
    close,
    connect,
    dump,
    load,
    require_cluster,
)
from dbus_fn.coordination._commits import Commits
from dbus_fn.coordination._leadership import Leadership
from dbus_fn.coordination._sources import SourceRegistry
from dbus_fn.coordination._state import RESYNC, TICK, SessionState, log
from dbus_fn.coordination._watcher import FunctionWatcher
from dbus_fn.errors import CoordinationError


class Coordinator(Commits, Leadership):
    """A runtime's view of the cluster; see the module docstring for the protocol."""

    @classmethod
    def from_settings(
        cls,
        settings: ZooKeeperSettings,
        runtime_id: str,
        capacity: float = 1.0,
        handoff: float = 0.0,
    ) -> Coordinator:
        """A coordinator for ``settings`` (e.g. ``ZooKeeperSettings.from_env(os.environ)``)."""
        return cls(
            settings.hosts,
            settings.cluster,
            runtime_id,
            capacity,
            settings=settings,
            handoff=handoff,
        )

    # -- lifecycle -----------------------------------------------------------

    def start(self, timeout: float | None = None) -> Coordinator:
        """Connect, register and wait until this runtime is a member (``timeout`` s,
        default connect + session timeout). Raises ``ZooKeeperUnavailableError``
        or ``ClusterNotFoundError`` with a one-line message."""
        client = connect(self.settings)
        try:
            require_cluster(client, self.settings)
        except BaseException:
            close(client)
            raise
        self._client = client
        self._hosts.follow(client)
        self._state = "connected"
        client.add_listener(self._on_state)
        self._thread = threading.Thread(
            target=self._run, name=f"dbus-coordinator-{self.runtime_id}", daemon=True
        )
        self._thread.start()
        limit = (
            timeout
            if timeout is not None
            else (self.settings.connect_timeout + self.settings.session_timeout)
        )
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with self._lock:
                if self._registered and self._confirmed:
                    return self
            time.sleep(0.02)
        problem = self._problem or "it did not register in time"
        self.stop()
        raise CoordinationError(
            f"runtime {self.runtime_id} could not join {self.settings.where()}: {problem}",
            cluster=self.settings.cluster,
        )

    def stop(self) -> None:
        """Leave the cluster: hand the sources back at once (the ephemeral nodes go).

        Commit before stopping: commits still held (ZooKeeper away) are dropped,
        and the next owner replays from the last committed position.
        """
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        client = self._client
        with self._lock:
            self._state = "stopped"
            self._owned.clear()
            self._confirmed = False
            self._leader = False
        self._hosts.follow(None)
        if client is not None:
            client.remove_listener(self._on_state)
            close(client)
        self._client = None

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a runtime asks -----------------------------------------------

    def kept_sources(self) -> dict[str, int]:
        """source -> epoch of the work this runtime may go on with (not start) now.

        What it owns while its view is confirmed, as ``owned_sources()``. While
        ZooKeeper is away, and after the same session is back until this
        runtime has read the assignments again, the sources it owned when the
        connection dropped: it keeps that work (its commits are held). Empty if
        the session was lost, or if the view was already stale when the
        connection dropped: a process that was paused past its session timeout
        wakes up to a session the server has ended, and its sources are
        someone else's by then.
        """
        with self._lock:
            if not (self._usable() or (self._keeping and self._state != "lost")):
                return {}
            return {name: own.epoch for name, own in sorted(self._owned.items())}

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._leader and self._state == "connected"

    @property
    def sources(self) -> SourceRegistry:
        """The cluster's sources (``.get(name).resolve_dsn()`` gives a DSN)."""
        return SourceRegistry(self.client, self.settings)

    def function_watcher(self, **options: Any) -> FunctionWatcher:
        """A ``FunctionWatcher`` on this coordinator's connection."""
        return FunctionWatcher(self.client, self.settings, **options).start()

    def replica_id(self, source: str, shard: int = 0) -> int:
        """The replication server id this runtime's reader of ``source`` must use;
        ``shard`` > 0: the id of that key shard's extra connection (``--decode-shards``).

        Claimed in ZooKeeper (an ephemeral ``server_ids/<id>``), so no two live
        readers in the cluster share one, not even the old and the new owner of
        a source during a handoff. Stable for a (source, shard, runtime) while
        that id is free; the claim ends with the session (ask again after one).
        """
        from dbus_fn.capture import replica_id_for

        reader = f"{source}/shard/{shard}" if shard else source
        with self._lock:
            if reader in self._replica_ids:
                return self._replica_ids[reader]
        client = self.client
        session = client.client_id[0] if client.client_id else None
        claim = dump({"runtime": self.runtime_id, "source": source, "shard": shard})
        for salt in range(64):
            candidate = replica_id_for(f"{reader}/{self.runtime_id}", salt=salt)
            path = self.layout.replica_id(candidate)
            try:
                client.create(path, claim, ephemeral=True, makepath=True, acl=self.settings.acl)
            except NodeExistsError:
                try:
                    raw, stat = client.get(path)
                except NoNodeError:
                    continue
                if load(raw) != load(claim) or stat.ephemeralOwner != session:
                    continue  # another reader's: try the next salt
            with self._lock:
                self._replica_ids[reader] = candidate
            return candidate
        raise CoordinationError(
            f"runtime {self.runtime_id}: no free replication server id for {reader} after 64 tries",
            cluster=self.settings.cluster,
        )

    def set_capacity(self, capacity: float) -> None:
        """Change this runtime's weight; the leader rebalances on its next pass."""
        self.capacity = float(capacity)
        self.client.set(self.layout.runtime(self.runtime_id), self._member_data())

    # -- session events (kazoo's thread: never block here) -----------------

    def _on_state(self, state: str) -> None:
        with self._lock:
            if self._state == "stopped":
                return
            if state == KazooState.SUSPENDED:
                fresh = time.monotonic() - self._last_ok <= self._stale_after
                # A drop before the same session was confirmed again keeps what
                # the first drop kept, if the thread has talked to ZooKeeper since.
                self._keeping = fresh and (self._confirmed or self._keeping)
                self._generation += 1
                self._confirmed = False
                self._state = "suspended"
                self._went_away()
                log.warning("runtime %s: ZooKeeper connection suspended", self.runtime_id)
            elif state == KazooState.LOST:
                self._generation += 1
                self._confirmed = False
                self._keeping = False
                self._state = "lost"
                dropped = sorted(self._owned)
                self._owned.clear()
                self._pending.clear()
                self._histories.clear()
                self._position_versions.clear()
                self._replica_ids.clear()
                self._registered = False
                self._election_node = None
                self._leader = False
                self._went_away()
                log.warning(
                    "runtime %s: ZooKeeper session lost%s; gave up %s",
                    self.runtime_id,
                    self._away(),
                    ", ".join(dropped) or "nothing",
                )
            else:
                if self._away_since is not None:
                    # Said once per outage: how long it took is what tells a slow
                    # reconnect from a ZooKeeper that was away long.
                    log.info(
                        "runtime %s: ZooKeeper connection back%s, %s",
                        self.runtime_id,
                        self._away(),
                        "same session" if self._state == "suspended" else "new session",
                    )
                    self._away_since = None
                self._hosts.back()
                self._state = "connected"
                self._assign_dirty = True
                self._rebalance_dirty = True
        self._wake.set()

    def _went_away(self) -> None:
        """The connection dropped or the session ended (lock held): note since when,
        once per outage, and let the servers be named often if it stays away."""
        if self._away_since is None:
            self._away_since = time.monotonic()
        self._hosts.away()

    def _away(self) -> str:
        """How long the connection has been away, for a log line (lock held)."""
        if self._away_since is None:
            return ""
        return f" after {time.monotonic() - self._away_since:.1f} s away"

    # -- the background thread ---------------------------------------------

    def _pause(self) -> float:
        """Until the next tick, or the next handoff the leader must finish if sooner."""
        with self._lock:
            due = self._handoff_due if self._leader else None
        if due is None:
            return TICK
        # A floor, so a rebalance that keeps failing is retried, not spun on.
        return min(TICK, max(0.05, due - time.monotonic()))

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self._pause())
            self._wake.clear()
            if self._stopping.is_set():
                break
            client = self._client
            if client is None or client.state != KazooState.CONNECTED:
                continue
            try:
                self._step()
                self._last_ok = time.monotonic()
            except (KazooException, KazooTimeout) as exc:
                if isinstance(exc, NoAuthError):
                    self._problem = (
                        "ZooKeeper refused access; the cluster has digest ACLs: give its "
                        "user:password (DBUS_ZK_AUTH)"
                    )
                log.info("runtime %s: will retry after %s", self.runtime_id, type(exc).__name__)
                with self._lock:
                    self._assign_dirty = True
                    self._rebalance_dirty = True
        self._leave()

    def _step(self) -> None:
        with self._lock:
            generation = self._generation
            registered = self._registered
        if not registered:
            self._register()
        self._lead()
        clock = time.monotonic()
        with self._lock:
            refresh = self._assign_dirty or clock - self._refreshed_at > RESYNC
            due = self._handoff_due
            rebalance = self._leader and (
                self._rebalance_dirty
                or clock - self._rebalanced_at > RESYNC
                or (due is not None and clock >= due)
            )
        if rebalance:
            self._rebalance()
        if refresh or rebalance:
            self._refresh(generation)
        self._flush()

