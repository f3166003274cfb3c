"""Zero and partial dates: the DATE, DATETIME and TIMESTAMP values no calendar has.

Under a permissive ``sql_mode`` MySQL and MariaDB store ``0000-00-00``, dates with
a zero month or day (``2015-00-21``, ``2015-05-00``), a zero year
(``0000-05-12``) and, with ``ALLOW_INVALID_DATES``, days a month lacks
(``2015-02-30``). ``datetime.date`` holds none of them, and ``None`` would make them
look like SQL ``NULL`` (and make two keys equal), so dbus holds each as text: what
SELECT shows, in the shape dbus writes real values of the column's type
(``dbus_fn.columns``):

- ``date``: ``"0000-00-00"``
- ``datetime``: ``"2015-05-00T10:11:12"``, ``".ffffff"`` (six digits) only when
  the value has a fraction, as for real datetimes
- ``timestamp``: ``"0000-00-00T00:00:00Z"``

Real dates are never held as text: they stay ``date``/``datetime`` values.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

__all__ = ["DateKind", "zero_date_from_json", "zero_date_from_select", "zero_date_text"]

DateKind = Literal["date", "datetime", "timestamp"]

_PARTS = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:([T ])([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,6}))?)?(Z?)"
)


def zero_date_text(
    kind: DateKind,
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
) -> str:
    """The held text of a date the calendar lacks, from its parts."""
    text = f"{year:04d}-{month:02d}-{day:02d}"
    if kind == "date":
        return text
    text += f"T{hour:02d}:{minute:02d}:{second:02d}"
    if microsecond:
        text += f".{microsecond:06d}"
    return text + "Z" if kind == "timestamp" else text


def _is_real(year: int, month: int, day: int) -> bool:
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


def _parse(text: str, kind: DateKind, separator: str, zone: str) -> str | None:
    match = _PARTS.fullmatch(text)
    if match is None:
        return None
    year, month, day, sep, hour, minute, second, fraction, z = match.groups()
    if (kind == "date") != (sep is None) or (sep is not None and sep != separator) or z != zone:
        return None
    y, mo, d = int(year), int(month), int(day)
    if mo > 12 or d > 31 or _is_real(y, mo, d):
        return None
    if kind == "date":
        return zero_date_text(kind, y, mo, d)
    h, mi, s = int(hour), int(minute), int(second)
    if h > 23 or mi > 59 or s > 59:
        return None
    return zero_date_text(kind, y, mo, d, h, mi, s, int((fraction or "0").ljust(6, "0")))


def zero_date_from_json(text: str, kind: DateKind) -> str | None:
    """The held text of a zero or partial date in dbus's JSON form (one to six
    fraction digits accepted), or ``None`` when ``text`` is a real date or no date."""
    return _parse(text, kind, "T", "Z" if kind == "timestamp" else "")


def zero_date_from_select(text: str, kind: DateKind) -> str | None:
    """The held text of a zero or partial date as a SELECT returns it
    (``"0000-00-00 00:00:00.500"``), or ``None`` when it is not one."""
    return _parse(text, kind, " ", "")
