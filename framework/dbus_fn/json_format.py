"""CloudEvents in the JSON event format, one event or one per line (JSONL).

JSONL files hold what ``dbus source record`` captured and what the local
emulator replays: one structured-mode JSON event per line, UTF-8 (a leading
byte order mark is read past), blank lines ignored. Writing accepts capture
items too and converts them on the way. An event is read only up to
``MAX_EVENT_BYTES`` and ``MAX_EVENT_DEPTH``: beyond them it is refused in one line
instead of being read without bound or overflowing the stack (issue #46).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.formats.json import JSONFormat

from dbus_fn._text import not_utf8
from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX, CloudEvent, new_event, to_cloudevent
from dbus_fn.errors import EventFormatError
from dbus_fn.events import CaptureItem, RowChange, SchemaChange, TransactionCommit

__all__ = ["event_from_json", "event_to_json", "read_jsonl", "write_jsonl"]

_FORMAT = JSONFormat()

MAX_EVENT_BYTES = 64 * 1024 * 1024
"""The most one event (a file given to ``dbus fn invoke --event``, a line of a JSONL
file) may hold; at most one byte more is read. 64 MiB is MySQL's default
``max_allowed_packet``, so a default server writes no larger row to its binlog, and
the largest message the runtime's Kafka sink sends: a larger event is none that dbus
captures or delivers, and a file such as /dev/zero is not read on without end."""

MAX_EVENT_DEPTH = 128
"""How deeply one event may nest arrays and objects. MySQL refuses JSON documents
deeper than 100 levels and an event holds a column's value three levels down (the
event, its data, the row image): 128 takes every event a source gives, and stays far
below Python's recursion limit, which the JSON reader and every later step that walks
the event would otherwise hit, each with a traceback of its own."""

# RFC 3339 date-time: seconds required, an offset of hours and minutes (or Z).
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
# RFC 2046 media type: type "/" subtype, then optional parameters.
_MEDIA_TYPE = re.compile(r"[\w!#$&^.+-]+/[\w!#$&^.+-]+(\s*;.*)?", re.ASCII | re.DOTALL)


def _attribute_problems(attributes: dict[str, Any]) -> list[str]:
    """What the JSON format's reader lets through but CloudEvents 1.0 refuses."""
    problems = []
    time = attributes.get("time")
    if isinstance(time, str) and not _TIME.fullmatch(time):
        problems.append(
            f"time {time!r} is not an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fraction] "
            "then Z or +HH:MM)"
        )
    media_type = attributes.get("datacontenttype")
    if isinstance(media_type, str) and not _MEDIA_TYPE.fullmatch(media_type):
        problems.append(
            f"datacontenttype {media_type!r} is not an RFC 2046 media type such as "
            "application/json"
        )
    return problems


def _as_event(item: BaseCloudEvent | CaptureItem, type_prefix: str) -> BaseCloudEvent:
    if isinstance(item, RowChange | SchemaChange | TransactionCommit):
        return to_cloudevent(item, type_prefix=type_prefix)
    return item


def event_to_json(
    event: BaseCloudEvent | CaptureItem, *, type_prefix: str = DEFAULT_TYPE_PREFIX
) -> bytes:
    """The structured JSON form of an event (a capture item is converted first)."""
    return _FORMAT.write(_as_event(event, type_prefix))


