"""CloudEvents in the JSON event format, one event or one per line (JSONL).

JSONL files hold what ``dbus source record`` captured and what the local
emulator replays: one structured-mode JSON event per line, UTF-8, blank lines
ignored. Writing accepts capture items too and converts them on the way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.formats.json import JSONFormat

from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX, CloudEvent, new_event, to_cloudevent
from dbus_fn.errors import EventFormatError
from dbus_fn.events import CaptureItem, RowChange, SchemaChange, TransactionCommit

__all__ = ["event_from_json", "event_to_json", "read_jsonl", "write_jsonl"]

_FORMAT = JSONFormat()

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
    try:
        parsed: Any = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
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
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield event_from_json(line, where=f"{os.fspath(path)}:{number}")
