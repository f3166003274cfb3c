"""The documented JSON form of every MySQL column type, both ways."""

from __future__ import annotations

import json
import random
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from event_samples import COLUMN_TYPES, ROW, assert_same_row

from dbus_fn import ColumnValueError, UnsupportedColumnTypeError
from dbus_fn.columns import (
    from_json_value,
    infer_column_type,
    parse_column_type,
    row_from_json,
    row_to_json,
    to_json_value,
)

# (column type, Python value, JSON form) straight from the table in dbus_fn.columns.
GOLDEN: list[tuple[str, Any, Any]] = [
    ("tinyint", -128, -128),
    ("tinyint unsigned", 255, 255),
    ("smallint", 32767, 32767),
    ("mediumint unsigned", 16777215, 16777215),
    ("int", -2147483648, -2147483648),
    ("int(10) unsigned zerofill", 7, 7),
    ("bigint unsigned", 18446744073709551615, 18446744073709551615),
    ("bigint", -9223372036854775808, -9223372036854775808),
    ("decimal(65,30)", Decimal("-1.000000000000000000000000000001"),
     "-1.000000000000000000000000000001"),
    ("decimal(10,2)", Decimal("12.50"), "12.50"),
    ("decimal(10,0)", Decimal("1E+3"), "1000"),
    ("decimal(65,30) unsigned", Decimal("0E-30"), "0.000000000000000000000000000000"),
    ("double", 0.1, 0.1),
    ("float", -3.5, -3.5),
    ("date", date(2024, 2, 29), "2024-02-29"),
    ("time", timedelta(hours=1, minutes=2, seconds=3), "01:02:03"),
    ("time(6)", -timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
     "-838:59:59.999999"),
    ("time(6)", -timedelta(seconds=1, microseconds=500000), "-00:00:01.500000"),
    ("time(2)", timedelta(microseconds=10000), "00:00:00.010000"),
    ("datetime", datetime(2024, 1, 2, 3, 4, 5), "2024-01-02T03:04:05"),
    ("datetime(6)", datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02T03:04:05.000006"),
    ("timestamp(6)", datetime(2024, 1, 2, 3, 4, 5, 600000, tzinfo=UTC),
     "2024-01-02T03:04:05.600000Z"),
    ("year", 1901, 1901),
    ("year(4)", 0, 0),
    ("char(3)", "abc", "abc"),
    ("varchar(255)", "😀 utf8mb4", "😀 utf8mb4"),
    ("mediumtext", "", ""),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-426614174000"),
    ("binary(4)", b"\x00\x01\x02\xff", "AAEC/w=="),
    ("varbinary(64)", b"\xfb\xff", "+/8="),
    ("tinyblob", b"", ""),
    ("geometry", b"\x00\x00\x00\x00\x01", "AAAAAAE="),
    ("enum('a','it''s')", "it's", "it's"),
    ("set('x','y','z')", frozenset({"z", "x"}), ["x", "z"]),
    ("set('x')", frozenset(), []),
    ("bit(1)", 1, 1),
    ("bit(64)", 2**64 - 1, 18446744073709551615),
    ("json", {"a": [1, None, {"b": 2.5}], "t": True}, {"a": [1, None, {"b": 2.5}], "t": True}),
    ("json", [], []),
    ("json", 3, 3),
    ("vector(3)", [1.0, 2.5, -3.0], [1.0, 2.5, -3.0]),
    ("vector(2)", [0.1, 1], [0.1, 1.0]),
]


@pytest.mark.parametrize(("column_type", "value", "form"), GOLDEN)
def test_golden_json_forms(column_type: str, value: Any, form: Any) -> None:
    assert to_json_value(value, column_type) == form
    back = from_json_value(json.loads(json.dumps(form)), column_type)
    assert type(back) is type(value)
    assert back == value


@pytest.mark.parametrize("column_type", sorted(set(COLUMN_TYPES.values())))
def test_null_is_null_in_every_type(column_type: str) -> None:
    assert to_json_value(None, column_type) is None
    assert from_json_value(None, column_type) is None


def test_a_whole_row_round_trips_through_json_text() -> None:
    text = json.dumps(row_to_json(ROW, COLUMN_TYPES))
    assert_same_row(row_from_json(json.loads(text), COLUMN_TYPES), ROW)


def test_timestamps_are_written_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    moment = datetime(2024, 1, 1, 2, 0, tzinfo=plus_two)
    assert to_json_value(moment, "timestamp") == "2024-01-01T00:00:00Z"
    back = from_json_value("2024-01-01T00:00:00Z", "timestamp")
    assert back == moment and back.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "name", "kind", "args", "unsigned"),
    [
        ("int unsigned", "int", "integer", (), True),
        ("INT(11) UNSIGNED", "int", "integer", ("11",), True),
        ("tinyint(1)", "tinyint", "integer", ("1",), False),
        ("decimal(65,30)", "decimal", "decimal", ("65", "30"), False),
        ("double precision", "double precision", "float", (), False),
        ("datetime /* mariadb-5.3 */", "datetime", "datetime", (), False),
        ("time(6)", "time", "time", ("6",), False),
        ("enum('a','b,c','it''s',')(')", "enum", "enum", ("a", "b,c", "it's", ")("), False),
        ("set('X','y')", "set", "set", ("X", "y"), False),
        ("bit", "bit", "bit", (), False),
        ("longblob", "longblob", "bytes", (), False),
        ("point", "point", "bytes", (), False),
        ("inet6", "inet6", "text", (), False),
    ],
)
def test_parse_column_type(
    text: str, name: str, kind: str, args: tuple[str, ...], unsigned: bool
) -> None:
    parsed = parse_column_type(text)
    assert (parsed.name, parsed.family, parsed.args, parsed.unsigned) == (
        name, kind, args, unsigned)


