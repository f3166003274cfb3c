"""Column values: the Python value and the JSON form of every MySQL column type.

A column type is the lowercase ``COLUMN_TYPE`` string of ``information_schema``
(``"int unsigned"``, ``"decimal(65,30)"``, ``"enum('a','b')"``...). It alone decides
how a value is held in a ``RowChange`` and how it is written into an event's JSON
``data``, so that a change read back from JSON is equal to the one written.

=====================================  ========================  ==============================
MySQL type                             Python value              JSON form
=====================================  ========================  ==============================
tinyint smallint mediumint int bigint  ``int``                   number
(also ``unsigned``, ``zerofill``,
display width ``(n)``)
decimal numeric (``(p,s)``)            ``decimal.Decimal``       string, exact, no exponent:
                                                                 ``"-12.500"``
float double real                      ``float``                 number (finite only)
date                                   ``datetime.date``         ``"YYYY-MM-DD"``
time (``(fsp)``)                       ``datetime.timedelta``,   ``"[-]HH:MM:SS[.ffffff]"``,
                                       may be negative, up to    hours have 2 or 3 digits
                                       838:59:59.999999
datetime (``(fsp)``)                   naive                     ``"YYYY-MM-DDTHH:MM:SS"``
                                       ``datetime.datetime``     ``[.ffffff]``
timestamp (``(fsp)``)                  aware UTC                 ``"YYYY-MM-DDTHH:MM:SS"``
                                       ``datetime.datetime``     ``[.ffffff]Z``
year                                   ``int``                   number
char varchar tinytext text mediumtext  ``str``                   string
longtext; MariaDB uuid inet4 inet6
binary varbinary tinyblob blob         ``bytes``                 string, standard base64
mediumblob longblob; spatial types                               with padding
(geometry, point... as MySQL's
internal SRID + WKB bytes)
enum(...)                              ``str``                   string
set(...)                               ``frozenset[str]``        sorted list of strings
bit(n)                                 ``int``                   number
json                                   parsed JSON value         the JSON value itself
vector(n) (MySQL 9)                    ``list[float]``, each the array of numbers
                                       shortest decimal of its
                                       float32
NULL in any type                       ``None``                  ``null``
=====================================  ========================  ==============================

Details that matter:

- A fraction (``.ffffff``, always six digits) is written only when the value has
  microseconds; readers accept one to six digits.
- ``timestamp`` values are converted to UTC on the way out and come back as UTC.
- A zero or partial date (``0000-00-00``, ``2015-05-00 10:11:12``), which a
  permissive ``sql_mode`` lets a row hold, is a ``str`` in the shape of the type's
  JSON form (``"0000-00-00"``, ``"2015-05-00T10:11:12"``, ``"0000-00-00T00:00:00Z"``)
  both in Python and in JSON, never ``None`` (``dbus_fn._zero_dates``).
- Integers keep every digit (``bigint unsigned`` up to 18446744073709551615,
  ``bit(64)`` up to 2**64 - 1); JSON readers that hold numbers as doubles (such as
  JavaScript) lose precision above 2**53.
- SQL ``NULL`` and the JSON literal ``null`` in a ``json`` column are both ``None``.
- MariaDB stores ``json`` as ``longtext``; such a column is a ``str``.
- ``set`` and ``enum`` members are not checked against the declared list: the
  table's definition can change while older events are still in flight.
- A column type dbus does not know (``vecter``, a misspelling) raises
  ``UnsupportedColumnTypeError`` rather than guessing a form, because a guess
  would not read back as the same value.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, TypeAlias

from dbus_fn._zero_dates import DateKind, zero_date_from_json
from dbus_fn.column_types import ColumnFamily, ColumnType, parse_column_type
from dbus_fn.errors import ColumnValueError, UnsupportedColumnTypeError

__all__ = [
    "ColumnFamily",
    "ColumnType",
    "JsonValue",
    "from_json_value",
    "infer_column_type",
    "parse_column_type",
    "row_from_json",
    "row_to_json",
    "to_json_value",
]

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

class _Mismatch(Exception):
    """Internal: a codec saw a value of the wrong form; carries what it expected."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass(frozen=True, slots=True)
class _Codec:
    to_json: Callable[[Any], JsonValue]
    from_json: Callable[[Any], Any]


_DAY = '"YYYY-MM-DD"'
_ISO = "YYYY-MM-DDTHH:MM:SS[.ffffff]"
_REAL_MOMENT = "a real calendar date and time"


