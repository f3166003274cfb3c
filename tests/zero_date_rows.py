"""What SELECT shows of a DATE/DATETIME/TIMESTAMP, in the shape dbus writes the type:
the expectation the zero-date tests hold capture and the sinks to."""

from __future__ import annotations

from datetime import date


def dbus_text(shown: str | None, column_type: str) -> str | None:
    """``CAST(column AS CHAR)`` in dbus's JSON shape: ``T`` between date and time, a
    six-digit fraction only when there is one, ``Z`` after a timestamp."""
    if shown is None or column_type == "date":
        return shown
    day, clock = shown.split(" ")
    clock, _, fraction = clock.partition(".")
    text = f"{day}T{clock}" + (f".{fraction.ljust(6, '0')}" if fraction.strip("0") else "")
    return text + "Z" if column_type.startswith("timestamp") else text


def is_real(shown: str) -> bool:
    """Whether SELECT's text of a date is one the calendar has."""
    try:
        date.fromisoformat(shown[:10])
    except ValueError:
        return False
    return True
