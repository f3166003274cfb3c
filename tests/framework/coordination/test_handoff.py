"""Handoffs against the real ZooKeeper: released sources wait, and ``HoldCheck``."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from coordination_support import SESSION, assignments, expire_session, register_sources
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from support import wait_until

from dbus_fn.coordination import (
    Coordinator,
    HoldCheck,
    SourceReference,
    SourceRegistry,
    ZooKeeperSettings,
    cluster_status,
)
from dbus_fn.errors import CoordinationError, ZooKeeperUnavailableError

pytestmark = pytest.mark.integration

HANDOFF = 2.0


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a node as a poll first saw it (data None: no node)."""

    data: dict[str, Any] | None
    mtime: int | None
    """ms since the epoch, by the ZooKeeper server's clock, of the write."""


def follow(
    client: KazooClient,
    path: str,
    done: Callable[[dict[str, Any] | None], bool],
    within: float,
    poke: Callable[[], None] = lambda: None,
    then: Callable[[], None] = lambda: None,
) -> list[Version]:
    """Every version of ``path`` seen, polled each 10 ms, until ``done(data)``;
    ``then()`` once the first version is seen, ``poke()`` every tenth poll."""
    seen: list[Version] = []
    last: int | None = -1
    deadline = time.monotonic() + within
    polls = 0
    while time.monotonic() < deadline:
        polls += 1
        if polls % 10 == 0:
            poke()
        try:
            raw, stat = client.get(path)
            data, mzxid, mtime = json.loads(raw), stat.mzxid, stat.mtime
        except NoNodeError:
            data, mzxid, mtime = None, None, None
        if mzxid != last:
            seen.append(Version(data, mtime))
            last = mzxid
        if polls == 1:
            then()
        if done(data):
            return seen
        time.sleep(0.01)
    raise AssertionError(f"not within {within} s: {path} reached the state wanted; saw {seen}")


def _node(client: KazooClient, path: str) -> dict[str, Any]:
    return dict(json.loads(client.get(path)[0]))


def _released_by(
    client: KazooClient, cluster: ZooKeeperSettings, decision: dict[str, Any] | None
) -> bool:
    """A source is released, and ``decision`` (read just before) is the one that did it.

    The decision and the per-source nodes change in one transaction, but they are
    read one after the other: a decision read just before that transaction must not
    be taken for it.
    """
    released = [s for s, r in assignments(client, cluster).items() if r == ""]
    if not released or decision is None:
        return False
    return bool(_node(client, cluster.layout.assignment(released[0]))["epoch"] == decision["epoch"])


def _rebalance_now(leader: Coordinator) -> Callable[[], None]:
    """A member data change: the leader rebalances at once (a handoff must still wait)."""
    return lambda: leader.set_capacity(leader.capacity)


def _leader_and_holder(
    client: KazooClient, cluster: ZooKeeperSettings, runtimes: Any, sources: int
) -> tuple[Coordinator, Coordinator]:
    """``sources`` sources over rt-a (the leader, no handoff) and rt-b (``HANDOFF``)."""
    register_sources(client, cluster, sources)
    a = runtimes("rt-a")
    b = runtimes("rt-b", handoff=HANDOFF)
    each = sources // 2
    wait_until(lambda: len(a.owned_sources()) == len(b.owned_sources()) == each, 10, "shared")
    assert a.is_leader
    return a, b


def _owners(coordinators: list[Coordinator]) -> dict[str, set[str]]:
    return {c.runtime_id: set(c.owned_sources()) | set(c.kept_sources()) for c in coordinators}


def test_a_negative_handoff_is_refused(cluster: ZooKeeperSettings) -> None:
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(CoordinationError, match="handoff must be finite seconds >= 0") as err:
            Coordinator.from_settings(cluster, "rt-a", handoff=bad)
        assert "\n" not in str(err.value)


