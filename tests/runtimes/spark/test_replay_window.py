"""A replay part's window (``reads/replay_window.py``): which changes it gives its
deployment, of binlog or of Kafka alike."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from support import route_code

from dbus_fn.events import RowChange
from dbus_fn.testing import update
from dbus_spark.config.runtime import deployment_folders
from dbus_spark.reads import replay_window
from dbus_spark.reads.replay_window import ReplayWindow
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.state.records import KafkaRecord

TABLE = "shop.products"


def committed_at(seconds: float, key: int = 1) -> RowChange:
    change = update(TABLE, {"id": key, "v": 1}, v=2)
    return dataclasses.replace(change, commit_time=datetime.fromtimestamp(seconds, UTC))


@pytest.fixture
def stage(function_folder: Any) -> FunctionStage:
    folder = function_folder("catalog", route_code(TABLE, "kafka://products"), [TABLE])
    return FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")


def test_only_changes_committed_inside_the_window_are_given(stage: FunctionStage) -> None:
    counts = StageCounts()
    window = ReplayWindow(stage, "catalog", counts, route=None, since=100.0, until=200.0)
    before, inside, edge, after = (committed_at(t) for t in (99.0, 150.0, 200.0, 201.0))
    assert list(window.records(before)) == []
    assert len(list(window.records(inside))) == 1
    assert len(list(window.records(edge))) == 1
    assert (window.past(edge), window.past(after)) == (False, True)
    assert list(window.records(after)) == []
    assert window.rows == 2


def test_a_route_replaces_the_deployment_s_destinations(stage: FunctionStage) -> None:
    window = ReplayWindow(stage, "catalog", StageCounts(), route="kafka://products.shadow",
                          since=None, until=None)  # fmt: skip
    (record,) = window.records(committed_at(150.0))
    assert isinstance(record.record, KafkaRecord)
    assert (record.deployment, record.record.topic) == ("catalog", "products.shadow")
    assert window.rows == 1


def test_a_part_is_full_after_replay_rows(
    stage: FunctionStage, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_window, "REPLAY_ROWS", 3)
    window = ReplayWindow(stage, "catalog", StageCounts(), route=None, since=None, until=None)
    for key in range(3):
        assert not window.full()
        assert len(list(window.records(committed_at(150.0, key)))) == 1
    assert window.full() and window.rows == 3
