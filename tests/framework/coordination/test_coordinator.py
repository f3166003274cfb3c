"""Coordinators against the real ZooKeeper: sharding, failover, fencing."""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from typing import Any

import pytest
from coordination_support import SESSION, assignments, expire_session, register_sources
from kazoo.client import KazooClient
from support import free_port, wait_until

from dbus_fn.coordination import Coordinator, ZooKeeperSettings
from dbus_fn.errors import ClusterNotFoundError, FencedError, ZooKeeperUnavailableError
from dbus_fn.events import BinlogPosition

pytestmark = pytest.mark.integration


def _balanced(client: KazooClient, settings: ZooKeeperSettings, expect: dict[str, int]) -> bool:
    return Counter(assignments(client, settings).values()) == Counter(expect)


def _owned_everywhere(coordinators: list[Coordinator], total: int) -> bool:
    owned = [set(c.owned_sources()) for c in coordinators]
    union = set().union(*owned)
    return len(union) == total and sum(len(o) for o in owned) == total


def _each_owns(coordinators: list[Coordinator], count: int) -> bool:
    return _owned_everywhere(coordinators, count * len(coordinators)) and all(
        len(c.owned_sources()) == count for c in coordinators
    )


def _leader_of(coordinators: list[Coordinator]) -> Coordinator | None:
    leaders = [c for c in coordinators if c.is_leader]
    assert len(leaders) <= 1
    return leaders[0] if leaders else None


