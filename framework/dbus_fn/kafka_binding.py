"""CloudEvents on Kafka: the CloudEvents Kafka protocol binding.

- Binary mode (default): attributes travel as ``ce_<name>`` headers (UTF-8),
  ``datacontenttype`` as ``content-type``, the JSON ``data`` as the value.
- Structured mode: the whole JSON event is the value, with ``content-type:
  application/cloudevents+json``.

In both modes the message key is the event's ``partitionkey`` (the primary key
text), so all changes of one row land in one partition, in order. A row of a
table without a primary key has ``<database>.<table>`` there, so that table's
changes keep their order in one partition. Events without a partition key
(schema changes, commits) get a ``None`` key.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.bindings import kafka
from cloudevents.core.formats.json import JSONFormat

from dbus_fn.cloudevent import (
    BINLOG_FILE,
    BINLOG_POS,
    DATA_CONTENT_TYPE,
    DBUS_SOURCE,
    DEFAULT_TYPE_PREFIX,
    GTID,
    PARTITION_KEY,
    ROW_INDEX,
    ROW_TYPES,
    SCHEMA_VERSION,
    SERVER_ID,
    TRANSACTION_ID,
    CloudEvent,
    event_id_prefix,
    event_parts,
    item_from_cloudevent,
    key_json,
    new_event,
    snapshot_id_suffix,
    source_path,
    time_text,
    to_cloudevent,
    utc_time,
)
from dbus_fn.column_types import parse_column_type
from dbus_fn.columns import to_json_value
from dbus_fn.errors import ColumnValueError, EventFormatError, UnsupportedColumnTypeError
from dbus_fn.events import CaptureItem, Operation, RowChange, SchemaChange, TransactionCommit
from dbus_fn.row_json import row_json_encoder

__all__ = ["KafkaMessage", "change_from_kafka_message", "from_kafka_message", "to_kafka_message"]

_FORMAT = JSONFormat()
_CE_PREFIX = "ce_"
_CONTENT_TYPE = "content-type"
_JSON_CONTENT_TYPE = DATA_CONTENT_TYPE.encode()


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
    if type(item) is RowChange:
        message = _ROW_MESSAGES.encode(item, type_prefix)
        if message is not None:
            return message
    attrs, data = event_parts(item, type_prefix=type_prefix)
    headers: list[tuple[str, bytes]] = []
    for name, value in attrs.items():
        if value is None:
            continue
        if name == "datacontenttype":
            headers.append((_CONTENT_TYPE, value.encode("utf-8")))
        elif isinstance(value, datetime):
            headers.append((_CE_PREFIX + name, time_text(value).encode("utf-8")))
        else:
            headers.append((_CE_PREFIX + name, str(value).encode("utf-8")))
    key = attrs.get(PARTITION_KEY)
    return KafkaMessage(
        key=None if key is None else key.encode("utf-8"),
        value=json.dumps(data).encode("utf-8"),
        headers=headers,
    )


def _header(name: str, value: str) -> tuple[str, bytes]:
    return (_CE_PREFIX + name, value.encode("utf-8"))


class _RowMessages:
    """The binary-mode messages of row changes, with what rows share encoded once.

    Rows of one table shape share their column codecs and the ``key`` and
    ``columns`` part of the data; rows of one transaction share most headers.
    Only the images, the id, the position and the key are encoded per row. The
    result is byte-equal to ``event_parts`` written out by ``_binary_message``
    (tests/framework/test_kafka_binding.py); a row whose values do not fit their
    declared types, or that lacks a key column, returns ``None`` and takes that
    general path, which infers types and names problems.
    """

    _LIMIT = 512

    def __init__(self) -> None:
        self._shapes: dict[tuple[Any, ...], tuple[Callable[..., Any], str, list[Any]]] = {}
        self._transactions: dict[tuple[Any, ...], tuple[list[Any], list[Any], str]] = {}
        self._files: dict[tuple[str, str, str], tuple[list[Any], str]] = {}
        self._last_time: tuple[datetime, tuple[str, bytes]] | None = None

    def _shape(self, change: RowChange, prefix: str) -> tuple[Callable[..., Any], str, list[Any]]:
        types = change.column_types
        key = (
            prefix, change.source, change.database, change.table, change.op,
            change.primary_key, change.schema_version, tuple(types.items()),
        )  # fmt: skip
        found = self._shapes.get(key)
        if found is None:
            if len(self._shapes) >= self._LIMIT:
                self._shapes.clear()
            tail = ", " + json.dumps({"key": list(change.primary_key), "columns": dict(types)})[1:]
            fixed = [
                _header("type", f"{prefix}.{ROW_TYPES[change.op]}"),
                _header(SCHEMA_VERSION, str(change.schema_version)),
                _header("source", source_path(change.source, change.database, change.table)),
            ]
            found = (row_json_encoder(types), tail, fixed)
            self._shapes[key] = found
        return found

    def _transaction(self, change: RowChange) -> tuple[list[Any], list[Any], str]:
        position = change.position
        key = (
            change.source, change.server_id, position.file, position.gtid,
            change.commit_time, change.transaction_id,
        )  # fmt: skip
        found = self._transactions.get(key)
        if found is None:
            if len(self._transactions) >= self._LIMIT:
                self._transactions.clear()
            # One-row transactions miss every time: what a whole binlog file (and,
            # at thousands of commits a second, a whole second) shares is kept apart.
            shared, id_prefix = self._file(change.source, change.server_id, position.file)
            after_id = [self._time(change.commit_time), *shared]
            after_pos = []
            if position.gtid:
                after_pos.append(_header(GTID, position.gtid))
            if change.transaction_id:
                after_pos.append(_header(TRANSACTION_ID, change.transaction_id))
            found = (after_id, after_pos, id_prefix)
            self._transactions[key] = found
        return found

    def _file(self, source: str, server_id: str, file: str) -> tuple[list[Any], str]:
        key = (source, server_id, file)
        found = self._files.get(key)
        if found is None:
            if len(self._files) >= self._LIMIT:
                self._files.clear()
            shared = [
                (_CONTENT_TYPE, DATA_CONTENT_TYPE.encode()),
                _header(DBUS_SOURCE, source),
                _header(SERVER_ID, server_id),
                _header(BINLOG_FILE, file),
            ]
            found = self._files[key] = (shared, event_id_prefix(server_id, file))
        return found

    def _time(self, commit_time: datetime) -> tuple[str, bytes]:
        last = self._last_time
        if last is None or last[0] != commit_time or last[0].tzinfo is not commit_time.tzinfo:
            text = time_text(utc_time(commit_time))
            last = self._last_time = (commit_time, _header("time", text))
        return last[1]

    def encode(self, change: RowChange, prefix: str) -> KafkaMessage | None:
        encode, tail, fixed = self._shape(change, prefix)
        try:
            before = "null" if change.before is None else encode(change.before)
            after = "null" if change.after is None else encode(change.after)
        except (ColumnValueError, UnsupportedColumnTypeError):
            return None
        image = change.after if change.after is not None else change.before
        assert image is not None, "a row change has at least one image"
        after_id, after_pos, id_prefix = self._transaction(change)
        pos = str(change.position.pos)
        subject = None
        if change.primary_key:
            try:
                values = _key_values(image, change.primary_key, change.column_types)
            except (KeyError, ColumnValueError, UnsupportedColumnTypeError):
                return None
            subject = key_json(values).encode("utf-8")
        if change.op is Operation.SNAPSHOT:
            if subject is None:
                return None  # its id names the row by its digest: the general path
            row_id = snapshot_id_suffix(subject.decode("utf-8"))
        else:
            row_id = str(change.row_index)
        headers = [
            _SPEC_VERSION,
            _header("id", f"{id_prefix}{pos}:{row_id}"),
            fixed[2],
            fixed[0],
            *after_id,
            _header(BINLOG_POS, pos),
            *after_pos,
            _header(ROW_INDEX, str(change.row_index)),
            fixed[1],
        ]
        if subject is not None:
            key = subject
            headers.append((_CE_PREFIX + "subject", subject))
        else:
            key = f"{change.database}.{change.table}".encode()
        headers.append((_CE_PREFIX + PARTITION_KEY, key))
        value = f'{{"before": {before}, "after": {after}{tail}'
        return KafkaMessage(key=key, value=value.encode("utf-8"), headers=headers)


def _key_values(
    image: Mapping[str, Any], primary_key: Sequence[str], column_types: Mapping[str, str]
) -> list[Any]:
    """The JSON values of a row's key columns (an image that was just written whole,
    so each fits its type)."""
    if len(primary_key) == 1:
        value = image[primary_key[0]]
        if type(value) is int and _integer_column(column_types[primary_key[0]]):
            return [value]  # the usual key: an int in an integer column is its JSON value
    return [to_json_value(image[name], column_types[name], column=name) for name in primary_key]


@functools.lru_cache(maxsize=256)
def _integer_column(column_type: str) -> bool:
    try:
        return parse_column_type(column_type).family == "integer"
    except UnsupportedColumnTypeError:
        return False


_SPEC_VERSION = _header("specversion", "1.0")
_ROW_MESSAGES = _RowMessages()


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
    if (
        binary
        and isinstance(data, str)
        and _FORMAT.JSON_CONTENT_TYPE_PATTERN.match(
            event.get_datacontenttype() or _FORMAT.DEFAULT_CONTENT_TYPE
        )
    ):
        # The binding falls back to text when JSON does not parse; say so instead.
        try:
            json.loads(value)
        except ValueError as exc:
            raise _error([f"value is not the JSON its content-type says: {exc}"], where) from None
    assert isinstance(event, CloudEvent)
    return event


class _BinaryEvent:
    """A binary-mode message read as the event ``item_from_cloudevent`` reads: its
    ``ce_`` headers as attributes, its JSON value as data, nothing else built."""

    __slots__ = ("_attributes", "_data")

    def __init__(self, attributes: dict[str, str], data: Any) -> None:
        self._attributes, self._data = attributes, data

    def get_extension(self, name: str) -> str | None:
        return self._attributes.get(name)

    def get_data(self) -> Any:
        return self._data

    def get_source(self) -> str:
        return self._attributes.get("source", "")

    def get_id(self) -> str | None:
        return self._attributes.get("id")

    def get_type(self) -> str:
        return self._attributes.get("type", "")

    def get_specversion(self) -> str | None:
        return self._attributes.get("specversion")

    def get_time(self) -> datetime | None:
        text = self._attributes.get("time")
        try:
            return None if text is None else datetime.fromisoformat(text)
        except ValueError:
            return None


def change_from_kafka_message(
    key: bytes | str | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | str | None]] | None,
    *,
    source: str | None = None,
) -> CaptureItem:
    """The capture item of a message dbus wrote (binary mode, JSON data), read without
    building a CloudEvent: what ``item_from_cloudevent(from_kafka_message(...))``
    gives, several times faster. ``source`` renames the item's source (a runtime
    reading another's topics names them after its input). A message of any other
    shape, or with any problem, goes the full way, whose error names every problem."""
    attributes: dict[str, str] = {}
    content_type = None
    try:
        for name, raw in headers or ():
            if name.startswith(_CE_PREFIX):
                attribute = name[3:]
                if type(raw) is not bytes or attribute in attributes:
                    raise ValueError(name)
                attributes[attribute] = raw.decode("utf-8")
            elif name == _CONTENT_TYPE:
                content_type = raw
            elif name[:3].lower() == _CE_PREFIX or name.lower() == _CONTENT_TYPE:
                raise ValueError(name)  # the full way reads any case
        data = json.loads(value) if value is not None else None
        fast = (
            content_type == _JSON_CONTENT_TYPE and isinstance(data, dict)
            and attributes.get("specversion") == "1.0"
            and all(name in attributes for name in ("id", "source", "type", "time"))
        )  # fmt: skip
    except (UnicodeDecodeError, ValueError):
        fast = False
    if not fast:
        item = item_from_cloudevent(from_kafka_message(key, value, headers))
        if source is None or item.source == source:
            return item
        return dataclasses.replace(item, source=source)
    if source is not None and DBUS_SOURCE in attributes:
        parts = attributes["source"].split("/")
        if parts[:2] == ["", "mysql"] and len(parts) > 2:
            attributes["source"] = "/".join([source_path(source), *parts[3:]])
            attributes[DBUS_SOURCE] = source
    return item_from_cloudevent(_BinaryEvent(attributes, data))  # type: ignore[arg-type]


def _error(problems: list[str], where: str) -> EventFormatError:
    return EventFormatError(
        f"{where} is not a CloudEvent: {'; '.join(problems)}; expected a message written "
        "by dbus_fn.to_kafka_message (CloudEvents Kafka binding, binary or structured mode)",
        problems=tuple(problems),
        where=where,
    )
