"""Membership and leadership of one runtime: registering, the election, and the leader's
assignment of sources (with handoffs); every runtime reads what it owns from it."""

from __future__ import annotations

import contextlib
import os
import socket
import time

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)

from dbus_fn.coordination._assign import assign_sources
from dbus_fn.coordination._client import dump, load, utc_timestamp
from dbus_fn.coordination._handoff import (
    Assigned,
    Waiting,
    live_waiting,
    plan_handoffs,
    seconds,
)
from dbus_fn.coordination._state import CoordinatorState, Ownership, log


class Leadership(CoordinatorState):
    """Joins the cluster, runs for leader, assigns sources when leading, reads assignments."""

    def _member_data(self) -> bytes:
        data: dict[str, object] = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "capacity": self.capacity,
            "handoff": self.handoff,
            "started": utc_timestamp(),
        }
        if self.api:
            data["api"] = self.api
        return dump(data)

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
        data = dump({"runtime": self.runtime_id, "term": term, "since": utc_timestamp()})
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
        released = utc_timestamp()
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
                self._histories.pop(source, None)
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
