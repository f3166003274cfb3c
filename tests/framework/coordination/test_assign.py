"""The assignment algorithm: balanced within capacity bounds, and the fewest moves."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from dbus_fn.coordination._assign import assign_sources, moved_sources, quotas


def _fewest_moves(sources: list[str], capacities: dict[str, float], current: dict[str, str]) -> int:
    """Brute force: over every vector of counts within the bounds, the most sources kept."""
    shares = quotas(len(sources), capacities)
    runtimes = sorted(shares)
    owned = Counter(current[s] for s in sources if current.get(s) in shares)
    had_owner = sum(1 for s in sources if s in current)
    best = 0
    ranges = [range(shares[r].low, shares[r].high + 1) for r in runtimes]
    for counts in itertools.product(*ranges):
        if sum(counts) == len(sources):
            best = max(best, sum(min(owned[r], n) for r, n in zip(runtimes, counts, strict=True)))
    return had_owner - best


def _check(sources: list[str], capacities: dict[str, float], current: dict[str, str]) -> dict:
    result = assign_sources(sources, capacities, current)
    live = {r for r, c in capacities.items() if c > 0}
    assert set(result) == set(sources)
    assert set(result.values()) <= live
    shares = quotas(len(sources), capacities)
    load = Counter(result.values())
    for runtime in live:
        assert shares[runtime].low <= load[runtime] <= shares[runtime].high, (runtime, load)
    moved = moved_sources({s: r for s, r in current.items() if s in result}, result)
    assert len(moved) == _fewest_moves(sources, capacities, current)
    assert assign_sources(list(reversed(sources)), dict(capacities), dict(current)) == result
    return result


@pytest.mark.parametrize("seed", range(300))
def test_random_cases_are_balanced_and_move_the_fewest(seed: int) -> None:
    rng = random.Random(seed)
    runtimes = [f"rt-{i}" for i in range(rng.randint(1, 5))]
    capacities = {r: rng.choice([0, 0.5, 1, 1, 2, 3]) for r in runtimes}
    capacities[runtimes[0]] = rng.choice([1, 2])
    sources = [f"src-{i:02d}" for i in range(rng.randint(0, 14))]
    owners = [*runtimes, "gone-1", "gone-2"]
    current = {s: rng.choice(owners) for s in sources if rng.random() < 0.8}
    current.update({"removed-source": rng.choice(owners)})
    _check(sources, capacities, current)


def test_twelve_sources_on_three_runtimes_then_a_join_and_a_leave() -> None:
    sources = [f"s{i:02d}" for i in range(12)]
    three = {"a": 1.0, "b": 1.0, "c": 1.0}
    first = _check(sources, three, {})
    assert Counter(first.values()) == {"a": 4, "b": 4, "c": 4}

    joined = _check(sources, {**three, "d": 1.0}, first)
    assert len(moved_sources(first, joined)) == 3
    assert Counter(joined.values()) == {"a": 3, "b": 3, "c": 3, "d": 3}

    left = _check(sources, {"a": 1.0, "b": 1.0}, first)
    assert len(moved_sources(first, left)) == 4, "only the sources of the runtime that left"
    assert {s for s, r in first.items() if r == "c"} == moved_sources(first, left)


def test_capacity_weights_the_share() -> None:
    sources = [f"s{i}" for i in range(9)]
    result = _check(sources, {"big": 2.0, "small": 1.0}, {})
    assert Counter(result.values()) == {"big": 6, "small": 3}


def test_a_stable_cluster_moves_nothing() -> None:
    sources = [f"s{i}" for i in range(10)]
    first = _check(sources, {"a": 1, "b": 1, "c": 1}, {})
    assert assign_sources(sources, {"a": 1, "b": 1, "c": 1}, first) == first


def test_adding_and_removing_sources_moves_none_of_the_others() -> None:
    sources = [f"s{i}" for i in range(6)]
    first = _check(sources, {"a": 1, "b": 1}, {})
    grown = _check([*sources, "s6"], {"a": 1, "b": 1}, first)
    assert moved_sources(first, grown) == set()
    shrunk = _check(sources[1:], {"a": 1, "b": 1}, grown)
    assert len(moved_sources(grown, shrunk)) <= 1


def test_no_live_runtime_assigns_nothing() -> None:
    assert assign_sources(["s1"], {}, {"s1": "a"}) == {}
    assert assign_sources(["s1"], {"a": 0}, {"s1": "a"}) == {}
