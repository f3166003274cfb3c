"""Readers of each MySQL column type's value in a binlog row image, chosen per column.

Each reader takes the image bytes and an offset and returns the value and the next
offset; ``column_reader`` picks one from a table-map column, ``column_width`` says
how many bytes a value takes when its type fixes that.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pymysqlreplication.constants import FIELD_TYPE

from dbus_fn._zero_dates import zero_date_text
from dbus_fn.capture._json_binary import json_document
from dbus_fn.capture._table_map import VECTOR

__all__ = [
    "NATIVE",
    "Reader",
    "UnknownColumnType",
    "column_reader",
    "column_width",
    "declared_reader",
    "vector_values",
]

Reader = Callable[[bytes, int], tuple[Any, int]]


class UnknownColumnType(ValueError):
    """A table map names a column type dbus has no reader for: the rows of that table
    go to the dead letters (``UndecodedRows``), the read goes on."""


_S8 = struct.Struct("<b").unpack_from
_U8 = struct.Struct("<B").unpack_from
_S16 = struct.Struct("<h").unpack_from
_U16 = struct.Struct("<H").unpack_from
_S32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_S64 = struct.Struct("<q").unpack_from
_U64 = struct.Struct("<Q").unpack_from
_F32 = struct.Struct("<f").unpack_from
_F64 = struct.Struct("<d").unpack_from
_BE_U32 = struct.Struct(">I").unpack_from
_F32_PACK = struct.Struct("<f").pack
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ZERO_TIMESTAMP = zero_date_text("timestamp", 0, 0, 0)  # TIMESTAMP's only zero date

# Bytes per character of the character sets in common use; COLUMN_TYPE lengths are
# in characters while the binlog gives bytes.
_MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "ucs2": 2, "utf16": 4, "utf16le": 4,
    "utf32": 4, "big5": 2, "gbk": 2, "gb2312": 2, "gb18030": 4, "sjis": 2,
    "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2,
}  # fmt: skip
_PYTHON_CODEC = {"utf8mb4": "utf-8", "utf8mb3": "utf-8", "utf8": "utf-8", "latin1": "cp1252",
                 "koi8r": "koi8_r", "koi8u": "koi8_u", "ascii": "ascii", "ucs2": "utf-16-be",
                 "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be"}  # fmt: skip
_BLOB_PREFIX = {1: "tiny", 2: "", 3: "medium", 4: "long"}
_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)

NATIVE = "native_kind"
"""The attribute of a reader that says how the native decoder (``framework/native``)
reads the same value: ``(kind, a, b, labels)``. A reader without it (JSON, geometry,
other character sets, a declared type shown as text) stays Python's."""

_R = TypeVar("_R")


def _native(reader: _R, kind: str, a: int = 0, b: int = 0, labels: Sequence[str] = ()) -> _R:
    setattr(reader, NATIVE, (kind, a, b, tuple(labels)))
    return reader


def _fixed(unpack: Callable[[bytes, int], tuple[Any, ...]], size: int) -> Reader:
    def read(data: bytes, offset: int) -> tuple[Any, int]:
        return unpack(data, offset)[0], offset + size

    return read


def _int24(signed: bool) -> Reader:
    def read(data: bytes, offset: int) -> tuple[int, int]:
        end = offset + 3
        return int.from_bytes(data[offset:end], "little", signed=signed), end

    return read


def _read_year(data: bytes, offset: int) -> tuple[int, int]:
    value = data[offset]
    return (value + 1900 if value else 0), offset + 1


def _read_float(data: bytes, offset: int) -> tuple[float, int]:
    # A FLOAT holds 24 bits of mantissa; the server shows (and SELECT returns) a
    # plain FLOAT rounded to 6 significant digits, so 0.1 stays 0.1 rather than
    # 0.100000001 (FLOAT(M,D) has a reader of its own: declared_reader).
    return float(f"{_F32(data, offset)[0]:.6g}"), offset + 4