def event_from_json(data: str | bytes, *, where: str | None = None) -> CloudEvent:
    """Read one structured JSON event; ``where`` names its origin in errors.

    Raises ``EventFormatError`` for text that is not JSON, not an object, or not
    a valid CloudEvents 1.0 event.
    """
    data = _without_bom(data)
    if len(data) > MAX_EVENT_BYTES:
        raise EventFormatError(
            f"{where or 'event'} holds more than {MAX_EVENT_BYTES} bytes "
            f"({MAX_EVENT_BYTES >> 20} MiB), the most one event may: expected one CloudEvent "
            "as a JSON object; record events with `dbus source record`",
            problems=(f"over {MAX_EVENT_BYTES} bytes",),
            where=where,
        )
    try:
        # UTF-8, as RFC 8259 requires: json.loads would guess UTF-16 for binary data.
        parsed: Any = json.loads(data.decode() if isinstance(data, bytes) else data)
    except UnicodeDecodeError as exc:
        raise EventFormatError(
            f"{where or 'event'} {not_utf8(exc)}: expected a CloudEvent as JSON; record events "
            "with `dbus source record` or write them as UTF-8 JSON",
            problems=(f"not UTF-8: {exc}",),
            where=where,
        ) from None
    except RecursionError:
        raise _too_deep(where) from None
    except ValueError as exc:
        if not data.strip():
            raise EventFormatError(
                f"{where or 'event'} is empty: expected one CloudEvent as a JSON object",
                problems=("empty",),
                where=where,
            ) from None
        if isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data":
            fix = (
                "expected one CloudEvent; a JSONL file of events goes to "
                "`dbus fn run-local --events`"
                if exc.lineno > 1
                else "expected one CloudEvent per line"
            )
            raise EventFormatError(
                f"{where or 'event'} holds more than one JSON value (the next at line "
                f"{exc.lineno}, column {exc.colno}): {fix}",
                problems=(f"malformed JSON: {exc}",),
                where=where,
            ) from None
        raise EventFormatError(
            f"{where or 'event'} is not valid JSON ({exc}); expected one CloudEvent "
            "as a JSON object",
            problems=(f"malformed JSON: {exc}",),
            where=where,
        ) from None
    if not isinstance(parsed, dict):
        raise EventFormatError(
            f"{where or 'event'} is a JSON {type(parsed).__name__}, expected a JSON object "
            "with the CloudEvent attributes",
            problems=("not a JSON object",),
            where=where,
        )
    if _deeper_than(parsed, MAX_EVENT_DEPTH):
        raise _too_deep(where)

    problems = _attribute_problems(parsed)
    if problems:
        raise EventFormatError(
            f"{where or 'event'} has a malformed attribute: {'; '.join(problems)}",
            problems=tuple(problems),
            event_id=parsed.get("id") if isinstance(parsed.get("id"), str) else None,
            where=where,
        )
    if any(value is None for value in parsed.values()):
        # In the JSON format an attribute whose value is null is an absent attribute.
        data = json.dumps({name: value for name, value in parsed.items() if value is not None})

    def factory(
        attributes: dict[str, Any], payload: dict[str, Any] | str | bytes | None
    ) -> CloudEvent:
        return new_event(attributes, payload, where=where)

    try:
        event = _FORMAT.read(factory, data)
    except EventFormatError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        # dateutil rejects a malformed 'time'; base64 a malformed 'data_base64'.
        raise EventFormatError(
            f"{where or 'event'} has a malformed attribute ({exc}); expected a "
            "CloudEvents 1.0 JSON event",
            problems=(str(exc),),
            event_id=parsed.get("id") if isinstance(parsed.get("id"), str) else None,
            where=where,
        ) from None
    assert isinstance(event, CloudEvent)
    return event


def _too_deep(where: str | None) -> EventFormatError:
    return EventFormatError(
        f"{where or 'event'} nests arrays and objects more than {MAX_EVENT_DEPTH} levels "
        "deep, deeper than any event a source gives (MySQL keeps JSON within 100): expected "
        "one CloudEvent as a JSON object; record events with `dbus source record`",
        problems=(f"nested over {MAX_EVENT_DEPTH} levels",),
        where=where,
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects more than ``limit`` levels deep; level
    by level, so it never recurses itself."""
    level = [value]
    for _ in range(limit):
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        if not level:
            return False
    return True


_BOM = b"\xef\xbb\xbf"


def _without_bom(data: str | bytes) -> str | bytes:
    """``data`` without a leading UTF-8 byte order mark, which some editors write."""
    if isinstance(data, bytes):
        return data.removeprefix(_BOM)
    return data.removeprefix("\ufeff")


def _spread_over_lines(line: bytes, error: EventFormatError) -> bool:
    """Whether ``line`` of a JSONL file failed because it is a line of pretty-printed
    JSON: a lone opening or closing bracket, or a ``"key": value`` member."""
    if not any(problem.startswith("malformed JSON") for problem in error.problems):
        return False
    text = line.removeprefix(_BOM).strip()
    return text in (b"{", b"[") or text.rstrip(b",") in (b"}", b"]") or text[:1] == b'"'


def write_jsonl(
    path: str | os.PathLike[str],
    events: Iterable[BaseCloudEvent | CaptureItem],
    *,
    append: bool = False,
    type_prefix: str = DEFAULT_TYPE_PREFIX,
) -> int:
    """Write events one per line; return how many were written."""
    count = 0
    with open(path, "ab" if append else "wb") as out:
        for event in events:
            out.write(event_to_json(event, type_prefix=type_prefix) + b"\n")
            count += 1
    return count


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[CloudEvent]:
    """Read events written by ``write_jsonl``, lazily, in file order.

    A bad line raises ``EventFormatError`` naming the file and line number.
    """
    with open(path, "rb") as lines:
        # A line is read only up to an event's limit (and the line break): one over it
        # is refused by event_from_json, not read on.
        limit = MAX_EVENT_BYTES + 2
        for number, line in enumerate(iter(lambda: lines.readline(limit), b""), start=1):
            if not line.strip():
                continue
            where = f"{os.fspath(path)}:{number}"
            try:
                yield event_from_json(line.rstrip(b"\r\n"), where=where)
            except EventFormatError as exc:
                if _spread_over_lines(line, exc):
                    raise EventFormatError(
                        f"{where} holds part of a JSON value spread over several lines "
                        "(pretty-printed?): JSONL needs each CloudEvent on one line; rewrite "
                        f"the file with `jq -c . {os.fspath(path)}`",
                        problems=exc.problems,
                        where=where,
                    ) from None
                raise
