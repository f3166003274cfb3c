"""Dead letters: the CloudEvent that records a change a function could not process.

A dead letter carries everything needed to look at the failure and to replay
the change: the original event in its JSON form, where it was read, which
function failed at which stage, and the error with a short traceback summary.

- ``type``: ``<prefix>.deadletter``; ``source``, ``subject`` and the dbus
  extensions (position, ``partitionkey``...) are the original's, so a dead-letter
  topic keeps per-row order; ``dbusfunction`` and ``dbusstage`` name the failure.
- ``id``: ``<original id>:deadletter:<function>:<stage>``, so a replayed failure
  has the same id.
- ``time``: when the failure was recorded.
- ``data``: ``{"function", "stage", "error": {"type", "message", "traceback",
  "cause"}, "position": {...}, "original": <event JSON object> | null,
  "original_error": <why the change had no event form> | null, "version": <the
  deployment's version> | null}``.

A Kafka message a Kafka source could not read as a change (``input_dead_letter``)
has ``stage`` ``input``, ``function`` the source's URL form ``kafka://<source>/<topic>``,
``position`` ``{"topic", "partition", "offset"}`` and ``original`` null: the
message's key and value go as text in ``data.message`` (``{"key", "value"}``).

Rows a binlog read could not decode (``UndecodedRows``, ``capture_dead_letter``) have
``stage`` ``capture``, ``function`` ``binlog://<source>/<db>.<table>``, ``position``
the rows event's (``row_index``: the first row not decoded) and ``original`` null:
``data.rows`` holds the operation and the event's row images as the binlog wrote
them, in hex (clipped), for a reader of the format to look at.
"""

from __future__ import annotations

import json
import traceback as tb
from datetime import UTC, datetime
from typing import Any, Final

from cloudevents.core.base import BaseCloudEvent

from dbus_fn.cloudevent import (
    BINLOG_FILE,
    BINLOG_POS,
    DBUS_SOURCE,
    DEAD_LETTER,
    DEFAULT_TYPE_PREFIX,
    EXTENSIONS,
    GTID,
    PARTITION_KEY,
    SERVER_ID,
    TRANSACTION_ID,
    CloudEvent,
    event_id,
    event_id_prefix,
    new_event,
    source_path,
    to_cloudevent,
)
from dbus_fn.errors import DbusError, EventFormatError
from dbus_fn.events import (
    CaptureItem,
    RowChange,
    SchemaChange,
    TransactionCommit,
    UndecodedRows,
)
from dbus_fn.json_format import event_from_json, event_to_json

__all__ = [
    "FUNCTION",
    "STAGE",
    "capture_dead_letter",
    "dead_letter_event",
    "input_dead_letter",
    "original_from_dead_letter",
]

FUNCTION: Final = "dbusfunction"
STAGE: Final = "dbusstage"

_MESSAGE_LIMIT = 4000
_FRAME_LIMIT = 20


def _clip(text: str) -> str:
    if len(text) <= _MESSAGE_LIMIT:
        return text
    return text[:_MESSAGE_LIMIT] + f"... ({len(text) - _MESSAGE_LIMIT} more characters)"


def _type_name(error: BaseException) -> str:
    error_class = type(error)
    return error_class.__qualname__ if error_class.__module__ == "builtins" else (
        f"{error_class.__module__}.{error_class.__qualname__}"
    )


def _summary(error: BaseException) -> str:
    """The last frames as ``file:line in function``, innermost last."""
    frames = tb.extract_tb(error.__traceback__)[-_FRAME_LIMIT:]
    return "\n".join(f"{f.filename}:{f.lineno} in {f.name}" for f in frames)


def _error_data(
    error: BaseException | str, error_type: str | None, traceback: str | None
) -> dict[str, Any]:
    if isinstance(error, BaseException):
        cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
        return {
            "type": error_type or _type_name(error),
            "message": _clip(str(error)),
            "traceback": traceback if traceback is not None else _summary(error),
            "cause": None if cause is None else {
                "type": _type_name(cause),
                "message": _clip(str(cause)),
            },
        }
    return {
        "type": error_type or "",
        "message": _clip(error),
        "traceback": traceback or "",
        "cause": None,
    }


def dead_letter_event(
    change: CaptureItem | BaseCloudEvent,
    *,
    function: str,
    error: BaseException | str,
    stage: str,
    error_type: str | None = None,
    traceback: str | None = None,
    type_prefix: str = DEFAULT_TYPE_PREFIX,
    time: datetime | None = None,
    version: str | None = None,
) -> CloudEvent:
    """The dead-letter CloudEvent for ``change`` failing in ``function`` at ``stage``
    (of the deployment's ``version``, when known).

    ``error`` is the exception (its type, message and frames are recorded) or an
    already formatted message; ``error_type`` and ``traceback`` override what is
    taken from the exception. Building a dead letter never fails because of the
    change itself: a change without a valid event form is recorded by position,
    with ``original_error`` saying why.
    """
    original: BaseCloudEvent | None = None
    original_error: str | None = None
    item: CaptureItem | None = None
    if isinstance(change, RowChange | SchemaChange | TransactionCommit):
        item = change
        try:
            original = to_cloudevent(item, type_prefix=type_prefix)
        except DbusError as exc:
            original_error = _clip(f"{_type_name(exc)}: {exc}")
    else:
        original = change
    attrs: dict[str, Any] = {"specversion": "1.0", "type": f"{type_prefix}.{DEAD_LETTER}"}
    if original is not None:
        base_id, source = original.get_id(), original.get_source()
        for name in (*EXTENSIONS, "subject"):
            value = original.get_attributes().get(name)
            if value is not None:
                attrs[name] = value
        body: dict[str, Any] | None = json.loads(event_to_json(original))
    else:
        assert item is not None
        base_id, source, body = event_id(item), f"/mysql/{item.source}", None
    attrs.update(
        id=f"{base_id}:deadletter:{function}:{stage}",
        source=source,
        time=time or datetime.now(UTC),
        datacontenttype="application/json",
        **{FUNCTION: function, STAGE: stage},
    )
    data = {
        "function": function,
        "stage": stage,
        "error": _error_data(error, error_type, traceback),
        "position": _position(original, item),
        "original": body,
        "original_error": original_error,
        "version": version,
    }
    return new_event(attrs, data, where=f"dead letter of {base_id}")


