"""MySQL's partial JSON updates: the diffs an UPDATE's after image holds for a JSON
column, applied to the before image's document to give the whole after image.

A session with ``binlog_row_value_options=PARTIAL_JSON`` makes the server log an
UPDATE that changes a JSON column with ``JSON_SET``, ``JSON_REPLACE`` or
``JSON_REMOVE`` as a ``PARTIAL_UPDATE_ROWS_EVENT``: such a column's after image is a
4-byte length, then diffs, each an operation (REPLACE, INSERT, REMOVE), a JSON path
(``$.a."b c"[2]``) and, but for REMOVE, a binary JSON value. They are applied as a
replica applies them: every leg but the last must exist exactly (no wildcards, no
auto-wrapping); REPLACE needs the last one too, INSERT adds an object member that is
not there yet or inserts into an array (an index past the end appends), REMOVE
deletes a member or an array element that is there. A diff that cannot be applied
so raises ``UnappliedDiff``: the capture stops rather than guess the document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from dbus_fn.capture._json_binary import json_document
from dbus_fn.capture._wire import field_number

__all__ = ["Diff", "UnappliedDiff", "apply_diffs", "read_diffs"]

REPLACE, INSERT, REMOVE = 0, 1, 2
_OPERATIONS = ("REPLACE", "INSERT", "REMOVE")
_LENGTH_BYTES = 4
"""The diffs of one column are preceded by their length in 4 bytes, little-endian."""


class UnappliedDiff(ValueError):
    """A column's diffs do not read or do not apply to its before image: why."""


class Diff(NamedTuple):
    operation: int
    path: str
    value: Any = None


class _Cell(NamedTuple):
    """An array leg: ``[number]``, or ``[last-number]`` when ``from_end``."""

    number: int
    from_end: bool


_Leg = str | _Cell
_CELL = re.compile(r"\[\s*(?:(last)\s*(?:-\s*(\d+))?|(\d+))\s*\]")
# A member name without quotes: MySQL writes one so only when it is an ECMAScript
# identifier, which holds none of these.
_MEMBER = re.compile(r"[^\s.\[\]\"*]+")
_STRING = json.JSONDecoder()


def read_diffs(data: bytes, offset: int) -> tuple[list[Diff], int]:
    """The diffs of one column's after image at ``offset``, and where they end."""
    start = offset + _LENGTH_BYTES
    end = start + int.from_bytes(data[offset:start], "little")
    if end > len(data):
        raise UnappliedDiff("the diffs run past the end of the row event")
    diffs = []
    at = start
    while at < end:
        operation = data[at]
        if operation >= len(_OPERATIONS):
            raise UnappliedDiff(f"a diff has operation {operation}, not one MySQL writes (0 to 2)")
        length, at = field_number(data, at + 1)
        path = bytes(data[at : at + length]).decode()
        at += length
        value = None
        if operation != REMOVE:
            length, at = field_number(data, at)
            if length < 1 or at + length > end:
                raise UnappliedDiff(f"the value of the diff at {path} is cut short")
            value = json_document(bytes(data[at : at + length]))
            at += length
        diffs.append(Diff(operation, path, value))
    if at != end:
        raise UnappliedDiff("the last diff runs past the column's diffs")
    return diffs, end


def parse_path(text: str) -> tuple[_Leg, ...]:
    """The legs of a diff's path: member names and array cells, nothing else."""
    at = _skip_space(text, 0)
    if not text.startswith("$", at):
        raise UnappliedDiff(f"the path {text!r} does not start with $")
    legs: list[_Leg] = []
    at = _skip_space(text, at + 1)
    while at < len(text):
        if text[at] == ".":
            at = _skip_space(text, at + 1)
            if text.startswith('"', at):
                name, at = _STRING.raw_decode(text, at)
            else:
                member = _MEMBER.match(text, at)
                if member is None:
                    raise UnappliedDiff(f"the path {text!r} has a leg other than a member name")
                name, at = member[0], member.end()
            legs.append(name)
        else:
            cell = _CELL.match(text, at)
            if cell is None:
                raise UnappliedDiff(f"the path {text!r} has a leg other than an array cell")
            if cell[1]:
                legs.append(_Cell(int(cell[2] or 0), True))
            else:
                legs.append(_Cell(int(cell[3]), False))
            at = cell.end()
        at = _skip_space(text, at)
    return tuple(legs)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _position(cell: _Cell, length: int) -> tuple[int, bool]:
    """Where an array cell is in an array of ``length`` (clamped to its ends), and
    whether it is inside the array."""
    inside = cell.number < length
    if cell.from_end:
        return (length - 1 - cell.number if inside else 0), inside
    return min(cell.number, length), inside


def _copied(value: Any) -> Any:
    """A copy of a document's objects and arrays (the before image stays as it is)."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


def _key_order(key: str) -> tuple[int, bytes]:
    # MySQL keeps an object's members ordered by the length of the key, then its bytes,
    # and a document reads in that order.
    encoded = key.encode()
    return len(encoded), encoded


def _step(value: Any, leg: _Leg) -> tuple[bool, Any]:
    if isinstance(leg, str):
        if isinstance(value, dict) and leg in value:
            return True, value[leg]
        return False, None
    if isinstance(value, list):
        at, inside = _position(leg, len(value))
        if inside:
            return True, value[at]
    return False, None


def apply_diffs(document: Any, diffs: Sequence[Diff]) -> Any:
    """``document`` (left as it is) with ``diffs`` applied in order."""
    result = _copied(document)
    for diff in diffs:
        result = _applied(result, diff)
    return result


def _applied(document: Any, diff: Diff) -> Any:
    what = f"{_OPERATIONS[diff.operation]} at {diff.path}"
    legs = parse_path(diff.path)
    if not legs:
        raise UnappliedDiff(f"{what}: a diff never replaces the whole document")
    parent = document
    for leg in legs[:-1]:
        found, parent = _step(parent, leg)
        if not found:
            raise UnappliedDiff(f"{what}: the before image has no such path")
    last = legs[-1]
    if isinstance(last, str) and isinstance(parent, dict):
        present = last in parent
        if diff.operation == REPLACE and present:
            parent[last] = diff.value
        elif diff.operation == INSERT and not present:
            parent[last] = diff.value
            ordered = sorted(parent.items(), key=lambda item: _key_order(item[0]))
            parent.clear()
            parent.update(ordered)
        elif diff.operation == REMOVE and present:
            del parent[last]
        else:
            held = "already has" if present else "lacks"
            raise UnappliedDiff(f"{what}: the before image {held} that member")
        return document
    if isinstance(last, _Cell) and isinstance(parent, list):
        at, inside = _position(last, len(parent))
        if diff.operation == INSERT:
            parent.insert(at, diff.value)
        elif inside and diff.operation == REPLACE:
            parent[at] = diff.value
        elif inside:
            del parent[at]
        else:
            raise UnappliedDiff(f"{what}: the before image's array has no such element")
        return document
    raise UnappliedDiff(f"{what}: the path's last leg does not fit the value it points into")