def test_integer_widths() -> None:
    assert parse_column_type("mediumint").bits == 24
    assert parse_column_type("bit").bits == 1
    assert parse_column_type("bit(17)").bits == 17
    assert parse_column_type("varchar(3)").bits is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("sketch(3)", "no JSON mapping for type 'sketch'"),
        ("varchr(10)", "no JSON mapping"),
        ("", "does not read as"),
        ("int(", "does not read as"),
        ("varchar(abc)", "are not numbers"),
        ("varchar(10) unsigned", "numeric types only"),
        ("enum(a,b)", "must be quoted"),
        ("bit(65)", "1 to 64"),
    ],
)
def test_unsupported_types_raise_a_clear_error(text: str, reason: str) -> None:
    with pytest.raises(UnsupportedColumnTypeError, match=reason) as caught:
        to_json_value(1, text, column="c")
    error = caught.value
    assert error.column_type == text and error.column == "c"
    assert "column 'c'" in str(error) and "dbus_fn.columns" in str(error)
    assert isinstance(error, ValueError)


def test_non_string_type_is_refused() -> None:
    with pytest.raises(UnsupportedColumnTypeError, match="not a string"):
        parse_column_type(3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("column_type", "value", "expected"),
    [
        ("tinyint", 128, "from -128 to 127"),
        ("tinyint unsigned", -1, "from 0 to 255"),
        ("bigint unsigned", 2**64, "from 0 to 18446744073709551615"),
        ("int", "1", "an int"),
        ("bit(8)", 256, "from 0 to 255"),
        ("decimal(10,2)", 1.5, "decimal.Decimal"),
        ("decimal(10,2)", Decimal("NaN"), "finite"),
        ("double", float("nan"), "finite float"),
        ("double", float("inf"), "finite float"),
        ("float", "1.0", "finite float"),
        ("date", datetime(2024, 1, 1), "datetime.date"),
        ("time", 5, "timedelta"),
        ("datetime", datetime(2024, 1, 1, tzinfo=UTC), "naive"),
        ("timestamp", datetime(2024, 1, 1), "timezone-aware"),
        ("year", 1900, "1901 to 2155"),
        ("varchar(3)", b"abc", "a str"),
        ("blob", "abc", "bytes"),
        ("set('a')", ["a"], "frozenset"),
        ("set('a')", frozenset({1}), "frozenset of str"),
        ("json", {1: "a"}, "keys must be str"),
        ("json", {"a": float("nan")}, "no NaN"),
        ("json", {"a": object()}, "a JSON value"),
        ("vector(3)", (1.0, 2.0, 3.0), "a list of finite floats"),
        ("vector(3)", [1.0, float("nan")], "a finite float"),
    ],
)
def test_python_values_that_do_not_fit_their_type(
    column_type: str, value: Any, expected: str
) -> None:
    with pytest.raises(ColumnValueError, match=expected) as caught:
        to_json_value(value, column_type, column="c")
    assert caught.value.column == "c" and caught.value.column_type == column_type
    assert caught.value.received == type(value).__name__


@pytest.mark.parametrize(
    ("column_type", "form", "expected"),
    [
        ("int", "1", "an int"),
        ("int", 1.0, "an int"),
        ("int", True, "an int"),
        ("decimal(10,2)", 1.5, "decimal string"),
        ("decimal(10,2)", "1e5", "decimal string"),
        ("decimal(10,2)", "NaN", "decimal string"),
        ("double", "0.1", "finite float"),
        ("date", "2024-13-01", "real calendar date"),
        ("date", "20240101", "YYYY-MM-DD"),
        ("time", "1:02:03", "HH:MM:SS"),
        ("time", "01:60:00", "HH:MM:SS"),
        ("time(6)", "01:02:03.1234567", "HH:MM:SS"),
        ("datetime", "2024-01-01 00:00:00", "YYYY-MM-DDTHH:MM:SS"),
        ("datetime", "2024-01-01T25:00:00", "real calendar date and time"),
        ("datetime", "2024-01-01T00:00:00Z", "YYYY-MM-DDTHH:MM:SS"),
        ("timestamp", "2024-01-01T00:00:00", "UTC timestamp"),
        ("timestamp", "2024-01-01T00:00:00+02:00", "UTC timestamp"),
        ("blob", "not base64!", "base64"),
        ("blob", "YQ", "base64"),
        ("blob", 5, "base64 string"),
        ("set('a')", "a", "list of strings"),
        ("varchar(3)", 3, "a str"),
        ("year", 3000, "1901 to 2155"),
    ],
)
def test_json_forms_that_do_not_fit_their_type(column_type: str, form: Any, expected: str) -> None:
    with pytest.raises(ColumnValueError, match=expected) as caught:
        from_json_value(form, column_type, column="c")
    assert "in JSON" in str(caught.value)