def _iso_text_reader(
    pattern: re.Pattern[str], parse: Callable[[str], Any], form: str, real: str, kind: DateKind
) -> Callable[[Any], Any]:
    """A reader of ISO date/time text: ``form`` names the shape ``pattern`` wants, ``real``
    what a value neither real nor a zero date MySQL stores (month 13) should have been.
    A zero or partial date of ``kind`` stays its text (``dbus_fn._zero_dates``)."""

    def read(value: Any) -> Any:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise _Mismatch(form)
        try:
            return parse(value)
        except ValueError as exc:
            held = zero_date_from_json(value, kind)
            if held is None:
                raise _Mismatch(real) from exc
            return held

    return read


def _zero_date_to_json(value: str, kind: DateKind, expected: str) -> str:
    """A zero or partial date's text as its JSON form: it must be the held text itself."""
    if zero_date_from_json(value, kind) != value:
        raise _Mismatch(expected)
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ranged_int(low: int, high: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if not _is_int(value) or not low <= value <= high:
            raise _Mismatch(f"an int from {low} to {high}")
        return int(value)

    return check


def _integer_bounds(column: ColumnType) -> tuple[int, int]:
    bits = column.bits or 64
    if column.family == "bit" or column.unsigned:
        return 0, 2**bits - 1
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _integer_codec(column: ColumnType) -> _Codec:
    low, high = _integer_bounds(column)
    check = _ranged_int(low, high)

    def from_python(value: Any) -> int:
        if type(value) is int and low <= value <= high:
            return value  # the common case, without the calls below
        # A Python bool is an int; BOOL columns are TINYINT(1). JSON true is not a number.
        return check(int(value) if isinstance(value, bool) else value)

    return _Codec(from_python, check)


_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _decimal_to_json(value: Any) -> str:
    if type(value) is Decimal and value.is_finite():
        return format(value, "f")  # the common case, without the checks below
    if _is_int(value):
        value = Decimal(value)
    if not isinstance(value, Decimal) or not value.is_finite():
        raise _Mismatch("a finite decimal.Decimal (or an int)")
    return format(value, "f")


def _decimal_from_json(value: Any) -> Decimal:
    if not isinstance(value, str) or not _DECIMAL_TEXT.fullmatch(value):
        raise _Mismatch('a decimal string such as "-12.50"')
    try:
        return Decimal(value)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise _Mismatch('a decimal string such as "-12.50"') from exc


def _float_value(value: Any) -> float:
    if type(value) is float and math.isfinite(value):
        return value  # the common case, without the checks below
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Mismatch("a finite float")
    return float(value)


def _date_to_json(value: Any) -> str:
    if type(value) is date:
        return value.isoformat()  # the common case, without the checks below
    if type(value) is str:
        return _zero_date_to_json(value, "date", 'a datetime.date or a zero date "0000-00-00"')
    if type(value) is not date:
        raise _Mismatch("a datetime.date")
    return value.isoformat()


_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


_date_from_json = _iso_text_reader(
    _DATE_TEXT,
    date.fromisoformat,
    f"a date string {_DAY}",
    f"a real calendar date {_DAY}",
    "date",
)


def _fraction(microseconds: int) -> str:
    return f".{microseconds:06d}" if microseconds else ""


def _time_to_json(value: Any) -> str:
    if not isinstance(value, timedelta):
        raise _Mismatch("a datetime.timedelta")
    total = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total < 0 else ""
    seconds, micros = divmod(abs(total), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{sign}{hours:02d}:{minute:02d}:{second:02d}{_fraction(micros)}"


_TIME_TEXT = re.compile(r"(-?)([0-9]{2,3}):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]{1,6}))?")


def _time_from_json(value: Any) -> timedelta:
    match = _TIME_TEXT.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _Mismatch('a time string "[-]HH:MM:SS[.ffffff]"')
    sign, hours, minutes, seconds, fraction = match.groups()
    magnitude = timedelta(
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds),
        microseconds=int((fraction or "0").ljust(6, "0")),
    )
    return -magnitude if sign else magnitude


def _datetime_text(value: datetime) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.ffffff]`` of a naive datetime: ``isoformat``'s own form,
    which writes the microseconds only when there are some."""
    return value.isoformat()


def _datetime_to_json(value: Any) -> str:
    if type(value) is str:
        return _zero_date_to_json(value, "datetime", 'a zero date "0000-00-00T00:00:00"')
    if not isinstance(value, datetime) or value.tzinfo is not None:
        raise _Mismatch("a naive datetime.datetime (DATETIME has no time zone)")
    return _datetime_text(value)


_DATETIME_TEXT = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
_NAIVE_TEXT = re.compile(_DATETIME_TEXT)
_UTC_TEXT = re.compile(_DATETIME_TEXT + "Z")


_datetime_from_json = _iso_text_reader(
    _NAIVE_TEXT, datetime.fromisoformat, f'a datetime string "{_ISO}"', _REAL_MOMENT, "datetime"
)


def _timestamp_to_json(value: Any) -> str:
    if type(value) is str:
        return _zero_date_to_json(value, "timestamp", 'a zero date "0000-00-00T00:00:00Z"')
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise _Mismatch("a timezone-aware datetime.datetime (TIMESTAMP is UTC)")
    utc = value if value.tzinfo is UTC else value.astimezone(UTC)
    return utc.isoformat()[:-6] + "Z"  # its "+00:00" written as "Z"


_timestamp_from_json = _iso_text_reader(
    _UTC_TEXT,
    lambda text: datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC),
    f'a UTC timestamp string "{_ISO}Z"',
    _REAL_MOMENT,
    "timestamp",
)


def _year_value(value: Any) -> int:
    if isinstance(value, bool) or not _is_int(value) or not (value == 0 or 1901 <= value <= 2155):
        raise _Mismatch("a year: 0 or 1901 to 2155")
    return int(value)


def _str_value(value: Any) -> str:
    if not isinstance(value, str):
        raise _Mismatch("a str")
    return value


def _bytes_to_json(value: Any) -> str:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _Mismatch("bytes")
    return base64.b64encode(value).decode("ascii")


def _bytes_from_json(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _Mismatch("a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _Mismatch("a standard, padded base64 string") from exc


def _set_to_json(value: Any) -> list[JsonValue]:
    if not isinstance(value, set | frozenset) or not all(isinstance(m, str) for m in value):
        raise _Mismatch("a frozenset of str")
    return list(sorted(value))


def _set_from_json(value: Any) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise _Mismatch("a list of strings")
    return frozenset(value)


def _json_to_json(value: Any) -> JsonValue:
    _check_json(value)
    return value  # type: ignore[no-any-return]


def _check_json(value: Any) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Mismatch("a JSON value (no NaN or infinity)")
        return
    if isinstance(value, list):
        for item in value:
            _check_json(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Mismatch("a JSON value (object keys must be str)")
            _check_json(item)
        return
    raise _Mismatch("a JSON value: dict, list, str, int, float, bool or None")


def _json_from_json(value: Any) -> Any:
    return value


def _vector_value(value: Any) -> JsonValue:
    if not isinstance(value, list):
        raise _Mismatch("a list of finite floats")
    return [_float_value(item) for item in value]


@lru_cache(maxsize=4096)
def _codec(column_type: str) -> _Codec:
    parsed = parse_column_type(column_type)
    family = parsed.family
    if family in ("integer", "bit"):
        return _integer_codec(parsed)
    simple: dict[str, _Codec] = {
        "decimal": _Codec(_decimal_to_json, _decimal_from_json),
        "float": _Codec(_float_value, _float_value),
        "date": _Codec(_date_to_json, _date_from_json),
        "time": _Codec(_time_to_json, _time_from_json),
        "datetime": _Codec(_datetime_to_json, _datetime_from_json),
        "timestamp": _Codec(_timestamp_to_json, _timestamp_from_json),
        "year": _Codec(_year_value, _year_value),
        "text": _Codec(_str_value, _str_value),
        "enum": _Codec(_str_value, _str_value),
        "bytes": _Codec(_bytes_to_json, _bytes_from_json),
        "set": _Codec(_set_to_json, _set_from_json),
        "json": _Codec(_json_to_json, _json_from_json),
        "vector": _Codec(_vector_value, _vector_value),
    }
    return simple[family]


def _value_error(
    exc: _Mismatch, value: object, column_type: str, column: str | None, direction: str
) -> ColumnValueError:
    where = f"column {column!r} ({column_type})" if column else f"a {column_type} column"
    # The value itself stays out of the message: rows may hold personal data.
    received = "null" if value is None else type(value).__name__
    return ColumnValueError(
        f"{where}: expected {exc.expected} {direction}, got a {received}; "
        "check the value against the type table in dbus_fn.columns",
        column_type=column_type,
        expected=exc.expected,
        received=received,
        column=column,
    )


def _with_column(exc: UnsupportedColumnTypeError, column: str | None) -> None:
    if column is not None and exc.column is None:
        exc.column = column
        exc.message = f"column {column!r}: {exc.message}"


def _convert(value: Any, column_type: str, column: str | None, *, outward: bool) -> Any:
    try:
        codec = _codec(column_type)
    except UnsupportedColumnTypeError as exc:
        _with_column(exc, column)
        raise
    if value is None:
        return None
    try:
        return codec.to_json(value) if outward else codec.from_json(value)
    except _Mismatch as exc:
        direction = "in Python" if outward else "in JSON"
        raise _value_error(exc, value, column_type, column, direction) from None


def to_json_value(value: Any, column_type: str, *, column: str | None = None) -> JsonValue:
    """The JSON form of a Python column value of type ``column_type``."""
    result: JsonValue = _convert(value, column_type, column, outward=True)
    return result


def from_json_value(value: JsonValue, column_type: str, *, column: str | None = None) -> Any:
    """The Python value of a JSON column value of type ``column_type``."""
    return _convert(value, column_type, column, outward=False)


def _type_of(column: str, column_types: Mapping[str, str]) -> str:
    try:
        return column_types[column]
    except KeyError:
        raise UnsupportedColumnTypeError(
            f"column {column!r} has no column type; expected one in column_types "
            f"(known: {', '.join(sorted(column_types)) or 'none'})",
            column_type="",
            column=column,
        ) from None


def _convert_row(
    row: Mapping[str, Any], column_types: Mapping[str, str], *, outward: bool
) -> dict[str, Any]:
    converted: dict[str, Any] = {}
    try:
        # The fast path: one cached codec lookup per value, no error bookkeeping.
        for name, value in row.items():
            if value is None:
                converted[name] = None
            else:
                codec = _codec(column_types[name])
                converted[name] = codec.to_json(value) if outward else codec.from_json(value)
    except (KeyError, _Mismatch, UnsupportedColumnTypeError):
        # Redo the row the slow way, which names the column in its error.
        for name, value in row.items():
            _convert(value, _type_of(name, column_types), name, outward=outward)
        raise  # pragma: no cover - the slow path raises first
    return converted


def row_encoder(
    column_types: Mapping[str, str],
) -> Callable[[Mapping[str, Any]], dict[str, JsonValue]]:
    """``row_to_json`` compiled for one set of column types, for rows by the thousand.

    The codecs are looked up once, not once per value; a row that does not fit
    raises the same errors ``row_to_json`` does.
    """
    try:
        encoders = {name: _codec(column_type).to_json for name, column_type in column_types.items()}
    except UnsupportedColumnTypeError:
        encoders = {}  # every row takes the slow path below, which names the column

    def encode(row: Mapping[str, Any]) -> dict[str, JsonValue]:
        try:
            return {
                name: None if value is None else encoders[name](value)
                for name, value in row.items()
            }
        except (KeyError, _Mismatch):
            return row_to_json(row, column_types)  # raises, naming the column

    return encode


def row_to_json(row: Mapping[str, Any], column_types: Mapping[str, str]) -> dict[str, JsonValue]:
    """The JSON object of a row; every column needs a type in ``column_types``."""
    return _convert_row(row, column_types, outward=True)


def row_from_json(data: Mapping[str, JsonValue], column_types: Mapping[str, str]) -> dict[str, Any]:
    """The Python row of a JSON object; every column needs a type in ``column_types``."""
    return _convert_row(data, column_types, outward=False)


_INFERRED: tuple[tuple[type, str], ...] = (
    (bool, "tinyint(1)"),
    (float, "double"),
    (Decimal, "decimal(65,30)"),
    (str, "longtext"),
    (bytes, "longblob"),
    (bytearray, "longblob"),
    (timedelta, "time(6)"),
    (frozenset, "set"),
    (set, "set"),
    (dict, "json"),
    (list, "json"),
)


def infer_column_type(value: Any, *, column: str | None = None) -> str:
    """A column type that holds ``value`` losslessly, for columns declared nowhere.

    Capture always declares types; this serves rows built by hand (tests, the
    emulator). ``None`` alone says nothing and is recorded as ``json``.
    """
    if value is None:
        return "json"
    if _is_int(value):
        if -(2**63) <= value < 2**63:
            return "bigint"
        return "bigint unsigned" if 0 <= value < 2**64 else "json"
    if isinstance(value, datetime):
        return "datetime(6)" if value.tzinfo is None else "timestamp(6)"
    if isinstance(value, date):
        return "date"
    for python_type, column_type in _INFERRED:
        if isinstance(value, python_type):
            return column_type
    where = f"column {column!r}: " if column else ""
    raise ColumnValueError(
        f"{where}cannot infer a column type for a {type(value).__name__}; expected a value "
        "of a type in the table of dbus_fn.columns (int, str, Decimal, datetime, bytes...)",
        column_type="",
        expected="a documented Python column value",
        received=type(value).__name__,
        column=column,
    )
