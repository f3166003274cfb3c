"""Zero and partial dates in the column codecs: held as text, written as that text,
read back equal; other text stays refused."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from dbus_fn import from_cloudevent, to_cloudevent
from dbus_fn.columns import from_json_value, to_json_value
from dbus_fn.errors import ColumnValueError
from dbus_fn.testing import row_change

HELD = [
    ("date", "0000-00-00"),
    ("date", "2015-00-21"),
    ("date", "2015-05-00"),
    ("date", "1000-00-00"),
    ("date", "0000-05-12"),
    ("date", "2015-02-30"),
    ("datetime", "0000-00-00T00:00:00"),
    ("datetime", "0000-00-00T01:00:00"),
    ("datetime(6)", "0001-00-00T00:00:00.000001"),
    ("datetime(3)", "2015-05-00T10:11:12.500000"),
    ("timestamp", "0000-00-00T00:00:00Z"),
    ("timestamp(6)", "0000-00-00T00:00:00Z"),
]


@pytest.mark.parametrize(("column_type", "text"), HELD)
def test_a_zero_date_is_its_text_both_ways(column_type: str, text: str) -> None:
    assert to_json_value(text, column_type) == text
    assert from_json_value(text, column_type) == text


def test_a_fraction_is_read_in_any_length_and_written_in_six_digits() -> None:
    assert from_json_value("2015-05-00T10:11:12.5", "datetime(1)") == "2015-05-00T10:11:12.500000"
    assert from_json_value("2015-05-00T10:11:12.000000", "datetime(6)") == "2015-05-00T10:11:12"


def test_real_dates_stay_date_values() -> None:
    assert from_json_value("2024-02-29", "date") == date(2024, 2, 29)
    assert from_json_value("1970-01-01T00:00:01Z", "timestamp") == datetime(
        1970, 1, 1, 0, 0, 1, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("column_type", "text"),
    [
        ("date", "2024-02-29"),  # real: a date value, not text
        ("date", "2015-13-01"),
        ("date", "2015-01-32"),
        ("date", "0000-00-00T00:00:00"),
        ("date", "not a date"),
        ("datetime", "0000-00-00"),
        ("datetime", "0000-00-00 00:00:00"),
        ("datetime", "2015-05-00T24:00:00"),
        ("datetime", "2015-05-00T10:11:12.500"),  # not the written (six-digit) form
        ("timestamp", "0000-00-00T00:00:00"),
        ("timestamp", "2024-01-01T00:00:00Z"),
    ],
)
def test_other_text_in_python_is_refused(column_type: str, text: str) -> None:
    with pytest.raises(ColumnValueError):
        to_json_value(text, column_type, column="c")


@pytest.mark.parametrize(
    ("column_type", "text"),
    [
        ("date", "2015-13-01"),
        ("date", "2015-01-32"),
        ("date", "0000-00-00 "),
        ("datetime", "0000-00-00 00:00:00"),
        ("datetime", "2015-05-00T10:61:00"),
        ("timestamp", "0000-00-00T00:00:00"),
    ],
)
def test_other_text_in_json_is_refused(column_type: str, text: str) -> None:
    with pytest.raises(ColumnValueError):
        from_json_value(text, column_type, column="c")


def test_a_change_with_zero_dates_reads_back_equal_and_keys_by_their_text() -> None:
    change = row_change(
        "insert",
        "shop.legacy",
        None,
        {
            "id": 1,
            "d": "0000-00-00",
            "dt": "2015-05-00T10:11:12.500000",
            "ts": "0000-00-00T00:00:00Z",
        },
        column_types={"id": "int", "d": "date", "dt": "datetime(3)", "ts": "timestamp"},
        primary_key=["id", "d", "dt"],
    )
    event = to_cloudevent(change)
    assert event.get_subject() == '[1,"0000-00-00","2015-05-00T10:11:12.500000"]'
    assert event.get_data()["after"]["ts"] == "0000-00-00T00:00:00Z"
    assert from_cloudevent(event) == change