def test_error_messages_never_contain_the_value() -> None:
    with pytest.raises(ColumnValueError) as caught:
        to_json_value("secret-password", "int", column="c")
    assert "secret-password" not in str(caught.value)


def test_python_ints_widen_where_lossless() -> None:
    assert to_json_value(3, "double") == 3.0
    assert type(from_json_value(3, "double")) is float
    assert to_json_value(3, "decimal(10,2)") == "3"
    assert to_json_value(True, "tinyint(1)") == 1


def test_row_helpers_need_a_type_for_every_column() -> None:
    with pytest.raises(UnsupportedColumnTypeError, match="'b' has no column type") as caught:
        row_to_json({"a": 1, "b": 2}, {"a": "int"})
    assert caught.value.column == "b"
    with pytest.raises(UnsupportedColumnTypeError, match="'b'"):
        row_from_json({"b": 2}, {})


@pytest.mark.parametrize(
    ("value", "column_type"),
    [
        (None, "json"),
        (True, "tinyint(1)"),
        (5, "bigint"),
        (2**63, "bigint unsigned"),
        (2**64, "json"),
        (-(2**63) - 1, "json"),
        (1.5, "double"),
        (Decimal("1.5"), "decimal(65,30)"),
        ("x", "longtext"),
        (b"x", "longblob"),
        (date(2024, 1, 1), "date"),
        (datetime(2024, 1, 1), "datetime(6)"),
        (datetime(2024, 1, 1, tzinfo=UTC), "timestamp(6)"),
        (timedelta(1), "time(6)"),
        (frozenset({"a"}), "set"),
        ({"a": 1}, "json"),
        ([1], "json"),
    ],
)
def test_inferred_types_hold_the_value_losslessly(value: Any, column_type: str) -> None:
    assert infer_column_type(value) == column_type
    back = from_json_value(json.loads(json.dumps(to_json_value(value, column_type))), column_type)
    assert (back == value and type(back) is type(value)) or isinstance(value, bool)


def test_inference_refuses_unknown_python_types() -> None:
    with pytest.raises(ColumnValueError, match="cannot infer a column type for a complex"):
        infer_column_type(1j)


def _random_values(column_type: str, rng: random.Random) -> list[Any]:
    """Seeded random values of one column type, edges included."""
    parsed = parse_column_type(column_type)
    bits = parsed.bits or 64
    makers: dict[str, Any] = {
        "integer": lambda: rng.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if not parsed.unsigned else rng.randint(0, 2**bits - 1),
        "bit": lambda: rng.randint(0, 2**bits - 1),
        "decimal": lambda: Decimal(rng.randint(-(10**65) + 1, 10**65 - 1)).scaleb(-30),
        "float": lambda: rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 307),
        "date": lambda: date.fromordinal(rng.randint(1, date.max.toordinal())),
        "time": lambda: timedelta(microseconds=rng.randint(-3_020_399_999_999, 3_020_399_999_999)),
        "datetime": lambda: datetime.min + timedelta(
            microseconds=rng.randint(0, 315_537_897_599_999_999)),
        "timestamp": lambda: datetime.fromtimestamp(rng.randint(0, 2**31 - 1), UTC).replace(
            microsecond=rng.randint(0, 999_999)),
        "text": lambda: "".join(chr(rng.choice([rng.randint(32, 0xD7FF),
                                                rng.randint(0x10000, 0x10FFFF)]))
                                for _ in range(rng.randint(0, 20))),
        "bytes": lambda: rng.randbytes(rng.randint(0, 40)),
        "set": lambda: frozenset(rng.sample(["a", "b", "c", "d,e"], rng.randint(0, 4))),
    }
    return [makers[parsed.family]() for _ in range(300)]


@pytest.mark.parametrize(
    "column_type",
    ["tinyint", "smallint unsigned", "mediumint", "int unsigned", "bigint", "bigint unsigned",
     "bit(13)", "bit(64)", "decimal(65,30)", "double", "date", "time(6)", "datetime(6)",
     "timestamp(6)", "varchar(255)", "longblob", "set('a','b','c','d,e')"],
)
def test_random_values_round_trip_through_json_text(column_type: str) -> None:
    rng = random.Random(column_type)
    for value in _random_values(column_type, rng):
        form = json.loads(json.dumps(to_json_value(value, column_type)))
        back = from_json_value(form, column_type)
        assert back == value and type(back) is type(value), (column_type, value)
