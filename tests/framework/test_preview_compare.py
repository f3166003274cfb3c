"""The comparison `dbus fn preview` and the dashboard show: two versions' outcomes over
the same events, and the summary of what changes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dbus_fn.errors import ConfigError
from dbus_fn.json_format import event_to_json
from dbus_fn.preview import (
    Outcome,
    Sent,
    compare,
    event_summary,
    outcomes,
    parse_since,
    render,
    row_changes,
)
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_fn.testing import delete, insert

TABLE = "shop.orders"


@pytest.fixture
def versions(function_folder: Any) -> tuple[LoadedDeployment, LoadedDeployment]:
    """Version 1 routes every order to ``kafka://all`` with its row; version 2 routes the
    big ones to ``kafka://big``, drops ``note``, adds ``band``, filters out cancelled
    orders and fails on order 13."""
    first = function_folder(
        "v1",
        f"""
        import dbus_fn as fn

        @fn.route(tables="{TABLE}")
        def where(event):
            return "kafka://all"
        """,
        [TABLE],
    )
    second = function_folder(
        "v2",
        f"""
        import dbus_fn as fn

        @fn.filter(tables="{TABLE}")
        def live(event):
            return event.row["status"] != "cancelled"

        @fn.projection(tables="{TABLE}")
        def shape(event):
            if event.row["id"] == 13:
                raise ValueError("thirteen is unlucky")
            row = {{k: v for k, v in event.row.items() if k != "note"}}
            return row | {{"band": "big" if event.row["total"] > 100 else "small"}}

        @fn.route(tables="{TABLE}")
        def where(event):
            return "kafka://big" if event.row["total"] > 100 else "kafka://all"
        """,
        [TABLE],
    )
    return load_deployment(Path(first)), load_deployment(Path(second))


def _orders() -> list[Any]:
    return [
        insert(TABLE, id=1, total=50, status="paid", note="a"),
        insert(TABLE, id=2, total=500, status="paid", note="b"),
        insert(TABLE, id=3, total=70, status="cancelled", note="c"),
        insert(TABLE, id=13, total=10, status="paid", note="d"),
        delete(TABLE, id=4, total=900, status="paid", note="e"),
        insert("shop.stock", id=1, total=1, status="paid", note="f"),
    ]


def test_each_version_outcome_of_each_event(
    versions: tuple[LoadedDeployment, LoadedDeployment],
) -> None:
    old, new = versions
    changes = _orders()
    before, after = outcomes(old, changes), outcomes(new, changes)
    row = {"id": 1, "total": 50, "status": "paid", "note": "a"}
    assert before[0] == Outcome(True, False, (Sent("kafka://all", row=row),))
    assert after[1].routes == {"kafka://big"}
    assert after[1].fields == {"id", "total", "status", "band"}
    assert after[2].filtered and after[2].sent == () and after[2].text() == "filtered out"
    (dead,) = after[3].dead_letters
    assert "thirteen is unlucky" in (dead.error or "") and "dead letter" in after[3].text()
    assert after[4].sent[0].row == {"id": 4, "total": 900, "status": "paid", "band": "big"}
    assert not before[5].subscribed and before[5].text() == "not subscribed to this table"
    assert all(Outcome.from_json(json.loads(json.dumps(o.to_json()))) == o for o in after)


def test_the_summary_names_routes_fields_filters_and_new_dead_letters(
    versions: tuple[LoadedDeployment, LoadedDeployment],
) -> None:
    old, new = versions
    changes = _orders()
    comparison = compare(
        "orders",
        ("deployed 1.0.0", outcomes(old, changes)),
        ("local 2.0.0", outcomes(new, changes)),
        [event_summary(c) for c in changes],
    )
    summary = comparison.summary
    assert summary["events"] == 6 and summary["changed"] == 5
    assert summary["routes_appear"] == ["kafka://big"]
    assert summary["routes_vanish"] == []
    assert summary["routes"] == {"kafka://all": [5, 1], "kafka://big": [0, 2]}
    assert summary["fields_added"] == ["band"] and summary["fields_removed"] == ["note"]
    assert summary["new_dead_letters"] == 1 and summary["dead_letters"] == [0, 1]
    assert summary["filtered"] == [0, 1]
    assert comparison.changed(1) and not comparison.changed(5)
    text = render(comparison)
    assert "5 of 6 events change (deployed 1.0.0 → local 2.0.0)" in text
    assert "routes that appear: kafka://big" in text
    assert "fields added: band" in text and "fields removed: note" in text
    assert "thirteen is unlucky" in text
    assert "shop.stock" not in text  # unchanged events only with every=True
    assert "shop.stock" in render(comparison, every=True)
    data = comparison.to_json()
    assert [e["changed"] for e in data["events"]] == [True, True, True, True, True, False]
    assert data["events"][1]["event"]["key"] == {"id": 2}


def test_compare_refuses_sides_of_other_lengths() -> None:
    with pytest.raises(ValueError, match="one outcome per event"):
        compare("x", ("a", [Outcome(True)]), ("b", []), [{}])


def test_window_events_read_back_as_the_changes_they_were() -> None:
    changes = _orders()
    events = [json.loads(event_to_json(c)) for c in changes]

    def facts(c: Any) -> tuple[Any, ...]:
        return (c.source, c.qualified_table, c.op, dict(c.row), c.position, c.commit_time)

    # Read back with the column types their values gave (these changes declared none).
    assert [facts(c) for c in row_changes(events)] == [facts(c) for c in changes]


def test_since_takes_a_duration_or_a_time() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert parse_since("10m", now) == now.timestamp() - 600
    assert parse_since("2h", now) == now.timestamp() - 7200
    assert parse_since("2026-12-01T11:00:00+00:00", now) == now.timestamp() - 3600
    assert parse_since("2026-12-01T11:00:00", now) == now.timestamp() - 3600
    with pytest.raises(ConfigError, match="neither a duration nor a time"):
        parse_since("yesterday", now)