def _decimal_size(precision: int, scale: int) -> int:
    integral = precision - scale
    return _DIG2BYTES[integral % 9] + 4 * (integral // 9 + scale // 9) + _DIG2BYTES[scale % 9]


def _decimal(precision: int, scale: int) -> Reader:
    integral = precision - scale
    lead_digits, int_words = integral % 9, integral // 9
    frac_words, tail_digits = scale // 9, scale % 9
    lead_size, tail_size = _DIG2BYTES[lead_digits], _DIG2BYTES[tail_digits]
    size = _decimal_size(precision, scale)

    def read(data: bytes, offset: int) -> tuple[Decimal, int]:
        raw = bytearray(data[offset : offset + size])
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        pos = 0
        parts = ["-" if negative else ""]
        if lead_size:
            parts.append(str(int.from_bytes(raw[:lead_size], "big")))
            pos = lead_size
        for _ in range(int_words):
            parts.append(f"{int.from_bytes(raw[pos : pos + 4], 'big'):09d}")
            pos += 4
        if scale:
            parts.append(".")
            for _ in range(frac_words):
                parts.append(f"{int.from_bytes(raw[pos : pos + 4], 'big'):09d}")
                pos += 4
            if tail_size:
                tail = int.from_bytes(raw[pos : pos + tail_size], "big")
                parts.append(f"{tail:0{tail_digits}d}")
        text = "".join(parts)
        if text in ("", "-") or text.startswith((".", "-.")):
            text = text.replace(".", "0.") if "." in text else text + "0"
        return Decimal(text), offset + size

    return read


def _length_prefixed(length_size: int) -> Callable[[bytes, int], tuple[bytes, int]]:
    def read(data: bytes, offset: int) -> tuple[bytes, int]:
        start = offset + length_size
        end = start + int.from_bytes(data[offset:start], "little")
        return data[start:end], end

    return read


def _text(length_size: int, codec: str) -> Reader:
    def read(data: bytes, offset: int) -> tuple[str, int]:
        start = offset + length_size
        end = start + int.from_bytes(data[offset:start], "little")
        return data[start:end].decode(codec), end

    return read


def _utf8_short(data: bytes, offset: int) -> tuple[str, int]:
    start = offset + 1
    end = start + data[offset]
    return data[start:end].decode(), end


def _binary_padded(length_size: int, width: int) -> Reader:
    # BINARY(n) values are logged without their trailing zero bytes; SELECT gives
    # them padded to n bytes.
    raw = _length_prefixed(length_size)

    def read(data: bytes, offset: int) -> tuple[bytes, int]:
        value, end = raw(data, offset)
        return value.ljust(width, b"\0"), end

    return read


def _json_text(length_size: int) -> Reader:
    raw = _length_prefixed(length_size)

    def read(data: bytes, offset: int) -> tuple[Any, int]:
        value, end = raw(data, offset)
        return json.loads(value), end

    return read


def _json_binary(length_size: int) -> Reader:
    raw = _length_prefixed(length_size)

    def read(data: bytes, offset: int) -> tuple[Any, int]:
        value, end = raw(data, offset)
        if not value:
            return None, end
        return json_document(value), end

    return read


def vector_values(raw: bytes) -> list[float]:
    """A VECTOR value (little-endian float32s) as its floats, each the shortest decimal
    that is the same float32 (``0.1``, not 0.10000000149011612), as Debezium gives it."""
    found = []
    for at in range(0, len(raw) - 3, 4):
        value, packed = _F32(raw, at)[0], raw[at : at + 4]
        for digits in range(1, 10):  # 9 significant digits always hold a float32
            shortest = float(f"{value:.{digits}g}")
            if _same_float32(shortest, packed):
                break
        found.append(shortest)
    return found


def _same_float32(value: float, packed: bytes) -> bool:
    try:
        return _F32_PACK(value) == packed
    except OverflowError:  # rounded past the largest float32
        return False


def _vector(length_size: int) -> Reader:
    raw = _length_prefixed(length_size)

    def read(data: bytes, offset: int) -> tuple[list[float], int]:
        value, end = raw(data, offset)
        return vector_values(value), end

    return read


def _read_date(data: bytes, offset: int) -> tuple[date | str, int]:
    value = int.from_bytes(data[offset : offset + 3], "little")
    day, month, year = value & 31, (value >> 5) & 15, value >> 9
    try:
        return date(year, month, day), offset + 3
    except ValueError:  # '0000-00-00', a partial or invalid date: its text (_zero_dates)
        return zero_date_text("date", year, month, day), offset + 3


def _frac_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """Bytes and reader of the fractional seconds of a DATETIME2/TIMESTAMP2/TIME2."""
    size = (fsp + 1) // 2
    scale = 10 ** (6 - 2 * size)

    def read(data: bytes, offset: int) -> int:
        value: int = int.from_bytes(data[offset : offset + size], "big")
        return int(value * scale)

    return size, read


def _datetime2(fsp: int) -> Reader:
    size, frac = _frac_reader(fsp)

    def read(data: bytes, offset: int) -> tuple[datetime | str, int]:
        packed = int.from_bytes(data[offset : offset + 5], "big") - 0x8000000000
        micro = frac(data, offset + 5) if size else 0
        ymd, hms = packed >> 17, packed & 0x1FFFF
        year_month = ymd >> 5
        year, month, day = year_month // 13, year_month % 13, ymd & 31
        clock = (hms >> 12, (hms >> 6) & 63, hms & 63, micro)
        end = offset + 5 + size
        try:
            return datetime(year, month, day, *clock), end
        except ValueError:
            return zero_date_text("datetime", year, month, day, *clock), end

    return read


def _timestamp2(fsp: int) -> Reader:
    size, frac = _frac_reader(fsp)

    def read(data: bytes, offset: int) -> tuple[datetime | str, int]:
        seconds = _BE_U32(data, offset)[0]
        micro = frac(data, offset + 4) if size else 0
        if seconds == 0 and micro == 0:
            return _ZERO_TIMESTAMP, offset + 4 + size
        return _EPOCH + timedelta(seconds=seconds, microseconds=micro), offset + 4 + size

    return read


def _time2(fsp: int) -> Reader:
    # The packed form is (hms << 24) + microseconds, stored big-endian with an
    # offset; negative values store their fraction as a borrow from the integer
    # part, which is undone here before the sign is applied.
    size = (fsp + 1) // 2

    def read(data: bytes, offset: int) -> tuple[timedelta, int]:
        intpart = int.from_bytes(data[offset : offset + 3], "big") - 0x800000
        if size == 0:
            packed = intpart << 24
        elif size == 1:
            fraction = data[offset + 3]
            if intpart < 0 and fraction:
                intpart, fraction = intpart + 1, fraction - 0x100
            packed = (intpart << 24) + fraction * 10000
        elif size == 2:
            fraction = int.from_bytes(data[offset + 3 : offset + 5], "big")
            if intpart < 0 and fraction:
                intpart, fraction = intpart + 1, fraction - 0x10000
            packed = (intpart << 24) + fraction * 100
        else:
            packed = int.from_bytes(data[offset : offset + 6], "big") - 0x800000000000
        negative = packed < 0
        packed = -packed if negative else packed
        hms, micro = packed >> 24, packed & 0xFFFFFF
        value = timedelta(
            hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 63, seconds=hms & 63, microseconds=micro
        )
        return (-value if negative else value), offset + 3 + size

    return read


def _read_time_old(data: bytes, offset: int) -> tuple[timedelta, int]:
    value = int.from_bytes(data[offset : offset + 3], "little", signed=True)
    sign, value = (-1, -value) if value < 0 else (1, value)
    delta = timedelta(hours=value // 10000, minutes=value // 100 % 100, seconds=value % 100)
    return sign * delta, offset + 3


def _read_datetime_old(data: bytes, offset: int) -> tuple[datetime | str, int]:
    value = _U64(data, offset)[0]
    day_part, time_part = divmod(value, 1000000)
    year, month, day = day_part // 10000, day_part // 100 % 100, day_part % 100
    hour, minute, second = time_part // 10000, time_part // 100 % 100, time_part % 100
    try:
        return datetime(year, month, day, hour, minute, second), offset + 8
    except ValueError:
        return zero_date_text("datetime", year, month, day, hour, minute, second), offset + 8


def _read_timestamp_old(data: bytes, offset: int) -> tuple[datetime | str, int]:
    seconds = _U32(data, offset)[0]
    return (_EPOCH + timedelta(seconds=seconds) if seconds else _ZERO_TIMESTAMP), offset + 4


def _enum(values: Sequence[str], size: int) -> Reader:
    choices = ("", *values)  # index 0 is the empty string of an invalid value

    def read(data: bytes, offset: int) -> tuple[str, int]:
        return choices[int.from_bytes(data[offset : offset + size], "little")], offset + size

    return read


def _set(values: Sequence[str], size: int) -> Reader:
    members = tuple(values)

    def read(data: bytes, offset: int) -> tuple[frozenset[str], int]:
        mask = int.from_bytes(data[offset : offset + size], "little")
        chosen = frozenset(v for i, v in enumerate(members) if mask >> i & 1)
        return chosen, offset + size

    return read


def _bit(size: int) -> Reader:
    def read(data: bytes, offset: int) -> tuple[int, int]:
        return int.from_bytes(data[offset : offset + size], "big"), offset + size

    return read


def _quote(values: Sequence[str]) -> str:
    return ",".join("'" + v.replace("'", "''") + "'" for v in values)


def _charset(column: Any) -> str:
    collation = getattr(column, "collation_name", None) or ""
    return collation.split("_", 1)[0] if collation else "binary"


def _with_fsp(name: str, fsp: int) -> str:
    return f"{name}({fsp})" if fsp else name


_INTS = {
    FIELD_TYPE.TINY: ("tinyint", 1, _S8, _U8),
    FIELD_TYPE.SHORT: ("smallint", 2, _S16, _U16),
    FIELD_TYPE.LONG: ("int", 4, _S32, _U32),
    FIELD_TYPE.LONGLONG: ("bigint", 8, _S64, _U64),
}


def column_reader(column: Any, *, is_json: bool = False) -> tuple[str, Reader]:
    """The COLUMN_TYPE string and the value reader of one table-map column."""
    code = column.type
    if code in _INTS:
        name, size, signed, unsigned = _INTS[code]
        if column.unsigned:
            return f"{name} unsigned", _native(_fixed(unsigned, size), "uint", size)
        return name, _native(_fixed(signed, size), "int", size)
    if code == FIELD_TYPE.INT24:
        kind = "uint" if column.unsigned else "int"
        return ("mediumint unsigned" if column.unsigned else "mediumint"), _native(
            _int24(not column.unsigned), kind, 3
        )
    if code == FIELD_TYPE.NEWDECIMAL:
        declared = f"decimal({column.precision},{column.decimals})"
        return (f"{declared} unsigned" if column.unsigned else declared), _native(
            _decimal(column.precision, column.decimals), "decimal", column.precision,
            column.decimals,
        )  # fmt: skip
    if code == FIELD_TYPE.FLOAT:
        return "float", _native(_read_float, "float")
    if code == FIELD_TYPE.DOUBLE:
        return "double", _native(_fixed(_F64, 8), "double")
    if code == FIELD_TYPE.YEAR:
        return "year", _native(_read_year, "year")
    if code in (FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING):
        charset = _charset(column)
        prefix = 2 if column.max_length > 255 else 1
        fixed = code == FIELD_TYPE.STRING
        if charset == "binary":
            declared = "binary" if fixed else "varbinary"
            reader = (
                _native(_binary_padded(prefix, column.max_length), "padded", prefix,
                        column.max_length)
                if fixed
                else _native(_length_prefixed(prefix), "bytes", prefix)
            )  # fmt: skip
            return f"{declared}({column.max_length})", reader
        chars = column.max_length // _MBMAXLEN.get(charset, 1)
        codec = _PYTHON_CODEC.get(charset, charset)
        reader = _utf8_short if prefix == 1 and codec == "utf-8" else _text(prefix, codec)
        if codec == "utf-8":
            reader = _native(reader, "utf8", prefix)
        return f"{'char' if fixed else 'varchar'}({chars})", reader
    if code == FIELD_TYPE.BLOB:
        charset = _charset(column)
        size = column.length_size
        if charset == "binary":
            return f"{_BLOB_PREFIX[size]}blob", _native(_length_prefixed(size), "bytes", size)
        if is_json:
            return "json", _json_text(size)
        codec = _PYTHON_CODEC.get(charset, charset)
        text = _text(size, codec)
        if codec == "utf-8":
            text = _native(text, "utf8", size)
        return f"{_BLOB_PREFIX[size]}text", text
    if code == FIELD_TYPE.JSON:
        return "json", _json_binary(column.length_size)
    if code == FIELD_TYPE.DATE:
        return "date", _native(_read_date, "date")
    if code == FIELD_TYPE.TIME2:
        return _with_fsp("time", column.fsp), _native(_time2(column.fsp), "time2", column.fsp)
    if code == FIELD_TYPE.DATETIME2:
        return _with_fsp("datetime", column.fsp), _native(
            _datetime2(column.fsp), "datetime2", column.fsp
        )
    if code == FIELD_TYPE.TIMESTAMP2:
        return _with_fsp("timestamp", column.fsp), _native(
            _timestamp2(column.fsp), "timestamp2", column.fsp
        )
    if code == FIELD_TYPE.TIME:
        return "time", _read_time_old
    if code == FIELD_TYPE.DATETIME:
        return "datetime", _read_datetime_old
    if code == FIELD_TYPE.TIMESTAMP:
        return "timestamp", _read_timestamp_old
    if code == FIELD_TYPE.ENUM:
        values = column.enum_values[1:] if column.enum_values else []
        return f"enum({_quote(values)})", _native(
            _enum(values, column.size), "enum", column.size, labels=values
        )
    if code == FIELD_TYPE.SET:
        values = column.set_values or []
        return f"set({_quote(values)})", _native(
            _set(values, column.size), "set", column.size, labels=values
        )
    if code == FIELD_TYPE.BIT:
        return f"bit({column.bits})", _native(_bit(column.bytes), "bit", column.bytes)
    if code == FIELD_TYPE.GEOMETRY:
        return "geometry", _length_prefixed(column.length_size)
    if code == VECTOR:
        dimensions = getattr(column, "dimensions", None)
        declared = "vector" if dimensions is None else f"vector({dimensions})"
        return declared, _native(_vector(column.length_size), "vector", column.length_size)
    raise UnknownColumnType(
        f"column {column.name!r} has binlog type code {code}, which dbus cannot decode yet; "
        "exclude the table from the source's table patterns or report the type"
    )


_WIDTHS = {
    FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4,
    FIELD_TYPE.LONGLONG: 8, FIELD_TYPE.FLOAT: 4, FIELD_TYPE.DOUBLE: 8, FIELD_TYPE.YEAR: 1,
    FIELD_TYPE.DATE: 3, FIELD_TYPE.TIME: 3, FIELD_TYPE.DATETIME: 8, FIELD_TYPE.TIMESTAMP: 4,
}  # fmt: skip
_FRACTIONAL_WIDTHS = {FIELD_TYPE.TIME2: 3, FIELD_TYPE.DATETIME2: 5, FIELD_TYPE.TIMESTAMP2: 4}


def column_width(column: Any) -> int | None:
    """Bytes a value of this table-map column takes in a row image, if the type fixes it."""
    code = column.type
    if code in _WIDTHS:
        return _WIDTHS[code]
    if code in _FRACTIONAL_WIDTHS:
        return _FRACTIONAL_WIDTHS[code] + (int(column.fsp) + 1) // 2
    if code == FIELD_TYPE.NEWDECIMAL:
        return _decimal_size(column.precision, column.decimals)
    if code in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        return int(column.size)
    if code == FIELD_TYPE.BIT:
        return int(column.bytes)
    return None  # strings, blobs, JSON, geometry: a length prefix says


def _converted(read: Reader, convert: Callable[[Any], Any]) -> Reader:
    def converted(data: bytes, offset: int) -> tuple[Any, int]:
        value, end = read(data, offset)
        return convert(value), end

    return converted


def _uuid_text(value: bytes) -> str:
    # The binlog carries MariaDB's in-memory UUID, in text order for every version
    # (only the stored record swaps the segments of versions 1 to 5).
    return str(uuid.UUID(bytes=value))


def _inet4_text(value: bytes) -> str:
    return ".".join(str(octet) for octet in value)


def _inet6_text(value: bytes) -> str:
    """MariaDB's INET6 text: IPv4-mapped and IPv4-compatible addresses end in a dotted
    quad; otherwise the first longest run of zero groups, even a single one, is ``::``."""
    groups = [int.from_bytes(value[i : i + 2], "big") for i in range(0, 16, 2)]
    if groups[:5] == [0] * 5 and (groups[5] == 0xFFFF or (groups[5] == 0 and groups[6])):
        return ("::ffff:" if groups[5] else "::") + _inet4_text(value[12:])
    start, length, run = 0, 0, 0
    for index, group in enumerate(groups):
        run = run + 1 if group == 0 else 0
        if run > length:
            start, length = index - run + 1, run
    digits = [f"{group:x}" for group in groups]
    if not length:
        return ":".join(digits)
    return ":".join(digits[:start]) + "::" + ":".join(digits[start + length :])


def _float_to(decimals: int) -> Reader:
    # SELECT shows a FLOAT(M,D) with D decimals of the stored single-precision value.
    def read(data: bytes, offset: int) -> tuple[float, int]:
        return float(f"{_F32(data, offset)[0]:.{decimals}f}"), offset + 4

    return read


_FLOAT_M_D = re.compile(r"^float\(\d+,(\d+)\)")
_AS_TEXT = {"uuid": _uuid_text, "inet6": _inet6_text, "inet4": _inet4_text}


def declared_reader(declared: str, table_map_reader: Reader) -> Reader:
    """The reader of a column declared ``declared`` (a ``declared_type`` the table map
    agreed with): the table map's own reader, except where SELECT shows the value
    differently from what the table map alone says (FLOAT(M,D), UUID, INET4/6)."""
    float_m_d = _FLOAT_M_D.match(declared)
    if float_m_d:
        return _float_to(int(float_m_d[1]))
    as_text = _AS_TEXT.get(declared)
    if as_text is not None:
        return _converted(table_map_reader, as_text)
    return table_map_reader
