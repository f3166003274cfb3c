"""Which runtime reads which source: sticky, weighted by capacity, pure.

Each live runtime gets a share of the sources in proportion to its capacity,
rounded down or up (``quotas``). Within those bounds the assignment keeps as
many sources where they are as possible: a runtime keeps up to its quota of
what it already owns, and only the rest (sources of runtimes that left, new
sources, and a full runtime's surplus) move. This is the fewest moves any
assignment within the bounds can make; ``tests/.../test_assign.py`` checks it
against a brute-force search.

Ties are broken by name, so every leader computes the same assignment.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class Quota:
    """How many sources one runtime should own: ``low`` or ``high`` (one more, at most)."""

    ideal: Fraction
    low: int
    high: int


def quotas(count: int, capacities: Mapping[str, float]) -> dict[str, Quota]:
    """Each live runtime's share of ``count`` sources (capacity <= 0: none)."""
    live = {r: Fraction(c) for r, c in capacities.items() if c > 0 and math.isfinite(c)}
    total = sum(live.values(), Fraction(0))
    result = {}
    for runtime, capacity in live.items():
        ideal = count * capacity / total
        result[runtime] = Quota(ideal, math.floor(ideal), math.ceil(ideal))
    return result


def assign_sources(
    sources: Iterable[str], capacities: Mapping[str, float], current: Mapping[str, str]
) -> dict[str, str]:
    """source -> runtime for every source, over the runtimes with a positive capacity.

    ``current`` is the assignment in force (it may name runtimes that are gone
    and sources that were removed). No live runtime: nothing is assigned.
    """
    wanted = sorted(set(sources))
    shares = quotas(len(wanted), capacities)
    if not shares or not wanted:
        return {}
    runtimes = sorted(shares)
    owned: dict[str, list[str]] = {r: [] for r in runtimes}
    for source in wanted:
        owner = current.get(source)
        if owner in owned:
            owned[owner].append(source)
    # Targets: as close to what each owns as the bounds allow, then fixed up to sum
    # to the number of sources. Lowering a target below what a runtime owns costs
    # one move each, so lower the most loaded first; raising costs nothing.
    target = {r: min(max(len(owned[r]), shares[r].low), shares[r].high) for r in runtimes}
    surplus = sum(target.values()) - len(wanted)
    while surplus > 0:
        runtime = min(
            (r for r in runtimes if target[r] > shares[r].low),
            key=lambda r: (shares[r].ideal - target[r], r),
        )
        target[runtime] -= 1
        surplus -= 1
    while surplus < 0:
        runtime = max(
            (r for r in runtimes if target[r] < shares[r].high),
            key=lambda r: (shares[r].ideal - target[r], _reverse(r)),
        )
        target[runtime] += 1
        surplus += 1
    assignment: dict[str, str] = {}
    for runtime in runtimes:
        for source in owned[runtime][: target[runtime]]:
            assignment[source] = runtime
    count = {r: sum(1 for owner in assignment.values() if owner == r) for r in runtimes}
    for source in wanted:
        if source in assignment:
            continue
        runtime = max(runtimes, key=lambda r: (target[r] - count[r], _reverse(r)))
        assignment[source] = runtime
        count[runtime] += 1
    return assignment


def _reverse(name: str) -> tuple[int, ...]:
    """A key that orders names backwards, so ``max`` picks the first name on a tie."""
    return (*(-ord(ch) for ch in name), 1)


def moved_sources(before: Mapping[str, str], after: Mapping[str, str]) -> set[str]:
    """Sources that had an owner before and have another one (or none) now."""
    return {s for s, owner in before.items() if s in after and after[s] != owner}
