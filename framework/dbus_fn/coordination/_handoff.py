"""Handing a source to a new owner only once the old owner's writes are over.

A runtime that advertises ``handoff`` h > 0 seconds may make writes visible for
up to h seconds after its last confirmed hold of a source (``HoldCheck``). So
when such a source must change owner, the leader first *releases* it (the
assignment names no runtime) and assigns it only h seconds after that release
was committed; or, for a release it did not make itself (it became leader
since), h seconds after it first saw it. A source whose assignment was deleted
while held waits out the rest of its h if it comes back.

``plan_handoffs`` is the pure part: from the assignment in ZooKeeper and the
wanted one it says what to write now and what must wait. The leader keeps
``Waiting`` entries in memory between rebalances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Assigned:
    """One ``assignments/<source>`` node as read: ``runtime`` is "" while released."""

    runtime: str
    epoch: int
    handoff: float
    version: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """A source that may have a new owner at ``due`` (the leader's monotonic clock).

    ``epoch`` is that of the released assignment it belongs to; None when the
    assignment was deleted (the source was removed, or no runtime was left).
    """

    epoch: int | None
    due: float


@dataclass(slots=True)
class HandoffPlan:
    """What one rebalance writes, and what waits."""

    assign: dict[str, str] = field(default_factory=dict)
    """source -> runtime, written now (created, moved, or at the end of a handoff)."""
    release: dict[str, tuple[str, float]] = field(default_factory=dict)
    """source -> (owner it is taken from, handoff): written as released now."""
    delete: dict[str, float] = field(default_factory=dict)
    """source -> handoff to wait from the deletion if it comes back (0: none)."""
    learned: dict[str, Waiting] = field(default_factory=dict)
    """Releases this leader had not known of: they wait from now."""
    next_due: float | None = None
    """When the first source held back may be assigned."""

    def hold_back(self, due: float) -> None:
        self.next_due = due if self.next_due is None else min(self.next_due, due)


def seconds(value: object) -> float:
    """A handoff read from ZooKeeper: finite and >= 0, else 0."""
    try:
        found = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0
    return found if 0 <= found < float("inf") else 0.0


def live_waiting(
    waiting: Mapping[str, Waiting], current: Mapping[str, Assigned], now: float
) -> dict[str, Waiting]:
    """The entries still worth keeping: not yet due, or due for a release still in place."""
    return {
        source: entry
        for source, entry in waiting.items()
        if entry.due > now
        or (
            source in current
            and not current[source].runtime
            and current[source].epoch == entry.epoch
        )
    }


def plan_handoffs(
    current: Mapping[str, Assigned],
    wanted: Mapping[str, str],
    handoffs: Mapping[str, float],
    waiting: Mapping[str, Waiting],
    now: float,
) -> HandoffPlan:
    """Turn the wanted assignment into this rebalance's writes.

    ``handoffs`` is what each live runtime advertises. A source that moves away
    from an owner with a handoff (recorded in its assignment, or advertised now:
    the larger) is released instead; a released one, or one deleted while held,
    is assigned once its ``Waiting`` entry is due. With no handoffs anywhere
    this is the plain diff: every change is written at once.
    """
    plan = HandoffPlan()
    for source, runtime in sorted(wanted.items()):
        held = current.get(source)
        if held is not None and held.runtime == runtime:
            continue
        if held is not None and held.runtime:
            handoff = max(held.handoff, handoffs.get(held.runtime, 0.0))
            if handoff > 0:
                plan.release[source] = (held.runtime, handoff)
            else:
                plan.assign[source] = runtime
            continue
        entry = waiting.get(source)
        if held is not None and (entry is None or entry.epoch != held.epoch):
            # A release this leader did not make: a whole handoff from now.
            entry = None
            if held.handoff > 0:
                entry = plan.learned[source] = Waiting(held.epoch, now + held.handoff)
        if entry is not None and entry.due > now:
            plan.hold_back(entry.due)
            continue
        plan.assign[source] = runtime
    for source, held in sorted(current.items()):
        if source in wanted:
            continue
        if held.runtime:
            plan.delete[source] = max(held.handoff, handoffs.get(held.runtime, 0.0))
            continue
        plan.delete[source] = 0.0
        entry = waiting.get(source)
        if held.handoff > 0 and (entry is None or entry.epoch != held.epoch):
            plan.learned[source] = Waiting(None, now + held.handoff)
        elif entry is not None:
            plan.learned[source] = Waiting(None, entry.due)
    return plan
