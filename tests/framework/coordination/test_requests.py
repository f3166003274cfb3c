"""The cluster's request box against the real ZooKeeper: posted once, answered once
per source, withdrawn by its poster."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from dbus_fn.coordination import RequestBox, ZooKeeperSettings

pytestmark = pytest.mark.integration


def test_a_request_is_answered_once_per_source_and_withdrawn(
    client: KazooClient, cluster: ZooKeeperSettings
) -> None:
    box = RequestBox(client, cluster)
    posted = box.post({"kind": "backfill", "deployment": "catalog"}, ["shop", "shop2"])
    (found,) = box.open()
    assert (found.id, found.body, found.sources) == (
        posted, {"kind": "backfill", "deployment": "catalog"}, ("shop", "shop2"),
    )  # fmt: skip
    assert found.answered == frozenset()
    box.answer(posted, "shop", {"accepted": True})
    box.answer(posted, "shop", {"accepted": False})  # a second answer is ignored
    assert box.open()[0].answered == frozenset({"shop"})
    assert box.answers(posted) == {"shop": {"accepted": True}}
    box.withdraw(posted)
    assert box.open() == [] and box.answers(posted) == {}
    box.answer(posted, "shop2", {"accepted": True})  # too late: nothing is made
    assert box.open() == []


def test_plans_are_written_only_by_the_owner_at_its_epoch(
    cluster: ZooKeeperSettings, dbus: Any
) -> None:
    from support import wait_until

    from dbus_fn.coordination import Coordinator, PlanLog

    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    with Coordinator.from_settings(cluster, "rt-a") as runtime:
        wait_until(lambda: "shop" in runtime.owned_sources(), 10, "shop owned")
        epoch = runtime.owned_sources()["shop"]
        mine, other = PlanLog(cluster, "rt-a"), PlanLog(cluster, "rt-b")
        try:
            assert mine.write("shop", epoch, [{"end": {"pos": 4}, "chunks": []}])
            assert mine.write("shop", epoch, [{"end": {"pos": 9}, "chunks": []}])  # replaced
            assert not mine.write("shop", epoch + 1, [])  # not the epoch it owns it at
            assert not other.write("shop", epoch, [])  # not the owner
            assert not mine.write("nope", epoch, [])  # no such assignment
            assert other.read("shop") == [{"end": {"pos": 9}, "chunks": []}]
            assert other.committed_history("shop") == {}
        finally:
            mine.close()
            other.close()