def test_the_handoff_is_published_in_the_member_node_and_the_assignment(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    _leader_and_holder(client, cluster, runtimes, 2)
    assert _node(client, cluster.layout.runtime("rt-a"))["handoff"] == 0.0
    assert _node(client, cluster.layout.runtime("rt-b"))["handoff"] == HANDOFF
    for runtime, handoff in (("rt-a", 0.0), ("rt-b", HANDOFF)):
        (source,) = [s for s, r in assignments(client, cluster).items() if r == runtime]
        node = _node(client, cluster.layout.assignment(source))
        assert node == {"runtime": runtime, "epoch": node["epoch"], "handoff": handoff}


def test_a_stopped_owner_s_sources_stay_released_for_its_handoff(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    a, b = _leader_and_holder(client, cluster, runtimes, 4)
    first, second = sorted(b.owned_sources())
    epoch = b.owned_sources()[first]

    path = cluster.layout.assignment(first)
    # b stops once its assignment is seen: every change from there on is followed.
    seen = follow(
        client, path, lambda d: bool(d) and d["runtime"] == "rt-a", HANDOFF + 10,
        _rebalance_now(a), then=b.stop,
    )  # fmt: skip
    released = next(v for v in seen if v.data and v.data["runtime"] == "")
    assigned = seen[-1]
    assert released.data is not None and assigned.data is not None
    assert released.data["handoff"] == HANDOFF and released.data["epoch"] > epoch
    assert released.data["released"].endswith("Z")
    assert assigned.data == {"runtime": "rt-a", "epoch": assigned.data["epoch"], "handoff": 0.0}
    assert assigned.data["epoch"] > released.data["epoch"]
    assert [v.data["runtime"] for v in seen if v.data] == ["rt-b", "", "rt-a"]
    assert released.mtime is not None and assigned.mtime is not None
    gap = (assigned.mtime - released.mtime) / 1000
    assert HANDOFF <= gap <= HANDOFF + 2, gap
    wait_until(lambda: set(a.owned_sources()) >= {first, second}, 5, "a owns both")
    print(f"\nhandoff {HANDOFF:g} s: released -> assigned {gap:.3f} s (ZooKeeper's clock)")


def test_a_new_leader_waits_a_whole_handoff_for_a_release_it_did_not_make(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    register_sources(client, cluster, 3)
    a = runtimes("rt-a")
    b = runtimes("rt-b", handoff=HANDOFF)
    c = runtimes("rt-c")
    trio = [a, b, c]
    wait_until(lambda: all(len(x.owned_sources()) == 1 for x in trio), 10, "one each")
    assert a.is_leader
    (source,) = b.owned_sources()
    path = cluster.layout.assignment(source)

    b.stop()
    follow(client, path, lambda d: bool(d) and d["runtime"] == "", 10)
    a.stop()  # the leader that knew when it released goes too
    wait_until(lambda: c.is_leader, 10, "c leads")
    took_over = client.get(cluster.layout.leader)[1].mtime
    seen = follow(
        client, path, lambda d: bool(d) and d["runtime"] == "rt-c", HANDOFF + 10, _rebalance_now(c)
    )
    released, assigned = seen[0], seen[-1]
    assert released.mtime is not None and assigned.mtime is not None
    assert assigned.mtime - took_over >= HANDOFF * 1000, "a whole handoff from its first sight"
    assert (assigned.mtime - released.mtime) / 1000 <= HANDOFF + 3
    wait_until(lambda: len(c.owned_sources()) == 3, 5, "c owns all three")


def test_a_join_moves_a_handoff_owner_s_source_through_a_release(
    cluster: ZooKeeperSettings,
    client: KazooClient,
    runtimes: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="dbus_fn.coordination")
    a, b = _leader_and_holder(client, cluster, runtimes, 6)
    held = b.owned_sources()
    before = assignments(client, cluster)
    hold = HoldCheck(cluster, "rt-b")
    try:
        assert all(isinstance(hold.confirm(s, e), float) for s, e in held.items())

        c = runtimes("rt-c")
        trio = [a, b, c]
        decision = follow(
            client, cluster.layout.assignments, lambda data: _released_by(client, cluster, data), 10
        )[-1]
        during = assignments(client, cluster)
        (moving,) = [s for s, r in during.items() if r == ""]
        assert before[moving] == "rt-b"
        # a's surplus (no handoff) moved at once, in the same decision.
        (direct,) = [s for s, r in during.items() if before[s] == "rt-a" and r != "rt-a"]
        assert during[direct] == "rt-c"
        assert decision.data is not None
        released = _node(client, cluster.layout.assignment(moving))
        assert released["epoch"] == _node(client, cluster.layout.assignment(direct))["epoch"]
        assert released["epoch"] == decision.data["epoch"]

        # Released: nobody owns it, the old owner's hold is gone, its others stay.
        wait_until(lambda: moving not in b.kept_sources(), 5, "b drops it")
        assert all(moving not in owned for owned in _owners(trio).values())
        assert hold.confirm(moving, held[moving]) is None
        kept = next(s for s in held if s != moving)
        assert isinstance(hold.confirm(kept, held[kept]), float)
        status = cluster_status(client, cluster)
        line = next(x for x in status.lines() if x.startswith(f"  {moving}  "))
        assert f"  {moving}  - epoch {released['epoch']} handing off (released " in line
        assert f"handoff {HANDOFF:g} s" in line
        row = next(s for s in status.sources if s.name == moving)
        assert (row.owner, row.released, row.handoff) == (None, released["released"], HANDOFF)
        assert f"released {moving} from rt-b at epoch {released['epoch']}; handing off in 2 s" in (
            caplog.text
        )

        path = cluster.layout.assignment(moving)
        seen = follow(
            client, path, lambda d: bool(d) and d["runtime"] != "", HANDOFF + 10, _rebalance_now(a)
        )
        assert seen[0].data == released and seen[-1].data is not None
        assert seen[-1].data["runtime"] == "rt-c"
        assert seen[0].mtime is not None and seen[-1].mtime is not None
        gap = (seen[-1].mtime - seen[0].mtime) / 1000
        assert HANDOFF <= gap <= HANDOFF + 2, gap
        wait_until(lambda: {moving, direct} <= set(c.owned_sources()), 5, "c owns both")
        assert HoldCheck(cluster, "rt-c").confirm(moving, c.owned_sources()[moving]) is not None
        assert sorted(len(c.owned_sources()) for c in trio) == [2, 2, 2]
        print(f"\njoin: {direct} moved at once, {moving} released and assigned {gap:.3f} s later")
    finally:
        hold.close()


def test_a_source_removed_while_held_waits_out_the_handoff_if_it_comes_back(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    a, b = _leader_and_holder(client, cluster, runtimes, 2)
    (source,) = b.owned_sources()
    registry = SourceRegistry(client, cluster)
    reference = registry.get(source)
    path = cluster.layout.assignment(source)

    registry.remove(source)
    follow(client, path, lambda d: d is None, 10)
    removal = client.get(cluster.layout.assignments)
    registry.add(SourceReference(source, dsn_env=reference.dsn_env, tables=reference.tables))
    seen = follow(client, path, lambda d: d is not None, HANDOFF + 10, _rebalance_now(a))
    raw, stat = client.get(path)
    created = json.loads(raw)
    assert created["epoch"] == json.loads(removal[0])["epoch"] + 1, "no decision in between"
    gap = (stat.ctime - removal[1].mtime) / 1000
    assert HANDOFF <= gap <= HANDOFF + 2, gap
    assert seen[-1].data == created


def test_hold_check_confirms_only_the_exact_hold(
    cluster: ZooKeeperSettings, client: KazooClient, caplog: pytest.LogCaptureFixture
) -> None:
    # No Coordinator here: the nodes are written by hand, so nothing rewrites them.
    layout = cluster.layout
    member = layout.runtime("rt-x")
    path = layout.assignment("s1")
    client.create(member, b"{}", ephemeral=True)

    def assign(**data: Any) -> None:
        client.set(path, json.dumps(data).encode())

    client.create(path, json.dumps({"runtime": "rt-x", "epoch": 3, "handoff": 2.0}).encode())
    caplog.set_level(1, logger="dbus_fn.coordination.kazoo")
    with HoldCheck(replace(cluster, auth="dbus:s3cret-pw"), "rt-x") as hold:
        before = time.monotonic()
        confirmed = hold.confirm("s1", 3)
        after = time.monotonic()
        assert confirmed is not None and before <= confirmed <= after
        assert hold.confirm("s1", 4) is None, "another epoch"
        assert hold.confirm("s1", 2) is None, "another epoch"
        assert hold.confirm("s2", 3) is None, "no assignment"
        assert HoldCheck(cluster, "rt-y").confirm("s1", 3) is None, "another runtime"
        assign(runtime="", epoch=4, handoff=2.0, released="2024-01-01T00:00:00Z")
        assert hold.confirm("s1", 4) is None, "released"
        assert hold.confirm("s1", 3) is None, "released"
        assign(runtime="rt-x", epoch=5, handoff=2.0)
        assert hold.confirm("s1", 5) is not None
        client.delete(member)
        assert hold.confirm("s1", 5) is None, "no member node"
        client.create(member, b"{}", ephemeral=True)
        assert hold.confirm("s1", 5) is not None

        # Its session ended by the server: the next call works on a new one.
        assert hold._client is not None
        old_session = hold._client.client_id[0]
        expire_session(hold._client, cluster.hosts)
        assert hold.confirm("s1", 5) is not None
        assert hold._client.client_id[0] != old_session

        rounds = []
        for _ in range(1000):
            started = time.perf_counter()
            assert hold.confirm("s1", 5) is not None
            rounds.append(time.perf_counter() - started)
    assert "s3cret" not in caplog.text
    assert "auth='***'" in caplog.text, "kazoo's log of the auth request was seen, redacted"
    ms = sorted(r * 1000 for r in rounds)
    print(
        f"\nHoldCheck.confirm x1000: mean {statistics.mean(ms):.3f} ms, "
        f"median {ms[500]:.3f} ms, p99 {ms[990]:.3f} ms, max {ms[-1]:.3f} ms"
    )


def test_hold_check_without_zookeeper_raises_within_its_timeout() -> None:
    settings = ZooKeeperSettings(hosts="127.0.0.1:1", cluster="test", auth="dbus:s3cret-pw")
    with HoldCheck(settings, "rt-x") as hold:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(ZooKeeperUnavailableError) as err:
                hold.confirm("s1", 3, timeout=0.5)
            took = time.monotonic() - started
            assert 0.5 <= took < 1.0, took
            message = str(err.value)
            assert message.startswith("cannot reach ZooKeeper at 127.0.0.1:1 within 0.5 s; ")
            assert "dbus services up zookeeper" in message
            assert "\n" not in message and "s3cret" not in message


def test_hold_check_and_a_coordinator_agree_on_the_session(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    _, b = _leader_and_holder(client, cluster, runtimes, 2)
    ((source, epoch),) = b.owned_sources().items()
    with HoldCheck(cluster, "rt-b") as hold:
        assert hold.confirm(source, epoch) is not None
        expire_session(b.client, cluster.hosts)
        # The member node went with the session, whatever the assignment says yet.
        wait_until(lambda: hold.confirm(source, epoch) is None, SESSION, "the hold is gone")
