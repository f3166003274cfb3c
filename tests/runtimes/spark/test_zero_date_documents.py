"""An Elasticsearch document holds a zero or partial date as null: a date field holds
no year 0 or month 0. Real dates, and text in text columns, are kept."""

from __future__ import annotations

from datetime import date

from dbus_fn.testing import row_change
from dbus_spark.stage.documents import index_action

TYPES = {"id": "int", "d": "date", "dt": "datetime(3)", "ts": "timestamp", "s": "varchar(20)"}


def test_zero_dates_are_null_in_the_document_and_real_ones_kept() -> None:
    change = row_change(
        "insert",
        "shop.legacy",
        None,
        {
            "id": 1,
            "d": "2015-00-21",
            "dt": "0000-00-00T01:00:00",
            "ts": "0000-00-00T00:00:00Z",
            "s": "0000-00-00",
        },
        column_types=TYPES,
    )
    action = index_action(change, "legacy")
    assert action.document == {"id": 1, "d": None, "dt": None, "ts": None, "s": "0000-00-00"}
    real = row_change(
        "insert", "shop.legacy", None,
        {"id": 2, "d": date(2024, 2, 29), "dt": None, "ts": None, "s": None},
        column_types=TYPES,
    )  # fmt: skip
    assert index_action(real, "legacy").document == {
        "id": 2, "d": "2024-02-29", "dt": None, "ts": None, "s": None,
    }  # fmt: skip