def test_sources_spread_over_runtimes_and_positions_commit(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    sources = register_sources(client, cluster, 12)
    trio = [runtimes("rt-a"), runtimes("rt-b"), runtimes("rt-c")]
    wait_until(lambda: _balanced(client, cluster, {"rt-a": 4, "rt-b": 4, "rt-c": 4}), 10, "4 each")
    wait_until(lambda: _owned_everywhere(trio, 12), 10, "every runtime sees its sources")
    assert sum(c.is_leader for c in trio) == 1

    owner = trio[0]
    source, epoch = next(iter(owner.owned_sources().items()))
    assert owner.committed_position(source) is None
    first = BinlogPosition("binlog.000001", 1234, "0-1-7")
    assert owner.commit_position(source, first, epoch) == "committed"
    assert owner.commit_position(source, BinlogPosition("binlog.000001", 2000), epoch) == (
        "committed"
    )
    committed = trio[1].committed_position(source)
    assert committed is not None
    assert committed.position == BinlogPosition("binlog.000001", 2000)
    assert (committed.runtime, committed.epoch) == ("rt-a", epoch)

    stranger = next(c for c in trio if source not in c.owned_sources())
    with pytest.raises(FencedError, match=f"may not commit a position for source {source}"):
        stranger.commit_position(source, first, epoch)
    with pytest.raises(FencedError):
        owner.commit_position(source, first, epoch + 1)
    assert set(sources) == set(assignments(client, cluster))


def test_a_join_and_a_leave_move_the_fewest_sources(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    register_sources(client, cluster, 12)
    trio = [runtimes("rt-a"), runtimes("rt-b"), runtimes("rt-c")]
    wait_until(lambda: _balanced(client, cluster, {"rt-a": 4, "rt-b": 4, "rt-c": 4}), 10, "4 each")
    before = assignments(client, cluster)

    runtimes("rt-d")
    wait_until(lambda: len(set(assignments(client, cluster).values())) == 4, 10, "d gets some")
    joined = assignments(client, cluster)
    assert Counter(joined.values()) == {"rt-a": 3, "rt-b": 3, "rt-c": 3, "rt-d": 3}
    assert sum(before[s] != joined[s] for s in before) == 3

    leaving = next(c for c in trio if not c.is_leader)
    leaving.stop()
    wait_until(
        lambda: leaving.runtime_id not in assignments(client, cluster).values(), 10, "it left"
    )
    left = assignments(client, cluster)
    assert sum(joined[s] != left[s] for s in joined) == 3, "only the 3 of the runtime that left"
    print(
        f"\n12 sources: 3 runtimes -> 4 moved {sum(before[s] != joined[s] for s in before)}; "
        f"4 -> 3 moved {sum(joined[s] != left[s] for s in joined)}"
    )


def test_an_expired_session_moves_its_sources_and_fences_its_commits(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    register_sources(client, cluster, 6)
    trio = [runtimes("rt-a"), runtimes("rt-b"), runtimes("rt-c")]
    wait_until(lambda: _each_owns(trio, 2), 10, "two sources each")
    victim = next(c for c in trio if not c.is_leader)
    owned = victim.owned_sources()
    source, epoch = next(iter(owned.items()))
    assert victim.commit_position(source, BinlogPosition("binlog.000001", 100), epoch) == (
        "committed"
    )

    killed_at = time.monotonic()
    expire_session(victim.client, cluster.hosts)
    survivors = [c for c in trio if c is not victim]
    wait_until(lambda: _owned_everywhere(survivors, 6), SESSION + 10, "sources moved")
    failover = time.monotonic() - killed_at
    assert set(owned) <= set().union(*(set(c.owned_sources()) for c in survivors))

    late = BinlogPosition("binlog.000009", 999)
    with contextlib.suppress(FencedError):
        # Until it hears of the expiry it is only suspended: the commit is held...
        assert victim.commit_position(source, late, epoch) == "held"
    # ...and dropped once it learns its session is gone; then commits are refused.
    wait_until(lambda: victim.state != "suspended", SESSION + 10, "the victim hears of it")
    assert victim.held_commits == {}
    with pytest.raises(FencedError):
        victim.commit_position(source, late, epoch)
    new_owner = next(c for c in survivors if source in c.owned_sources())
    committed = new_owner.committed_position(source)
    assert committed is not None and committed.position.pos == 100
    print(f"\nexpired session: sources owned elsewhere {failover:.2f} s later")


def test_a_runtime_that_missed_its_reassignment_cannot_commit(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any, monkeypatch: Any
) -> None:
    register_sources(client, cluster, 2)
    a, b = runtimes("rt-a"), runtimes("rt-b")
    wait_until(lambda: _each_owns([a, b], 1), 10, "one each")
    stale = b if a.is_leader else a
    source, epoch = next(iter(stale.owned_sources().items()))
    # Fault injection: this runtime stops hearing about assignments (a stalled
    # thread), so only ZooKeeper's check can stop its commit.
    monkeypatch.setattr(stale, "_refresh", lambda generation: None)
    path = cluster.layout.assignment(source)
    data, stat = client.get(path)
    client.set(path, data.replace(stale.runtime_id.encode(), b"rt-elsewhere"), version=stat.version)
    assert source in stale.owned_sources(), "it has not noticed"
    with pytest.raises(FencedError, match="the source was assigned elsewhere"):
        stale.commit_position(source, BinlogPosition("binlog.000002", 4), epoch)
    assert client.exists(cluster.layout.position(source)) is None


def test_leader_failover(cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any) -> None:
    register_sources(client, cluster, 4)
    trio = [runtimes("rt-a"), runtimes("rt-b"), runtimes("rt-c")]
    wait_until(lambda: _owned_everywhere(trio, 4) and bool(_leader_of(trio)), 10, "all owned")
    leader = _leader_of(trio)
    assert leader is not None
    import json

    term = json.loads(client.get(cluster.layout.leader)[0])["term"]
    expire_session(leader.client, cluster.hosts)
    others = [c for c in trio if c is not leader]
    wait_until(lambda: any(c.is_leader for c in others), SESSION + 10, "a new leader")
    data = json.loads(client.get(cluster.layout.leader)[0])
    assert data["term"] == term + 1
    assert data["runtime"] in {c.runtime_id for c in others}
    # The old leader comes back with a new session, as a follower.
    wait_until(lambda: leader.state == "connected" and bool(leader.owned_sources()), 20, "back")
    assert sum(c.is_leader for c in trio) == 1


def test_capacity_weights_the_assignment(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    register_sources(client, cluster, 9)
    runtimes("big", 2.0)
    runtimes("small", 1.0)
    wait_until(lambda: _balanced(client, cluster, {"big": 6, "small": 3}), 10, "6 and 3")


def test_an_unreachable_zookeeper_at_start(cluster: ZooKeeperSettings) -> None:
    port = free_port()
    coordinator = Coordinator(f"127.0.0.1:{port}", "test", "rt-x", connect_timeout=1)
    unreachable = f"cannot reach ZooKeeper at 127.0.0.1:{port}"
    with pytest.raises(ZooKeeperUnavailableError, match=unreachable):
        coordinator.start()
    assert coordinator.owned_sources() == {}


def test_a_missing_cluster_at_start(settings: ZooKeeperSettings) -> None:
    with pytest.raises(ClusterNotFoundError, match="no cluster 'test'"):
        Coordinator(settings.hosts, "test", "rt-x").start()


def test_a_second_runtime_with_the_same_id_is_refused(
    cluster: ZooKeeperSettings, runtimes: Any
) -> None:
    runtimes("rt-a")
    twin = Coordinator(cluster.hosts, cluster.cluster, "rt-a", session_timeout=SESSION)
    with pytest.raises(Exception, match="runtime id rt-a is registered by another live session"):
        twin.start(timeout=3)


def test_a_position_written_behind_the_owners_back(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    import json

    register_sources(client, cluster, 1)
    owner = runtimes("rt-a")
    wait_until(lambda: bool(owner.owned_sources()), 10, "owned")
    ((source, epoch),) = owner.owned_sources().items()
    assert owner.commit_position(source, BinlogPosition("b.000001", 10), epoch) == "committed"
    path = cluster.layout.position(source)

    # Its own write whose reply was lost (same runtime, same epoch): adopted.
    data = json.loads(client.get(path)[0])
    client.set(path, json.dumps({**data, "position": {"file": "b.000001", "pos": 20}}).encode())
    assert owner.commit_position(source, BinlogPosition("b.000001", 30), epoch) == "committed"
    assert json.loads(client.get(path)[0])["position"]["pos"] == 30

    # Anybody else's write: refused, and the position stays as they left it.
    client.set(path, json.dumps({**data, "runtime": "rt-other"}).encode())
    with pytest.raises(FencedError, match="runtime rt-other wrote it since"):
        owner.commit_position(source, BinlogPosition("b.000001", 40), epoch)
    assert json.loads(client.get(path)[0])["runtime"] == "rt-other"


def test_server_ids_are_claimed_so_no_two_readers_share_one(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any, monkeypatch: Any
) -> None:
    from dbus_fn.capture import replica_id_for

    a, b = runtimes("rt-a"), runtimes("rt-b")
    first = a.replica_id("shop")
    assert a.replica_id("shop") == first
    assert first == replica_id_for("shop/rt-a")
    # Force a collision: b's first choice is the id a holds.
    monkeypatch.setattr(
        "dbus_fn.capture.replica_id_for",
        lambda name, salt=0: first if salt == 0 else replica_id_for(name, salt=salt),
    )
    second = b.replica_id("shop")
    assert second != first
    assert second == replica_id_for("shop/rt-b", salt=1)
    claims = sorted(client.get_children(cluster.layout.server_ids))
    assert claims == sorted([str(first), str(second)])
    a.stop()
    wait_until(
        lambda: client.get_children(cluster.layout.server_ids) == [str(second)], 10, "released"
    )


def test_each_key_shard_of_a_reader_claims_its_own_server_id(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    from dbus_fn.capture import replica_id_for

    a, b = runtimes("rt-a"), runtimes("rt-b")
    ids = [a.replica_id("shop", shard) for shard in range(3)]
    assert ids[0] == replica_id_for("shop/rt-a")
    assert ids[1] == replica_id_for("shop/shard/1/rt-a")
    assert len(set(ids)) == 3
    assert [a.replica_id("shop", shard) for shard in range(3)] == ids  # stable
    others = [b.replica_id("shop", shard) for shard in range(3)]
    assert not set(others) & set(ids)
    claims = {int(c) for c in client.get_children(cluster.layout.server_ids)}
    assert claims == set(ids) | set(others)
    raw, _ = client.get(cluster.layout.replica_id(ids[2]))
    assert json.loads(raw) == {"runtime": "rt-a", "source": "shop", "shard": 2}


def test_registering_again_in_one_session_reuses_the_election_node(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    a, b = runtimes("rt-a"), runtimes("rt-b")
    before = sorted(client.get_children(cluster.layout.election))
    # Fault injection: as if a create's reply had been lost and the thread retried.
    with b._lock:
        b._registered = False
    b._wake.set()
    wait_until(lambda: b._registered, 5, "registered again")
    time.sleep(1)
    assert sorted(client.get_children(cluster.layout.election)) == before
    assert a.is_leader != b.is_leader


def test_a_deposed_leader_cannot_write_assignments(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any, monkeypatch: Any
) -> None:
    register_sources(client, cluster, 4)
    a = runtimes("rt-a")
    b = runtimes("rt-b")
    wait_until(lambda: _each_owns([a, b], 2), 10, "two each")
    assert a.is_leader
    old_node = a._election_node
    expire_session(a.client, cluster.hosts)
    wait_until(lambda: b.is_leader, SESSION + 10, "b leads")
    wait_until(lambda: _each_owns([a, b], 2), 10, "a is back as a follower")
    before = assignments(client, cluster)
    decision = client.get(cluster.layout.assignments)[0]

    # Fault injection: a acts as if it had never noticed losing the lead (its
    # thread stalled), and its stale computation would give it every source.
    monkeypatch.setattr(a, "_step", lambda: None)
    with a._lock:
        a._election_node, a._leader = old_node, True
    monkeypatch.setattr(
        "dbus_fn.coordination._leadership.assign_sources",
        lambda sources, capacities, current: dict.fromkeys(sources, "rt-a"),
    )
    a._rebalance()
    assert assignments(client, cluster) == before
    assert client.get(cluster.layout.assignments)[0] == decision


def test_adding_and_removing_a_source_rebalances(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    from dbus_fn.coordination import SourceReference, SourceRegistry

    register_sources(client, cluster, 2)
    a, b = runtimes("rt-a"), runtimes("rt-b")
    wait_until(lambda: _each_owns([a, b], 1), 10, "one each")
    registry = SourceRegistry(client, cluster)
    registry.add(SourceReference("late", dsn_env="LATE_DSN"))
    wait_until(lambda: "late" in {**a.owned_sources(), **b.owned_sources()}, 10, "late owned")
    before = assignments(client, cluster)
    registry.remove("late")
    wait_until(lambda: "late" not in assignments(client, cluster), 10, "late unassigned")
    assert assignments(client, cluster) == {s: r for s, r in before.items() if s != "late"}
    wait_until(lambda: "late" not in {**a.owned_sources(), **b.owned_sources()}, 10, "dropped")


def test_a_capacity_change_rebalances(
    cluster: ZooKeeperSettings, client: KazooClient, runtimes: Any
) -> None:
    register_sources(client, cluster, 6)
    a, b = runtimes("rt-a"), runtimes("rt-b")
    wait_until(lambda: _each_owns([a, b], 3), 10, "three each")
    b.set_capacity(2.0)
    wait_until(lambda: _balanced(client, cluster, {"rt-a": 2, "rt-b": 4}), 3, "2 and 4")
    a.set_capacity(0)
    wait_until(lambda: _balanced(client, cluster, {"rt-b": 6}), 3, "a drained")