def input_dead_letter(
    source: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: BaseException,
    *,
    type_prefix: str = DEFAULT_TYPE_PREFIX,
) -> CloudEvent:
    """The dead letter of a message of a Kafka source that is not a row-change
    CloudEvent (module docstring): where it is, why, and its bytes as text."""
    function = f"kafka://{source}/{topic}"
    place = f"kafka:{source}:{topic}:{partition}:{offset}"
    attrs: dict[str, Any] = {
        "specversion": "1.0",
        "type": f"{type_prefix}.{DEAD_LETTER}",
        "id": f"{place}:deadletter:input",
        "source": f"/kafka/{source}/{topic}",
        "time": datetime.now(UTC),
        "datacontenttype": "application/json",
        FUNCTION: function,
        STAGE: "input",
    }

    def text(raw: bytes | None) -> str | None:
        return None if raw is None else _clip(raw.decode("utf-8", "replace"))

    data = {
        "function": function,
        "stage": "input",
        "error": _error_data(error, None, ""),
        "position": {"topic": topic, "partition": partition, "offset": offset},
        "original": None,
        "original_error": _clip(str(error)),
        "message": {"key": text(key), "value": text(value)},
        "version": None,
    }
    return new_event(attrs, data, where=f"dead letter of {place}")


def capture_dead_letter(
    rows: UndecodedRows, *, type_prefix: str = DEFAULT_TYPE_PREFIX
) -> CloudEvent:
    """The dead letter of rows a binlog read could not decode (module docstring):
    where they are, why, and their bytes."""
    function = f"binlog://{rows.source}/{rows.qualified_table}"
    position = rows.position
    place = f"{event_id_prefix(rows.server_id, position.file)}{position.pos}:{rows.row_index}"
    attrs: dict[str, Any] = {
        "specversion": "1.0",
        "type": f"{type_prefix}.{DEAD_LETTER}",
        "id": f"{place}:deadletter:capture",
        "source": source_path(rows.source, rows.database, rows.table),
        "time": datetime.now(UTC),
        "datacontenttype": "application/json",
        FUNCTION: function,
        STAGE: "capture",
        DBUS_SOURCE: rows.source,
        SERVER_ID: rows.server_id,
        BINLOG_FILE: position.file,
        BINLOG_POS: str(position.pos),
        PARTITION_KEY: rows.qualified_table,
    }
    if position.gtid:
        attrs[GTID] = position.gtid
    if rows.transaction_id:
        attrs[TRANSACTION_ID] = rows.transaction_id
    data = {
        "function": function,
        "stage": "capture",
        "error": _error_data(rows.error, rows.error_type, ""),
        "position": {
            "server_id": rows.server_id, "file": position.file, "pos": position.pos,
            "gtid": position.gtid, "row_index": rows.row_index,
        },
        "original": None,
        "original_error": _clip(rows.reason),
        "rows": {"op": rows.op.value, "images": _clip(rows.images.hex())},
        "version": None,
    }  # fmt: skip
    return new_event(attrs, data, where=f"dead letter of {place}")


def _position(original: BaseCloudEvent | None, item: CaptureItem | None) -> dict[str, Any]:
    if item is not None:
        return {
            "server_id": item.server_id,
            "file": item.position.file,
            "pos": item.position.pos,
            "gtid": item.position.gtid,
            "row_index": item.row_index if isinstance(item, RowChange) else None,
        }
    assert original is not None
    return {
        "server_id": original.get_extension("serverid"),
        "file": original.get_extension("binlogfile"),
        "pos": _number(original.get_extension("binlogpos")),
        "gtid": original.get_extension("gtid"),
        "row_index": _number(original.get_extension("rowindex")),
    }


def _number(value: Any) -> Any:
    """Decimal extension strings as ints; anything else as it came."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


def original_from_dead_letter(event: BaseCloudEvent) -> CloudEvent:
    """The original CloudEvent a dead letter carries, for inspection or replay."""
    data = event.get_data()
    body = data.get("original") if isinstance(data, dict) else None
    if not event.get_type().endswith("." + DEAD_LETTER) or not isinstance(body, dict):
        reason = (
            data.get("original_error") if isinstance(data, dict) else None
        ) or "no 'original' object in data"
        raise EventFormatError(
            f"event {event.get_id()!r} carries no original event ({reason}); expected a "
            f"dead letter of type '<prefix>.{DEAD_LETTER}' made by dead_letter_event",
            problems=(str(reason),),
            event_id=event.get_id(),
        )
    return event_from_json(json.dumps(body), where=f"dead letter {event.get_id()!r}")
