"""SELECT rows parsed natively against PyMySQL's own parsing of the same packets:
every column kind, the forms the server writes and ones it does not, NULLs, long
values and cut packets, each giving the same tuple (or the same error)."""

from __future__ import annotations

import random
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from pymysql import converters
from pymysql.connections import MySQLResult
from pymysql.protocol import MysqlPacket

from dbus_fn.capture._native import SWITCH
from dbus_fn.capture._text_rows import _kind, read_natively

# (encoding, converter) per column, as PyMySQL's _get_descriptions sets them.
COLUMNS: dict[str, tuple[str | None, Any]] = {
    "int": ("ascii", int),
    "float": ("ascii", float),
    "decimal": ("ascii", Decimal),
    "date": ("ascii", converters.convert_date),
    "datetime": ("ascii", converters.convert_datetime),
    "time": ("ascii", converters.convert_timedelta),
    "text": ("utf8", None),
    "latin1": ("latin1", None),
    "bytes": (None, None),
    "json": ("utf8", None),
    "bit": (None, None),
    "odd": ("ascii", str.upper),
}

VALUES: dict[str, list[bytes]] = {
    "int": [b"0", b"-0", b"42", b"-9223372036854775808", b"18446744073709551615", b"007",
            b"99999999999999999999999", b"+5", b" 5", b"1_0", b"", b"-", b"\xd9\xa3"],
    "float": [b"0", b"-0", b"1.5", b"1e16", b"-3.40282e38", b"1e-7", b".5", b"5.", b"1e400",
              b"inf", b"nan", b"e5", b"", b"0x10", b"1_0"],
    "decimal": [b"0.00", b"-12.50", b"123456789012345678901234567890.123456789", b"1E+3",
                b"-", b"", b"abc", b"NaN"],
    "date": [b"2024-02-29", b"0001-01-01", b"9999-12-31", b"0000-00-00", b"2015-05-00",
             b"2023-02-29", b"2024-1-2", b"20240101", b"", b"2024-02-29 "],
    "datetime": [b"2024-01-02 03:04:05", b"2024-01-02 03:04:05.5", b"2024-01-02 03:04:05.123456",
                 b"0000-00-00 00:00:00", b"2015-05-00 10:11:12.500", b"2024-01-02T03:04:05",
                 b"2024-01-02 24:00:00", b"2024-01-02 03:04:05.1234567", b"2024-01-02 3:04:05",
                 b"2024-01-02", b"9999-12-31 23:59:59.999999", b""],
    "time": [b"00:00:00", b"12:34:56", b"-838:59:59", b"838:59:59.000000", b"-00:00:00.000001",
             b"-838:59:58.999999", b"24:00:00.5", b"1:02:03", b"12:75:00", b"12:34",
             b"1234:00:00", b"-", b""],
    "text": [b"", b"plain", "é 中文 😀".encode(), b"\xff\xfe", b"\xed\xa0\x80", b"x" * 300,
             b"y" * 70_000],
    "latin1": [b"caf\xe9", b""],
    "bytes": [b"", b"\x00\xff", b"z" * 251],
    "json": [b'{"a": [1, 2.5]}'],
    "bit": [b"\x01", b"\x00\x00\x00\x00\x00\x00\x00\xff"],
    "odd": [b"abc"],
}  # fmt: skip


def _coded(raw: bytes | None) -> bytes:
    """One value of a row packet: NULL, or a length-coded string."""
    if raw is None:
        return b"\xfb"
    size = len(raw)
    if size < 251:
        head = bytes([size])
    elif size < 2**16:
        head = b"\xfc" + size.to_bytes(2, "little")
    elif size < 2**24:
        head = b"\xfd" + size.to_bytes(3, "little")
    else:
        head = b"\xfe" + size.to_bytes(8, "little")
    return head + raw


def _shown(parsed: Any) -> Any:
    """A parse as compared: each value's type and repr (NaN is not equal to itself)."""
    if isinstance(parsed, tuple):
        return [(type(v).__name__, repr(v)) for v in parsed]
    return parsed


def _pymysql(result: Any, data: bytes) -> Any:
    try:
        return MySQLResult._read_row_from_packet(result, MysqlPacket(data, "utf8"))
    except Exception as exc:
        return type(exc)


class _Cursor:
    """A cursor whose result holds these columns, as after ``execute``."""

    def __init__(self, names: list[str]) -> None:
        self._result = SimpleNamespace(converters=[COLUMNS[n] for n in names])
        self._result._read_row_from_packet = lambda packet: MySQLResult._read_row_from_packet(
            self._result, packet
        )

    def parse(self, data: bytes) -> Any:
        try:
            return self._result._read_row_from_packet(MysqlPacket(data, "utf8"))
        except Exception as exc:
            return type(exc)


def test_each_column_kind_is_read_natively_where_it_should_be() -> None:
    kinds = {name: _kind(*COLUMNS[name]) for name in COLUMNS}
    assert kinds == {
        "int": "int", "float": "float", "decimal": "decimal", "date": "date",
        "datetime": "datetime", "time": "time", "text": "utf8", "latin1": "python",
        "bytes": "bytes", "json": "utf8", "bit": "bytes", "odd": "python",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(VALUES))
def test_every_value_parses_as_pymysql_parses_it(native: None, name: str) -> None:
    cursor = _Cursor(["int", name, "text"])
    assert read_natively(cursor)
    for raw in [*VALUES[name], None]:
        data = _coded(b"7") + _coded(raw) + _coded(b"after")
        expected = _pymysql(cursor._result, data)
        assert _shown(cursor.parse(data)) == _shown(expected), (name, raw)


def test_a_packet_that_is_not_one_value_per_column_is_left_to_pymysql(native: None) -> None:
    cursor = _Cursor(["int", "text"])
    assert read_natively(cursor)
    for data in (_coded(b"1"), _coded(b"1") + _coded(b"a") + _coded(b"extra"),
                 _coded(b"1") + b"\x05ab", b"\xff", b""):  # fmt: skip
        assert _shown(cursor.parse(data)) == _shown(_pymysql(cursor._result, data)), data


@pytest.mark.parametrize("seed", range(4))
def test_random_rows_parse_alike(native: None, seed: int) -> None:
    rng = random.Random(seed)
    names = list(VALUES)
    for _ in range(200):
        row = [rng.choice(names) for _ in range(rng.randrange(1, 8))]
        cursor = _Cursor(row)
        assert read_natively(cursor)
        data = b"".join(_coded(rng.choice([*VALUES[n], None])) for n in row)
        expected = _pymysql(cursor._result, data)
        assert _shown(cursor.parse(data)) == _shown(expected), (row, data)


def test_switched_off_pymysql_parses_rows(native: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH, "0")
    cursor = _Cursor(["int"])
    parse = cursor._result._read_row_from_packet
    assert not read_natively(cursor)
    assert cursor._result._read_row_from_packet is parse
