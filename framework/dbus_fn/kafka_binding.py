"""CloudEvents on Kafka: the CloudEvents Kafka protocol binding.

- Binary mode (default): attributes travel as ``ce_<name>`` headers (UTF-8),
  ``datacontenttype`` as ``content-type``, the JSON ``data`` as the value.
- Structured mode: the whole JSON event is the value, with ``content-type:
  application/cloudevents+json``.

In both modes the message key is the event's ``partitionkey`` (the primary key
text), so all changes of one row land in one partition, in order. Events
without a key (schema changes, commits, tables without a primary key) get a
``None`` key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings import kafka
from cloudevents.core.formats.json import JSONFormat

from dbus_fn.cloudevent import (
    DEFAULT_TYPE_PREFIX,
    PARTITION_KEY,
    CloudEvent,
    event_parts,
    new_event,
    to_cloudevent,
)
from dbus_fn.errors import EventFormatError
from dbus_fn.events import CaptureItem, RowChange, SchemaChange, TransactionCommit

__all__ = ["KafkaMessage", "from_kafka_message", "to_kafka_message"]

_FORMAT = JSONFormat()
_CE_PREFIX = "ce_"
_CONTENT_TYPE = "content-type"


@dataclass(frozen=True, slots=True)
class KafkaMessage:
    """A Kafka record's key, value and headers, ready for any Kafka client.

    ``headers`` is a list of ``(name, value)`` pairs, the form confluent-kafka's
    ``produce(headers=...)`` takes and ``Message.headers()`` returns.
    """

    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def to_kafka_message(
    event_or_change: BaseCloudEvent | CaptureItem,
    *,
    mode: Literal["binary", "structured"] = "binary",
    type_prefix: str = DEFAULT_TYPE_PREFIX,
) -> KafkaMessage:
    """The Kafka message of an event (a capture item is converted first).

    A capture item in binary mode takes the fast path: its attributes and data go
    straight into headers and value, skipping the CloudEvent object, with the
    same bytes the cloudevents binding writes (tests/framework/test_kafka_binding.py
    holds the two paths equal). It is the runtime's per-row hot path.
    """
    if isinstance(event_or_change, RowChange | SchemaChange | TransactionCommit):
        if mode == "binary":
            return _binary_message(event_or_change, type_prefix)
        event: BaseCloudEvent = to_cloudevent(event_or_change, type_prefix=type_prefix)
    else:
        event = event_or_change
    if mode == "binary":
        message = kafka.to_binary(event, _FORMAT)
    elif mode == "structured":
        message = kafka.to_structured(event, _FORMAT)
    else:
        raise ValueError(f"mode must be 'binary' or 'structured', got {mode!r}")
    key = message.key.encode("utf-8") if isinstance(message.key, str) else message.key
    return KafkaMessage(key=key, value=message.value, headers=list(message.headers.items()))


def _binary_message(item: CaptureItem, type_prefix: str) -> KafkaMessage:
    attrs, data = event_parts(item, type_prefix=type_prefix)
    headers: list[tuple[str, bytes]] = []
    for name, value in attrs.items():
        if value is None:
            continue
        if name == "datacontenttype":
            headers.append((_CONTENT_TYPE, value.encode("utf-8")))
        elif isinstance(value, datetime):
            text = value.isoformat()
            if text.endswith("+00:00"):
                text = text[:-6] + "Z"
            headers.append((_CE_PREFIX + name, text.encode("utf-8")))
        else:
            headers.append((_CE_PREFIX + name, str(value).encode("utf-8")))
    key = attrs.get(PARTITION_KEY)
    return KafkaMessage(
        key=None if key is None else key.encode("utf-8"),
        value=json.dumps(data).encode("utf-8"),
        headers=headers,
    )


def _header_map(
    headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
    problems: list[str],
) -> dict[str, bytes]:
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    found: dict[str, bytes] = {}
    for name, value in pairs:
        lowered = name.lower()
        if not (lowered.startswith(_CE_PREFIX) or lowered == _CONTENT_TYPE):
            continue  # other applications' headers are none of our business
        if lowered in found:
            problems.append(f"header {name!r} appears more than once")
        if value is None:
            problems.append(f"header {name!r} has no value")
            continue
        found[lowered] = value.encode("utf-8") if isinstance(value, str) else value
    return found


def from_kafka_message(
    key: bytes | str | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None,
) -> CloudEvent:
    """The CloudEvent of a Kafka message in binary or structured mode.

    The mode is told by the headers: ``ce_`` headers mean binary, a
    ``content-type`` of ``application/cloudevents+json`` structured. Raises
    ``EventFormatError`` with every problem found.
    """
    where = "Kafka message"
    problems: list[str] = []
    found = _header_map(headers, problems)
    if value is None:
        problems.append("the message has no value (a tombstone is not an event)")
    binary = any(name.startswith(_CE_PREFIX) for name in found)
    content_type = found.get(_CONTENT_TYPE, b"").decode("utf-8", "replace")
    if not binary and not content_type.startswith(_FORMAT.CONTENT_TYPE):
        problems.append(
            "neither ce_ headers (binary mode) nor content-type "
            f"{_FORMAT.CONTENT_TYPE!r} (structured mode); got content-type {content_type!r}"
        )
    if problems:
        raise _error(problems, where)
    assert value is not None

    def factory(
        attributes: dict[str, Any], data: dict[str, Any] | str | bytes | None
    ) -> CloudEvent:
        return new_event(attributes, data, where=where)

    message = kafka.KafkaMessage(headers=found, key=key, value=value)
    try:
        if binary:
            event = kafka.from_binary(message, _FORMAT, factory)
        else:
            event = kafka.from_structured(message, _FORMAT, factory)
    except EventFormatError:
        raise
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:
        # Malformed UTF-8, JSON or time values surface here from the binding; a
        # structured value that is JSON but not an object fails on attribute access.
        raise _error([str(exc)], where) from None
    data = event.get_data()
    if binary and isinstance(data, str) and _FORMAT.JSON_CONTENT_TYPE_PATTERN.match(
        event.get_datacontenttype() or _FORMAT.DEFAULT_CONTENT_TYPE
    ):
        # The binding falls back to text when JSON does not parse; say so instead.
        try:
            json.loads(value)
        except ValueError as exc:
            raise _error([f"value is not the JSON its content-type says: {exc}"], where) from None
    assert isinstance(event, CloudEvent)
    return event


def _error(problems: list[str], where: str) -> EventFormatError:
    return EventFormatError(
        f"{where} is not a CloudEvent: {'; '.join(problems)}; expected a message written "
        "by dbus_fn.to_kafka_message (CloudEvents Kafka binding, binary or structured mode)",
        problems=tuple(problems),
        where=where,
    )
