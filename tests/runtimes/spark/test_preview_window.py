"""The runtime's recent-events window and what it answers a preview with: each task keeps
a bounded few changes per table, the driver keeps the newest per table, and an empty
preview says why (window off, table not read, no traffic, nothing in the time asked)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dbus_fn.errors import FunctionNotFoundError
from dbus_fn.testing import insert
from dbus_spark.config.runtime import RuntimeConfig, deployment_folders
from dbus_spark.interfaces.preview.service import NO_REGISTRY, Previewer
from dbus_spark.stage.counts import StageCounts
from dbus_spark.state.preview_window import RecentWindow, patterns_meet, table_matches

TABLE = "shop.orders"
START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _timed(n: int, table: str = TABLE) -> Any:
    change = insert(table, id=n, total=n * 10)
    return replace(change, commit_time=START + timedelta(seconds=n))


def _batch(*changes: Any, size: int = 100) -> list[list[Any]]:
    counts = StageCounts()
    for change in changes:
        counts.keep(change, size)
    return StageCounts.from_bytes(counts.to_bytes()).to_json()["recent"]


def test_a_task_keeps_the_newest_changes_of_each_table_and_tasks_add_up() -> None:
    one, two = StageCounts(), StageCounts()
    for n in range(1, 8):
        one.keep(_timed(n), 3)
    two.keep(_timed(20, "shop.stock"), 3)
    two.keep(_timed(21), 3)
    one.add(StageCounts.from_bytes(two.to_bytes()))
    recent = {
        (s, t): [json.loads(e)["data"]["after"]["id"] for e in events]
        for s, t, events in one.to_json()["recent"]
    }
    # Each task kept its 3 newest; the driver's window bounds what tasks add up to.
    assert recent == {("test", TABLE): [5, 6, 7, 21], ("test", "shop.stock"): [20]}


def test_the_driver_keeps_the_newest_per_table_oldest_first() -> None:
    window = RecentWindow(5)
    window.add(_batch(*(_timed(n) for n in range(1, 9))))
    window.add(_batch(_timed(9), _timed(30, "shop.stock")))
    kept = window.newest([TABLE])
    assert [k.event["data"]["after"]["id"] for k in kept] == [5, 6, 7, 8, 9]
    assert [k.event["data"]["after"]["id"] for k in window.newest(["orders"], limit=2)] == [8, 9]
    since = (START + timedelta(seconds=7)).timestamp()
    newer = window.newest([TABLE], since=since)
    assert [k.event["data"]["after"]["id"] for k in newer] == [7, 8, 9]
    assert window.tables() == {TABLE: 5, "shop.stock": 1}
    assert window.seen == {TABLE: 9, "shop.stock": 1}
    window.resize(2)
    assert [k.event["data"]["after"]["id"] for k in window.newest([TABLE])] == [8, 9]
    window.resize(0)
    window.add(_batch(_timed(10)))
    assert window.newest([TABLE]) == [] and window.tables() == {}


def test_tables_match_by_qualified_or_bare_name() -> None:
    assert table_matches("shop.orders", ["shop.orders"])
    assert table_matches("shop.orders", ["orders"])
    assert not table_matches("shop.orders", ["other.orders"])
    assert not table_matches("shop.orders", ["stock"])


def test_tables_match_the_globs_a_manifest_subscribes_by() -> None:
    assert table_matches("shop.orders", ["shop.*"]) and table_matches("shop.orders", ["ord*"])
    assert not table_matches("shop.orders", ["other.*"])
    assert patterns_meet(["shop.*"], ["shop.orders"]) and patterns_meet(["shop.orders"], ["shop.*"])
    assert not patterns_meet(["shop.*"], ["other.orders"])


def test_a_deployment_reading_some_sources_sees_none_of_the_others_changes() -> None:
    window = RecentWindow(5)
    window.add(_batch(_timed(1), _timed(2)))
    (source,) = {k.source for k in window.newest([TABLE])}
    mine = window.newest([TABLE], sources=[source])
    assert [k.event["data"]["after"]["id"] for k in mine] == [1, 2]
    assert window.newest([TABLE], sources=["from-kafka"]) == []


def test_a_deployment_subscribed_by_glob_is_previewed_on_its_tables(
    function_folder: Any, tmp_path: Path
) -> None:
    folder = function_folder(
        "globbed",
        """
        import dbus_fn as fn

        @fn.route(tables="shop.*")
        def where(event):
            return "kafka://orders"
        """,
        ["shop.*"],
    )
    window, previewer = _previewer(folder, tmp_path)
    assert "no change of shop.* has been read" in str(previewer.preview("globbed")["empty"])
    assert "no change of shop.orders has been read" in str(
        previewer.preview("globbed", tables=["shop.orders"])["empty"]
    )
    window.add(_batch(_timed(1), _timed(2, "shop.stock")))
    assert len(previewer.preview("globbed")["events"]) == 2
    only = previewer.preview("globbed", tables=["shop.orders"])
    assert [e["data"]["after"]["id"] for e in only["events"]] == [1]


@pytest.fixture
def runtime(function_folder: Any, tmp_path: Path) -> tuple[RecentWindow, Previewer]:
    folder = function_folder(
        "shown",
        f"""
        import dbus_fn as fn

        @fn.route(tables="{TABLE}")
        def where(event):
            if event.row["id"] == 3:
                raise ValueError("three is refused")
            return "kafka://orders"
        """,
        [TABLE],
    )
    return _previewer(folder, tmp_path)


def _previewer(folder: Path, tmp_path: Path) -> tuple[RecentWindow, Previewer]:
    """A window of 100 and a previewer of a runtime running the deployment in ``folder``."""
    config = RuntimeConfig(
        sources=(), deployments=deployment_folders((str(folder),)),
        kafka_bootstrap="127.0.0.1:9092",
        elasticsearch_url="http://127.0.0.1:9200", checkpoint_dir=str(tmp_path / "checkpoint"),
    )  # fmt: skip
    window = RecentWindow(100)
    return window, Previewer(window, lambda: config)


def test_a_preview_runs_the_deployed_version_over_the_window(
    runtime: tuple[RecentWindow, Previewer],
) -> None:
    window, previewer = runtime
    window.add(_batch(*(_timed(n) for n in range(1, 6)), _timed(9, "shop.stock")))
    answer = previewer.preview("shown", limit=4)
    assert answer["version"] == "1.0.0" and answer["empty"] is None
    assert [e["data"]["after"]["id"] for e in answer["events"]] == [2, 3, 4, 5]
    assert answer["outcomes"][0]["sent"] == [
        {"destination": "kafka://orders", "dead_letter": False, "row": {"id": 2, "total": 20}}
    ]
    assert "three is refused" in answer["outcomes"][1]["sent"][0]["error"]
    previous = previewer.preview("shown", against_previous=True)["previous"]
    assert previous == {"version": None, "why_none": NO_REGISTRY, "comparison": None}
    with pytest.raises(FunctionNotFoundError, match="no deployment 'other' runs on this runtime"):
        previewer.preview("other")


def test_an_empty_preview_says_why(runtime: tuple[RecentWindow, Previewer]) -> None:
    window, previewer = runtime
    assert "no change of shop.orders has been read since the runtime started" in str(
        previewer.preview("shown")["empty"]
    )
    assert "the runtime reads none of shop.elsewhere" in str(
        previewer.preview("shown", tables=["shop.elsewhere"])["empty"]
    )
    window.add(_batch(_timed(1)))
    later = (START + timedelta(hours=1)).timestamp()
    assert "was committed in the time asked" in str(
        previewer.preview("shown", since=later)["empty"]
    )
    window.resize(0)
    assert "--preview-window 0" in str(previewer.preview("shown")["empty"])


def test_a_folder_changed_while_the_runtime_runs_is_previewed_as_it_now_is(
    runtime: tuple[RecentWindow, Previewer], tmp_path: Path
) -> None:
    window, previewer = runtime
    window.add(_batch(_timed(1)))
    assert previewer.preview("shown")["outcomes"][0]["sent"][0]["destination"] == "kafka://orders"
    module = tmp_path / "fn-shown" / "shown.py"  # the folder the runtime runs
    module.write_text(module.read_text().replace("kafka://orders", "kafka://orders-v2"))
    assert previewer.preview("shown")["outcomes"][0]["sent"][0]["destination"] == (
        "kafka://orders-v2"
    )
