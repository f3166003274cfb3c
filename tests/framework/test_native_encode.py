"""The native row-image JSON writer against the Python one (``json.dumps`` of
``row_to_json``), on every column type, edge values and random text: the same text
for every row either writes, and every row the Python path refuses is left to it."""

from __future__ import annotations

import enum
import json
import random
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from dbus_fn.columns import row_to_json
from dbus_fn.errors import DbusError
from dbus_fn.events import Row
from dbus_fn.row_json import NATIVE_SWITCH, row_json_encoder


class Level(enum.IntEnum):
    HIGH = 3


BERLIN = timezone(timedelta(hours=2))

# Per column type, values of every shape it may meet: the common ones the native
# side writes, and the ones it leaves to Python (subclasses, zero dates, other
# zones, misfits the Python path refuses).
VALUES: dict[str, list[Any]] = {
    "int": [0, -1, 2**31 - 1, -(2**31), 2**31, True, False, Level.HIGH, 1.0, "7"],
    "tinyint unsigned": [0, 255, 256, -1],
    "bigint unsigned": [2**64 - 1, 2**64, 0],
    "bigint": [-(2**63), 2**63 - 1, 2**63],
    "bit(64)": [2**64 - 1, 0, 2**64],
    "bit(1)": [0, 1, 2],
    "decimal(65,30)": [Decimal("1.50"), Decimal("-0.00"), Decimal("1E+3"), Decimal("NaN"), 7,
                       Decimal("123456789012345678901234567890.123456789")],
    "double": [0.0, -0.0, 1.5, 1e16, 1e-5, 1e-7, 123456789.123, 2.0**70, float("nan"),
               float("inf"), 3, True, 1 / 3],
    "float": [0.1, 3.4e38],
    "date": [date(1, 1, 1), date(9999, 12, 31), date(2024, 2, 29), "0000-00-00", "2015-05-00",
             "not a date", datetime(2024, 1, 1)],
    "time(6)": [timedelta(0), timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
                -timedelta(hours=838, minutes=59, seconds=58, microseconds=999999),
                timedelta(days=3, microseconds=5), -timedelta(microseconds=1), 5],
    "datetime(6)": [datetime(2024, 1, 2, 3, 4, 5, 123456), datetime(1, 1, 1),
                    datetime(9999, 12, 31, 23, 59, 59, 999999), "0000-00-00T00:00:00",
                    datetime(2024, 1, 2, tzinfo=UTC), date(2024, 1, 2)],
    "timestamp(6)": [datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=UTC),
                     datetime(2024, 6, 1, 12, tzinfo=BERLIN),
                     datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), "0000-00-00T00:00:00Z",
                     datetime(2024, 6, 1)],
    "year": [0, 1901, 2155, 1900, 2156, True],
    "varchar(64)": ["", "plain", 'a "quoted" \\ back\\slash', "tab\tnew\nline\rcr\b\f",
                    "\x00\x01\x1f\x7f\x80", "é ü ß", "中文", "emoji 😀 𝄞",
                    "lone \ud800 surrogate", 5],
    "enum('x','y')": ["x", "", "not declared"],
    "varbinary(16)": [b"", b"\x00", b"ab", b"abc", b"\xde\xad\xbe\xef", bytearray(b"xy"),
                      memoryview(b"xyz"), "text"],
    "set('a','b','c')": [frozenset(), frozenset({"b", "a"}), {"c", "a"}, frozenset({"é", "z", "Z"}),
                         frozenset({1}), ["a"]],
    "json": [{"a": [1, 2.5, None, True, "é"]}, [], "text", 1, None, {"nan": float("nan")}],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000"],
    "vector(3)": [[1.0, 2.5, -3.0], [0.1, 123456.0, 1e-30], [], [1], "text", [float("inf")]],
    "sketch(3)": [b"\x00"],
}  # fmt: skip


def _python(row: Mapping[str, Any], types: Mapping[str, str]) -> str | type[Exception]:
    try:
        return json.dumps(row_to_json(row, types))
    except (DbusError, TypeError, ValueError) as exc:
        return type(exc)


def _encoded(row: Mapping[str, Any], types: Mapping[str, str]) -> str | type[Exception]:
    try:
        return row_json_encoder(types)(row)
    except (DbusError, TypeError, ValueError) as exc:
        return type(exc)


def _natively(types: Mapping[str, str]) -> Any:
    from dbus_fn.row_json import _native_encoder

    encoder = _native_encoder(types)
    assert encoder is not None
    return encoder


@pytest.mark.parametrize("column_type", sorted(VALUES))
def test_each_value_is_written_as_python_writes_it(native: Any, column_type: str) -> None:
    types = {"id": "int", "v": column_type}
    written = 0
    for value in VALUES[column_type]:
        row = {"id": 1, "v": value}
        expected = _python(row, types)
        assert _encoded(row, types) == expected, (column_type, value)
        assert _encoded(Row(row), types) == expected, (column_type, value)
        if column_type in ("uuid", "sketch(3)"):
            continue  # a family the native side leaves whole to Python, or no type at all
        text = _natively(types).encode(row)
        if text is not None:
            written += 1
            assert text == expected, (column_type, value)
    if column_type not in ("uuid", "sketch(3)"):
        assert written, f"the native side wrote no {column_type} value itself"


def test_the_common_values_are_written_natively(native: Any) -> None:
    """What capture gives for each type is written on the native side, not left to Python."""
    row = {name: values[0] for name, values in VALUES.items() if name not in ("sketch(3)",)}
    types = {name: name for name in row}
    assert _natively(types).encode(row) == json.dumps(row_to_json(row, types))


def test_rows_the_native_side_cannot_place_take_the_python_path(native: Any) -> None:
    types = {"id": "int", "v": "varchar(8)"}
    encoder = _natively(types)
    assert encoder.encode({"id": 1, "other": "x"}) is None  # a column without a type
    assert _encoded({"id": 1, "other": "x"}, types) == _python({"id": 1, "other": "x"}, types)
    assert encoder.encode({"v": "x", "id": 2}) == '{"v": "x", "id": 2}'  # any column order
    assert encoder.encode({}) == "{}"


@pytest.mark.parametrize("seed", range(4))
def test_random_text_and_numbers_are_written_alike(native: Any, seed: int) -> None:
    rng = random.Random(seed)
    types = {"id": "bigint unsigned", "t": "longtext", "f": "double", "d": "decimal(20,6)"}
    encoder = _natively(types)
    for _ in range(500):
        points = [rng.choice((rng.randrange(0x20, 0x7F), rng.randrange(0, 0x20),
                              rng.randrange(0x80, 0xD800), rng.randrange(0xE000, 0x110000)))
                  for _ in range(rng.randrange(0, 12))]  # fmt: skip
        wide, scaled = rng.uniform(-1e20, 1e20), rng.random() * 10 ** rng.randrange(-30, 30)
        row = {
            "id": rng.randrange(0, 2**64),
            "t": "".join(map(chr, points)),
            "f": rng.choice((wide, scaled)),
            "d": Decimal(rng.randrange(-(10**19), 10**19)).scaleb(-6),
        }
        assert encoder.encode(row) == json.dumps(row_to_json(row, types))


def test_the_switch_turns_the_native_side_off(native: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dbus_fn.row_json import _native_encoder

    monkeypatch.setenv(NATIVE_SWITCH, "0")
    assert _native_encoder({"id": "int"}) is None
    assert _encoded({"id": 5}, {"id": "int"}) == '{"id": 5}'
