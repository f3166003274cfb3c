"""MySQL's binary JSON as plain JSON values, equal to the document SELECT shows.

mysql-replication parses the format (``pymysqlreplication.json_binary``). A document
may also hold *opaque* values, which a client only gets through SQL (``CAST(... AS
TIME)``, a DECIMAL column, a binary string): mysql-replication turns TIME into a
``datetime.time`` (and fails on a negative or over-24-hour one), DATETIME into a
``datetime``, DECIMAL into a ``Decimal``, and a binary string into its bytes decoded
with the errors dropped. None of those is a JSON value, and the last loses bytes.
Here each opaque value reads as MySQL prints it in a document:

========================  ==========================================
opaque type               value
========================  ==========================================
TIME                      ``"-838:59:59.000000"`` (sign, hours, 6 digits)
DATE                      ``"2023-09-24"``
DATETIME, TIMESTAMP       ``"2023-09-24 18:54:12.000000"``
DECIMAL                   a number (int when it has no fraction digits)
anything else             ``"base64:type<N>:<base64 of its bytes>"``
========================  ==========================================
"""

from __future__ import annotations

import base64
import struct
from decimal import Decimal
from typing import Any

from pymysqlreplication import json_binary
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.util.bytes import decode_decimal, decode_variable_length

_TIMES = frozenset({FIELD_TYPE.TIME, FIELD_TYPE.TIME2})
_DATES = frozenset({FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE})
_DATETIMES = frozenset(
    {FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2}
)
_DECIMALS = frozenset({FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL})


def _packed(data: bytes) -> tuple[str, int, int]:
    """A packed temporal value (8 bytes, little-endian, signed): its sign, its whole
    part (the fields above the microseconds) and its microseconds."""
    (value,) = struct.unpack("<q", data[:8])
    sign = "-" if value < 0 else ""
    value = abs(value)
    return sign, value >> 24, value % (1 << 24)


def _time(data: bytes) -> str:
    sign, hms, micros = _packed(data)
    hour, minute, second = (hms >> 12) % (1 << 10), (hms >> 6) % (1 << 6), hms % (1 << 6)
    return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


def _date_parts(data: bytes) -> tuple[int, int, int, int, int, int, int]:
    _sign, whole, micros = _packed(data)
    ymd, hms = whole >> 17, whole % (1 << 17)
    year_month = ymd >> 5
    return (
        year_month // 13, year_month % 13, ymd % (1 << 5),
        hms >> 12, (hms >> 6) % (1 << 6), hms % (1 << 6), micros,
    )  # fmt: skip


def _date(data: bytes) -> str:
    year, month, day, *_ = _date_parts(data)
    return f"{year:04d}-{month:02d}-{day:02d}"


def _datetime(data: bytes) -> str:
    year, month, day, hour, minute, second, micros = _date_parts(data)
    return f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


def _number(data: bytes) -> int | float:
    value: Decimal = decode_decimal(data)
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent >= 0:
        return int(value)
    return float(value)


def opaque(data: bytes) -> Any:
    """An opaque value (its field type, a length, its bytes) as MySQL prints it."""
    if not data:
        return None
    field_type = data[0]
    length, used = decode_variable_length(data[1:])
    body = bytes(data[1 + used : 1 + used + length])
    if field_type in _TIMES:
        return _time(body)
    if field_type in _DATES:
        return _date(body)
    if field_type in _DATETIMES:
        return _datetime(body)
    if field_type in _DECIMALS:
        return _number(body)
    return f"base64:type{field_type}:{base64.b64encode(body).decode()}"


# mysql-replication looks its opaque parser up by name on each value: this one reads
# every opaque value of every document it parses, in the rows it decodes too.
json_binary.parse_opaque = opaque


def _plain(value: Any) -> Any:
    """Keys and strings as str (mysql-replication gives them as bytes)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def json_document(raw: bytes) -> Any:
    """A binary JSON document (its type byte, then its value) as plain JSON values."""
    return _plain(json_binary.parse_json(raw[0], raw[1:]))
