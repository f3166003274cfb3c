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
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError as KazooTimeout

from dbus_fn.coordination._assign import assign_sources
from dbus_fn.coordination._client import (
    ZooKeeperSettings,
    close,
    connect,
    dump,
    load,
    now,
    require_cluster,
)
from dbus_fn.coordination._handoff import (
    Assigned,
    Waiting,
    live_waiting,
    plan_handoffs,
    seconds,
)
from dbus_fn.coordination._layout import check_name
from dbus_fn.coordination._sources import SourceRegistry
from dbus_fn.coordination._watcher import FunctionWatcher
from dbus_fn.errors import CoordinationError, FencedError
from dbus_fn.events import BinlogPosition

log = logging.getLogger("dbus_fn.coordination")

CommitOutcome = Literal["committed", "held"]
SessionState = Literal["connected", "suspended", "lost", "stopped"]

_TICK = 0.5
_RESYNC = 5.0


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


class Coordinator:
    """A runtime's view of the cluster; see the module docstring for the protocol."""

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
        self.layout = self.settings.layout
        self._client: KazooClient | None = None
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._state: SessionState = "stopped"
        self._generation = 0  # bumped on every SUSPENDED/LOST: invalidates a confirmation
        self._confirmed = False
        # The connection dropped while this runtime's view was confirmed and fresh:
        # it keeps the work it had until the same session confirms it again.
        self._keeping = False
        self._owned: dict[str, Ownership] = {}
        self._position_versions: dict[str, int | None] = {}
        self._pending: dict[str, tuple[BinlogPosition, int]] = {}
        self._server_ids: dict[str, int] = {}
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
        self._stale_after = max(self.settings.session_timeout * 2 / 3, 4 * _TICK)
        # One callable each, so re-arming a watch never piles up callbacks in kazoo.
        self._on_assignments = self._dirty("assign")
        self._on_members = self._dirty("rebalance")

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
        if client is not None:
            client.remove_listener(self._on_state)
            close(client)
        self._client = None

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what a runtime asks -----------------------------------------------

    def owned_sources(self) -> dict[str, int]:
        """source -> epoch this runtime owns and may start work on now.

        Empty while the session is suspended or lost, until ownership is
        confirmed again.
        """
        with self._lock:
            if not self._usable():
                return {}
            return {name: own.epoch for name, own in sorted(self._owned.items())}

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

    def _usable(self) -> bool:
        """Connected, ownership confirmed, and heard from ZooKeeper recently (lock held)."""
        fresh = time.monotonic() - self._last_ok <= self._stale_after
        return self._state == "connected" and self._confirmed and fresh

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._leader and self._state == "connected"

    @property
    def held_commits(self) -> dict[str, tuple[BinlogPosition, int]]:
        """Commits waiting for ZooKeeper: source -> (position, epoch)."""
        with self._lock:
            return dict(self._pending)

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise CoordinationError(f"runtime {self.runtime_id}: the coordinator is not started")
        return self._client

    @property
    def sources(self) -> SourceRegistry:
        """The cluster's sources (``.get(name).resolve_dsn()`` gives a DSN)."""
        return SourceRegistry(self.client, self.settings)

    def function_watcher(self, **options: Any) -> FunctionWatcher:
        """A ``FunctionWatcher`` on this coordinator's connection."""
        return FunctionWatcher(self.client, self.settings, **options).start()

    def committed_position(self, source: str) -> CommittedPosition | None:
        """The source's committed position (None if none was ever committed)."""
        from dbus_fn.capture import position_from_json

        try:
            raw, _ = self.client.get(self.layout.position(source))
        except NoNodeError:
            return None
        data = load(raw)
        return CommittedPosition(
            position=position_from_json(data.get("position") or {}),
            epoch=int(data.get("epoch", 0)),
            runtime=str(data.get("runtime", "")),
            committed=str(data.get("committed", "")),
        )

    def commit_position(self, source: str, position: BinlogPosition, epoch: int) -> CommitOutcome:
        """Commit ``position`` for ``source``, owned at ``epoch``.

        "committed": written. "held": ZooKeeper is unreachable; kept in memory
        (newest per source) and written when the session returns, if this
        runtime still owns the source then. ``FencedError``: this runtime does
        not own the source at ``epoch``; nothing was written.
        """
        with self._lock:
            own = self._owned.get(source)
            if own is None or own.epoch != epoch:
                raise self._fenced(source, epoch, "it does not own the source at that epoch")
            if not self._usable():
                self._pending[source] = (position, epoch)
                self._wake.set()
                return "held"
            self._pending.pop(source, None)
        try:
            self._write_position(own, position)
        except (ConnectionLoss, KazooTimeout):
            with self._lock:
                if source in self._owned:
                    self._pending.setdefault(source, (position, epoch))
                    return "held"
            raise self._fenced(source, epoch, "ZooKeeper went away and ownership with it") from None
        except NoAuthError:
            raise CoordinationError(
                f"runtime {self.runtime_id}: ZooKeeper refused to write the position of "
                f"{source} in {self.settings.where()}; its ACL needs this runtime's "
                "credentials (DBUS_ZK_AUTH)",
                cluster=self.settings.cluster,
            ) from None
        return "committed"

    def server_id(self, source: str, shard: int = 0) -> int:
        """The replication server id this runtime's reader of ``source`` must use;
        ``shard`` > 0: the id of that key shard's extra connection (``--decode-shards``).

        Claimed in ZooKeeper (an ephemeral ``server_ids/<id>``), so no two live
        readers in the cluster share one, not even the old and the new owner of
        a source during a handoff. Stable for a (source, shard, runtime) while
        that id is free; the claim ends with the session (ask again after one).
        """
        from dbus_fn.capture import server_id_for

        reader = f"{source}/shard/{shard}" if shard else source
        with self._lock:
            if reader in self._server_ids:
                return self._server_ids[reader]
        client = self.client
        session = client.client_id[0] if client.client_id else None
        claim = dump({"runtime": self.runtime_id, "source": source, "shard": shard})
        for salt in range(64):
            candidate = server_id_for(f"{reader}/{self.runtime_id}", salt=salt)
            path = self.layout.server_id(candidate)
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
                self._server_ids[reader] = candidate
            return candidate
        raise CoordinationError(
            f"runtime {self.runtime_id}: no free replication server id for {reader} after 64 tries",
            cluster=self.settings.cluster,
        )

    def set_capacity(self, capacity: float) -> None:
        """Change this runtime's weight; the leader rebalances on its next pass."""
        self.capacity = float(capacity)
        self.client.set(self.layout.runtime(self.runtime_id), self._member_data())

    # -- fenced write ------------------------------------------------------

    def _write_position(self, own: Ownership, position: BinlogPosition) -> None:
        from dbus_fn.capture import position_to_json

        source = own.source
        data = dump(
            {
                "position": position_to_json(position),
                "epoch": own.epoch,
                "runtime": self.runtime_id,
                "committed": now(),
            }
        )
        for _ in range(3):
            with self._lock:
                expected = self._position_versions.get(source, None)
                known = source in self._position_versions
            if not known:
                stat = self.client.exists(self.layout.position(source))
                expected = None if stat is None else stat.version
            tx = self.client.transaction()
            tx.check(self.layout.assignment(source), own.assignment_version)
            if expected is None:
                tx.create(self.layout.position(source), data, acl=self.settings.acl)
            else:
                tx.set_data(self.layout.position(source), data, version=expected)
            try:
                results = tx.commit()
            except SessionExpiredError:
                raise self._fenced(source, own.epoch, "its ZooKeeper session expired") from None
            check, write = results[0], results[1]
            # In a failed transaction the ops that did not fail report RolledBackError.
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                with self._lock:
                    if self._owned.get(source) == own:
                        del self._owned[source]
                    self._assign_dirty = True
                self._wake.set()
                raise self._fenced(source, own.epoch, "the source was assigned elsewhere")
            if not isinstance(write, Exception):
                with self._lock:
                    self._position_versions[source] = 0 if expected is None else expected + 1
                return
            # The position node moved. If the last write that landed is this
            # runtime's own at this epoch (a reply lost to a dropped connection),
            # adopt its version; anybody else's write means we are fenced.
            try:
                raw, stat = self.client.get(self.layout.position(source))
            except NoNodeError:
                with self._lock:
                    self._position_versions[source] = None
                continue
            found = load(raw)
            if found.get("runtime") == self.runtime_id and found.get("epoch") == own.epoch:
                with self._lock:
                    self._position_versions[source] = stat.version
                continue
            raise self._fenced(source, own.epoch, f"runtime {found.get('runtime')} wrote it since")
        raise self._fenced(source, own.epoch, "the position kept changing under this runtime")

    def _fenced(self, source: str, epoch: int | None, why: str) -> FencedError:
        return FencedError(
            f"runtime {self.runtime_id} may not commit a position for source {source} at epoch "
            f"{epoch}: {why}; stop working on it (owned now: "
            f"{', '.join(self.owned_sources()) or 'none'})",
            source=source,
            runtime=self.runtime_id,
            epoch=epoch,
        )

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
                log.warning("runtime %s: ZooKeeper connection suspended", self.runtime_id)
            elif state == KazooState.LOST:
                self._generation += 1
                self._confirmed = False
                self._keeping = False
                self._state = "lost"
                dropped = sorted(self._owned)
                self._owned.clear()
                self._pending.clear()
                self._position_versions.clear()
                self._server_ids.clear()
                self._registered = False
                self._election_node = None
                self._leader = False
                log.warning(
                    "runtime %s: ZooKeeper session lost; gave up %s",
                    self.runtime_id,
                    ", ".join(dropped) or "nothing",
                )
            else:
                self._state = "connected"
                self._assign_dirty = True
                self._rebalance_dirty = True
        self._wake.set()

    def _dirty(self, *what: str) -> Callable[[Any], None]:
        def mark(_event: Any) -> None:
            with self._lock:
                if "assign" in what:
                    self._assign_dirty = True
                if "rebalance" in what:
                    self._rebalance_dirty = True
            self._wake.set()

        return mark

    # -- the background thread ---------------------------------------------

    def _pause(self) -> float:
        """Until the next tick, or the next handoff the leader must finish if sooner."""
        with self._lock:
            due = self._handoff_due if self._leader else None
        if due is None:
            return _TICK
        # A floor, so a rebalance that keeps failing is retried, not spun on.
        return min(_TICK, max(0.05, due - time.monotonic()))

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
        now_ = time.monotonic()
        with self._lock:
            refresh = self._assign_dirty or now_ - self._refreshed_at > _RESYNC
            due = self._handoff_due
            rebalance = self._leader and (
                self._rebalance_dirty
                or now_ - self._rebalanced_at > _RESYNC
                or (due is not None and now_ >= due)
            )
        if rebalance:
            self._rebalance()
        if refresh or rebalance:
            self._refresh(generation)
        self._flush()

    def _member_data(self) -> bytes:
        return dump(
            {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "capacity": self.capacity,
                "handoff": self.handoff,
                "started": now(),
            }
        )

    def _register(self) -> None:
        client = self.client
        session = client.client_id[0] if client.client_id else None
        path = self.layout.runtime(self.runtime_id)
        try:
            client.create(path, self._member_data(), ephemeral=True, acl=self.settings.acl)
        except NodeExistsError:
            stat = client.exists(path)
            if stat is not None and stat.ephemeralOwner != session:
                self._problem = (
                    f"runtime id {self.runtime_id} is registered by another live session "
                    "(a second runtime with this id, or one that died less than a session "
                    "timeout ago); give each runtime its own id"
                )
                raise NodeExistsError() from None
        node = self._own_election_node(session) or client.create(
            self.layout.election + "/member-",
            self.runtime_id.encode(),
            ephemeral=True,
            sequence=True,
            acl=self.settings.acl,
        )
        with self._lock:
            self._election_node = node
            self._registered = True
            self._problem = None
        client.get_children(self.layout.runtimes, watch=self._on_members)
        log.info("runtime %s: joined %s", self.runtime_id, self.settings.where())

    def _own_election_node(self, session: int | None) -> str | None:
        """This session's election node, if a create whose reply was lost made one.

        Without this, a retried create would leave a second node of ours in the
        queue, and a node of ours ahead of us would keep us waiting forever.
        """
        client = self.client
        mine = []
        for name in sorted(client.get_children(self.layout.election)):
            stat = client.exists(f"{self.layout.election}/{name}")
            if stat is not None and stat.ephemeralOwner == session:
                mine.append(f"{self.layout.election}/{name}")
        for extra in mine[1:]:
            with contextlib.suppress(NoNodeError):
                client.delete(extra)
        return mine[0] if mine else None

    def _lead(self) -> None:
        client = self.client
        with self._lock:
            mine = self._election_node
        if mine is None:
            return
        members = sorted(client.get_children(self.layout.election), key=lambda n: n[-10:])
        name = mine.rsplit("/", 1)[1]
        if name not in members:
            with self._lock:
                self._registered = False
            return
        index = members.index(name)
        if index > 0:
            predecessor = f"{self.layout.election}/{members[index - 1]}"
            if client.exists(predecessor, watch=self._on_members) is None:
                self._wake.set()
            return
        with self._lock:
            if self._leader:
                return
        try:
            raw, stat = client.get(self.layout.leader)
        except NoNodeError:
            raw, stat = b"", None
        term = int(load(raw).get("term", 0)) + 1
        data = dump({"runtime": self.runtime_id, "term": term, "since": now()})
        tx = client.transaction()
        tx.check(mine, 0)
        if stat is None:
            tx.create(self.layout.leader, data, acl=self.settings.acl)
        else:
            tx.set_data(self.layout.leader, data, version=stat.version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            self._wake.set()
            return
        with self._lock:
            self._leader = True
            self._term = term
            self._rebalance_dirty = True
        log.info("runtime %s: leader, term %d", self.runtime_id, term)

    def _rebalance(self) -> None:
        client = self.client
        with self._lock:
            mine = self._election_node
            self._rebalance_dirty = False
            self._rebalanced_at = time.monotonic()
        if mine is None:
            return
        layout = self.layout
        capacities: dict[str, float] = {}
        handoffs: dict[str, float] = {}
        for runtime in client.get_children(layout.runtimes, watch=self._on_members):
            try:
                # Watched too: a capacity change rebalances at once.
                raw, _ = client.get(layout.runtime(runtime), watch=self._on_members)
            except NoNodeError:
                continue
            member = load(raw)
            capacities[runtime] = float(member.get("capacity", 1.0))
            handoffs[runtime] = seconds(member.get("handoff", 0.0))
        sources = client.get_children(layout.sources, watch=self._on_members)
        raw, decision_stat = client.get(layout.assignments)
        epoch = int(load(raw).get("epoch", 0))
        current: dict[str, Assigned] = {}
        for source in client.get_children(layout.assignments):
            try:
                data, stat = client.get(layout.assignment(source))
            except NoNodeError:
                continue
            found = load(data)
            current[source] = Assigned(
                runtime=str(found.get("runtime", "")),
                epoch=int(found.get("epoch", 0)),
                handoff=seconds(found.get("handoff", 0.0)),
                version=stat.version,
            )
        # A released source counts as unowned: it goes wherever there is room.
        owners = {s: held.runtime for s, held in current.items() if held.runtime}
        wanted = assign_sources(sources, capacities, owners)
        started = time.monotonic()
        with self._lock:
            self._waiting = live_waiting(self._waiting, current, started)
            plan = plan_handoffs(current, wanted, handoffs, self._waiting, started)
            self._waiting.update(plan.learned)
            self._handoff_due = plan.next_due
        if not (plan.assign or plan.release or plan.delete):
            return
        tx = client.transaction()
        tx.check(mine, 0)
        new_epoch = epoch + 1
        tx.set_data(
            layout.assignments,
            dump({"epoch": new_epoch, "leader": self.runtime_id, "term": self._term}),
            version=decision_stat.version,
        )
        values = {
            source: {"runtime": runtime, "epoch": new_epoch, "handoff": handoffs.get(runtime, 0.0)}
            for source, runtime in plan.assign.items()
        }
        released = now()
        for source, (_, handoff) in plan.release.items():
            values[source] = {
                "runtime": "",
                "epoch": new_epoch,
                "handoff": handoff,
                "released": released,
            }
        for source, value in sorted(values.items()):
            if source in current:
                path = layout.assignment(source)
                tx.set_data(path, dump(value), version=current[source].version)
            else:
                tx.create(layout.assignment(source), dump(value), acl=self.settings.acl)
        for source in sorted(plan.delete):
            tx.delete(layout.assignment(source), version=current[source].version)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            with self._lock:
                self._rebalance_dirty = True
            self._wake.set()
            return
        committed = time.monotonic()
        with self._lock:
            for source in plan.assign:
                self._waiting.pop(source, None)
            # The old owner's hold certainly ended no later than this commit.
            for source, (_, handoff) in plan.release.items():
                self._waiting[source] = Waiting(new_epoch, committed + handoff)
            for source, handoff in plan.delete.items():
                if handoff > 0:
                    self._waiting[source] = Waiting(None, committed + handoff)
            dues = [committed + handoff for _, handoff in plan.release.values()]
            if plan.next_due is not None:
                dues.append(plan.next_due)
            self._handoff_due = min(dues, default=None)
        self.rebalances += 1
        for source, (owner, handoff) in sorted(plan.release.items()):
            log.info(
                "runtime %s: released %s from %s at epoch %d; handing off in %g s",
                self.runtime_id,
                source,
                owner,
                new_epoch,
                handoff,
            )
        log.info(
            "runtime %s: epoch %d: assigned %d (new or moved), released %d, unassigned %d; "
            "%d sources over %d runtimes",
            self.runtime_id,
            new_epoch,
            len(plan.assign),
            len(plan.release),
            len(plan.delete),
            len(wanted),
            len(capacities),
        )

    def _refresh(self, generation: int) -> None:
        client = self.client
        layout = self.layout
        with self._lock:
            self._assign_dirty = False
        client.get(layout.assignments, watch=self._on_assignments)
        owned: dict[str, Ownership] = {}
        for source in client.get_children(layout.assignments, watch=self._on_assignments):
            try:
                raw, stat = client.get(layout.assignment(source))
            except NoNodeError:
                continue
            data = load(raw)
            if data.get("runtime") == self.runtime_id:
                owned[source] = Ownership(source, int(data.get("epoch", 0)), stat.version)
        positions: dict[str, int | None] = {}
        with self._lock:
            fresh = [s for s, own in owned.items() if self._owned.get(s) != own]
        for source in fresh:
            stat = client.exists(layout.position(source))
            positions[source] = None if stat is None else stat.version
        with self._lock:
            if generation != self._generation or self._state != "connected":
                self._assign_dirty = True
                return
            gained = sorted(set(owned) - set(self._owned))
            lost = sorted(set(self._owned) - set(owned))
            for source in lost:
                self._pending.pop(source, None)
                self._position_versions.pop(source, None)
            self._position_versions.update(positions)
            self._owned = owned
            self._confirmed = True
            self._keeping = False
            self._refreshed_at = self._last_ok = time.monotonic()
        if gained or lost:
            log.info(
                "runtime %s: owns %s (gained %s, lost %s)",
                self.runtime_id,
                ", ".join(sorted(owned)) or "nothing",
                ", ".join(gained) or "-",
                ", ".join(lost) or "-",
            )

    def _flush(self) -> None:
        with self._lock:
            if not self._confirmed or self._state != "connected":
                return
            pending = list(self._pending.items())
        for source, (position, epoch) in pending:
            with self._lock:
                if self._pending.get(source) != (position, epoch):
                    continue
                own = self._owned.get(source)
                del self._pending[source]
            if own is None or own.epoch != epoch:
                log.warning(
                    "runtime %s: dropped a held commit of %s: no longer its owner at epoch %d",
                    self.runtime_id,
                    source,
                    epoch,
                )
                continue
            try:
                self._write_position(own, position)
            except FencedError as exc:
                log.warning("runtime %s: dropped a held commit: %s", self.runtime_id, exc)
            except (ConnectionLoss, KazooTimeout):
                with self._lock:
                    self._pending.setdefault(source, (position, epoch))
                return
            log.info(
                "runtime %s: flushed the held commit of %s at epoch %d",
                self.runtime_id,
                source,
                epoch,
            )

    def _leave(self) -> None:
        client = self._client
        if client is None or client.state != KazooState.CONNECTED:
            return
        with self._lock:
            node = self._election_node
        for path in (node, self.layout.runtime(self.runtime_id)):
            if path is None:
                continue
            try:
                client.delete(path)
            except (NoNodeError, BadVersionError):
                pass
            except KazooException:
                return
