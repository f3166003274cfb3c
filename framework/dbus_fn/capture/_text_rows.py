"""A snapshot's SELECT rows parsed natively, as PyMySQL parses them.

PyMySQL parses each row of a result in Python (``MySQLResult._read_row_from_packet``:
each value's length, its decoding, its converter), which was two thirds of reading a
chunk. ``read_natively`` hands a cursor's rows to ``dbus_native.TextRows`` instead:
per column, the kind its PyMySQL converter and encoding name, and that same decoding
for any value the native side does not read itself, so every row is the tuple
PyMySQL would give. Switched off with the native decoder (``DBUS_NATIVE_DECODE=0``).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from pymysql import converters

from dbus_fn._native import native
from dbus_fn.capture._native import SWITCH

_KINDS: dict[Any, str] = {
    int: "int",
    float: "float",
    Decimal: "decimal",
    converters.convert_date: "date",
    converters.convert_datetime: "datetime",
    converters.convert_timedelta: "time",
}
"""The native kind of a column by its PyMySQL converter (numbers and times arrive in
ASCII); any other converter's column is read by PyMySQL's decoding."""


def _decoding(
    encoding: str | None, converter: Callable[[Any], Any] | None
) -> Callable[[bytes], Any]:
    """What ``_read_row_from_packet`` does with one value's bytes."""

    def read(raw: bytes) -> Any:
        data: Any = raw if encoding is None else raw.decode(encoding)
        return data if converter is None else converter(data)

    return read


def _kind(encoding: str | None, converter: Callable[[Any], Any] | None) -> str:
    if converter is None:
        if encoding is None:
            return "bytes"
        return "utf8" if codecs.lookup(encoding).name == "utf-8" else "python"
    kind = _KINDS.get(converter, "python")
    return kind if encoding == "ascii" else "python"


def read_natively(cursor: Any) -> bool:
    """Parse the rows of ``cursor``'s result (just executed) natively from now on;
    whether it does (the native code is built, on, and the result has columns)."""
    module = native(SWITCH)
    result: Any = getattr(cursor, "_result", None)
    columns = getattr(result, "converters", None)
    if module is None or not columns:
        return False
    plan = module.TextRows(
        [_kind(encoding, converter) for encoding, converter in columns],
        [_decoding(encoding, converter) for encoding, converter in columns],
        Decimal,
    )
    parse = result._read_row_from_packet

    def row(packet: Any) -> tuple[Any, ...]:
        values: tuple[Any, ...] | None = None if packet._position else plan.row(packet._data)
        return parse(packet) if values is None else values

    result._read_row_from_packet = row
    return True


__all__ = ["read_natively"]
