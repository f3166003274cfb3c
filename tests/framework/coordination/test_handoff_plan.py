"""The handoff planner: which changes a rebalance writes now and which wait."""

from __future__ import annotations

from dbus_fn.coordination._handoff import (
    Assigned,
    Waiting,
    live_waiting,
    plan_handoffs,
    seconds,
)

NOW = 1000.0


def _held(runtime: str, epoch: int = 3, handoff: float = 0.0) -> Assigned:
    return Assigned(runtime=runtime, epoch=epoch, handoff=handoff, version=1)


def test_without_handoffs_every_change_is_written_at_once() -> None:
    current = {"s1": _held("a"), "s2": _held("gone"), "s3": _held("a")}
    wanted = {"s1": "a", "s2": "b", "s4": "b"}
    plan = plan_handoffs(current, wanted, {"a": 0.0, "b": 0.0}, {}, NOW)
    assert plan.assign == {"s2": "b", "s4": "b"}
    assert plan.release == {}
    assert plan.delete == {"s3": 0.0}
    assert (plan.learned, plan.next_due) == ({}, None)


def test_a_source_leaving_an_owner_with_a_handoff_is_released_first() -> None:
    # Recorded in the assignment (a dead owner) or advertised now: the larger counts.
    current = {"s1": _held("dead", handoff=2.0), "s2": _held("live", handoff=1.0)}
    plan = plan_handoffs(current, {"s1": "b", "s2": "b"}, {"live": 3.0, "b": 0.0}, {}, NOW)
    assert plan.assign == {}
    assert plan.release == {"s1": ("dead", 2.0), "s2": ("live", 3.0)}


def test_a_release_is_assigned_only_when_due() -> None:
    current = {"s1": _held("", epoch=7, handoff=2.0)}
    waiting = {"s1": Waiting(7, NOW + 0.5)}
    early = plan_handoffs(current, {"s1": "b"}, {"b": 0.0}, waiting, NOW)
    assert (early.assign, early.next_due) == ({}, NOW + 0.5)
    due = plan_handoffs(current, {"s1": "b"}, {"b": 0.0}, waiting, NOW + 0.5)
    assert (due.assign, due.next_due) == ({"s1": "b"}, None)


def test_a_release_this_leader_did_not_make_waits_a_whole_handoff_from_now() -> None:
    current = {"s1": _held("", epoch=7, handoff=2.0)}
    # No entry, or one for an older release of the source: both unknown.
    for waiting in ({}, {"s1": Waiting(5, NOW - 10)}):
        plan = plan_handoffs(current, {"s1": "b"}, {}, waiting, NOW)
        assert plan.assign == {}
        assert plan.learned == {"s1": Waiting(7, NOW + 2.0)}
        assert plan.next_due == NOW + 2.0


def test_a_source_deleted_while_held_waits_if_it_comes_back() -> None:
    owned = plan_handoffs({"s1": _held("a", handoff=2.0)}, {}, {"a": 2.0}, {}, NOW)
    assert owned.delete == {"s1": 2.0}
    released = plan_handoffs({"s1": _held("", epoch=7, handoff=2.0)}, {}, {}, {}, NOW)
    assert released.delete == {"s1": 0.0}
    assert released.learned == {"s1": Waiting(None, NOW + 2.0)}
    back = plan_handoffs({}, {"s1": "a"}, {}, {"s1": Waiting(None, NOW + 1.0)}, NOW)
    assert (back.assign, back.next_due) == ({}, NOW + 1.0)
    later = plan_handoffs({}, {"s1": "a"}, {}, {"s1": Waiting(None, NOW + 1.0)}, NOW + 1.0)
    assert later.assign == {"s1": "a"}


def test_waiting_entries_are_kept_while_they_matter() -> None:
    current = {"s1": _held("", epoch=7, handoff=2.0), "s2": _held("a")}
    waiting = {
        "s1": Waiting(7, NOW - 1),  # due, but the release is still in place
        "s2": Waiting(None, NOW - 1),  # due and done with
        "s3": Waiting(None, NOW + 1),  # removed source, not yet due
    }
    assert live_waiting(waiting, current, NOW) == {
        "s1": Waiting(7, NOW - 1),
        "s3": Waiting(None, NOW + 1),
    }


def test_handoffs_read_from_zookeeper_are_sane() -> None:
    assert [seconds(v) for v in (2, "1.5", -1, "x", None, float("inf"), float("nan"))] == [
        2.0,
        1.5,
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]
