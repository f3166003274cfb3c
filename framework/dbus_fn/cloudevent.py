"""Capture items as CloudEvents 1.0, and back.

Every ``RowChange``, ``SchemaChange`` and ``TransactionCommit`` has one CloudEvent
form (``docs/events.md`` is the full reference):

- ``id``: ``<server id>:<binlog file>:<pos>:<row index>`` for rows,
  ``...:<pos>:schema`` and ``...:<pos>:commit`` for the markers. It depends on the
  position only, so a replayed change has the same id.
- ``source``: ``/mysql/<source>/<database>/<table>`` (segments percent-encoded);
  a schema change without a table and a commit use the shorter prefixes.
- ``type``: ``<prefix>.row.inserted|updated|deleted``, ``<prefix>.schema.changed``,
  ``<prefix>.transaction.committed``.
- ``subject`` and the ``partitionkey`` extension: the primary key as a compact
  JSON array of the key columns' JSON values, e.g. ``[42]`` or ``[7,"2024-01-01"]``.
  A row of a table without a primary key has no ``subject``, and its
  ``partitionkey`` is ``<database>.<table>``.
- ``time``: the commit time; ``datacontenttype``: ``application/json``.
- ``data`` of a row event: ``{"before", "after", "key", "columns"}``; ``columns``
  maps every column to its MySQL type, which makes the event lossless.
- extensions, all strings: ``binlogfile``, ``binlogpos``, ``gtid``,
  ``transactionid``, ``partitionkey``, ``schemaversion``, ``serverid``,
  ``rowindex``, ``dbussource``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import quote, unquote

from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.exceptions import CloudEventValidationError
from cloudevents.core.v1.event import CloudEvent

from dbus_fn.columns import (
    from_json_value,
    row_from_json,
    to_json_value,
)
from dbus_fn.errors import ColumnValueError, EventFormatError, UnsupportedColumnTypeError
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    RowChange,
    SchemaChange,
    TransactionCommit,
)
from dbus_fn.row_images import (
    encoded_images,
    image_digest,
    image_digests,
    row_digest,
    row_json,
)

__all__ = [
    "DATA_CONTENT_TYPE",
    "DEFAULT_TYPE_PREFIX",
    "EXTENSIONS",
    "CloudEvent",
    "event_id",
    "event_id_prefix",
    "event_parts",
    "from_cloudevent",
    "image_digest",
    "image_digests",
    "item_from_cloudevent",
    "key_json",
    "new_event",
    "partition_key",
    "primary_key_text",
    "row_digest",
    "row_json",
    "time_text",
    "to_cloudevent",
]

DEFAULT_TYPE_PREFIX: Final = "io.dbus"
DATA_CONTENT_TYPE: Final = "application/json"

BINLOG_FILE: Final = "binlogfile"
BINLOG_POS: Final = "binlogpos"
GTID: Final = "gtid"
TRANSACTION_ID: Final = "transactionid"
PARTITION_KEY: Final = "partitionkey"
SCHEMA_VERSION: Final = "schemaversion"
SERVER_ID: Final = "serverid"
ROW_INDEX: Final = "rowindex"
DBUS_SOURCE: Final = "dbussource"
EXTENSIONS: Final = (
    BINLOG_FILE,
    BINLOG_POS,
    GTID,
    TRANSACTION_ID,
    PARTITION_KEY,
    SCHEMA_VERSION,
    SERVER_ID,
    ROW_INDEX,
    DBUS_SOURCE,
)

ROW_TYPES: Final = {
    Operation.INSERT: "row.inserted",
    Operation.UPDATE: "row.updated",
    Operation.DELETE: "row.deleted",
    Operation.SNAPSHOT: "row.snapshot",
}
SCHEMA_CHANGED: Final = "schema.changed"
TRANSACTION_COMMITTED: Final = "transaction.committed"
DEAD_LETTER: Final = "deadletter"

_REQUIRED = ("id", "source", "type", "specversion")


def new_event(
    attributes: Mapping[str, Any],
    data: dict[str, Any] | str | bytes | None = None,
    *,
    where: str | None = None,
) -> CloudEvent:
    """A validated v1.0 CloudEvent; every problem is reported in one error.

    Unlike the ``CloudEvent`` constructor this never invents ``id`` or
    ``specversion`` for an incoming event that lacks them, and never changes the
    caller's dict.
    """
    attrs = dict(attributes)
    problems = [f"missing required attribute {name!r}" for name in _REQUIRED if name not in attrs]
    if not problems:
        try:
            return CloudEvent(attrs, data)
        except CloudEventValidationError as exc:
            problems = [f"{name}: {err}" for name, errs in exc.errors.items() for err in errs]
    event_id = attrs.get("id") if isinstance(attrs.get("id"), str) else None
    raise _format_error(problems, event_id=event_id, where=where)


def _format_error(
    problems: list[str], *, event_id: str | None = None, where: str | None = None
) -> EventFormatError:
    place = f" in {where}" if where else ""
    name = f"event {event_id!r}" if event_id else "an event"
    return EventFormatError(
        f"{name}{place} is not a valid dbus CloudEvent: {'; '.join(problems)}; "
        "expected a CloudEvents 1.0 event made by dbus_fn.to_cloudevent (see docs/events.md)",
        problems=tuple(problems),
        event_id=event_id,
        where=where,
    )


def _segment(text: str) -> str:
    return quote(text, safe="")


def source_path(*segments: str) -> str:
    """An event ``source``: ``/mysql/<source>/<db>/<table>``, each segment escaped."""
    return "/mysql/" + "/".join(_segment(segment) for segment in segments)


def event_id_prefix(server_id: str, binlog_file: str) -> str:
    """What the ids of every item of one binlog file of one server start with."""
    return f"{server_id}:{binlog_file}:"


def snapshot_id_suffix(key: str | None) -> str:
    """The end of a snapshot row's id, after its position: the row's key text."""
    return f"snapshot:{key}"


def event_id(item: CaptureItem) -> str:
    """The deterministic CloudEvent id of a capture item."""
    position = item.position
    base = f"{event_id_prefix(item.server_id, position.file)}{position.pos}"
    if isinstance(item, RowChange):
        if item.op is Operation.SNAPSHOT:
            # The rows of one snapshot share its position: the key tells them apart.
            key = primary_key_text(item) if item.primary_key else row_digest(item)
            return f"{base}:{snapshot_id_suffix(key)}"
        return f"{base}:{item.row_index}"
    if isinstance(item, SchemaChange):
        return f"{base}:schema"
    return f"{base}:commit"


def _key_text(change: RowChange, types: Mapping[str, str]) -> str | None:
    if not change.primary_key:
        return None
    row = change.row
    missing = [name for name in change.primary_key if name not in row]
    if missing:
        raise _format_error(
            [f"primary key column(s) {', '.join(map(repr, missing))} not in the row"],
            event_id=event_id(change),
        )
    values = [to_json_value(row[name], types[name], column=name) for name in change.primary_key]
    return key_json(values)


_KEY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def key_json(values: list[Any]) -> str:
    """The text of a primary key from its columns' JSON values (see ``primary_key_text``)."""
    if len(values) == 1 and type(values[0]) is int:
        return f"[{values[0]}]"  # the usual key, written as the encoder writes it
    return _KEY_JSON.encode(values)


def primary_key_text(change: RowChange) -> str | None:
    """The stable string form of the row's primary key, or ``None`` without one.

    A compact JSON array of the key columns' JSON values in key order (``[42]``,
    ``["a@b.c"]``, ``[7,"2024-01-01"]``): never empty, unambiguous for composite
    keys, equal for equal keys. It is the event's ``subject``, ``partitionkey`` and
    Kafka message key.
    """
    return _key_text(change, encoded_images(change)[0])


def partition_key(change: RowChange) -> str:
    """The ``partitionkey`` (and Kafka message key) of a row change: its primary key
    text, or ``<database>.<table>`` for a table without a primary key, so one such
    table's changes stay in order in one partition and the key stays small."""
    return primary_key_text(change) or change.qualified_table


def utc_time(moment: datetime) -> datetime:
    """A commit time as an aware UTC datetime (binlog timestamps are UTC seconds)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def time_text(moment: datetime) -> str:
    """RFC 3339 text of a time, UTC written as ``Z``."""
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _base_attributes(
    item: CaptureItem, event_source: str, suffix: str, prefix: str
) -> dict[str, Any]:
    position = item.position
    attrs: dict[str, Any] = {
        "specversion": "1.0",
        "id": event_id(item),
        "source": event_source,
        "type": f"{prefix}.{suffix}",
        "time": utc_time(item.commit_time),
        "datacontenttype": DATA_CONTENT_TYPE,
        DBUS_SOURCE: item.source,
        SERVER_ID: item.server_id,
        BINLOG_FILE: position.file,
        BINLOG_POS: str(position.pos),
    }
    if position.gtid:
        attrs[GTID] = position.gtid
    transaction_id = getattr(item, "transaction_id", None)
    if transaction_id:
        attrs[TRANSACTION_ID] = transaction_id
    return attrs


def to_cloudevent(item: CaptureItem, *, type_prefix: str = DEFAULT_TYPE_PREFIX) -> CloudEvent:
    """The CloudEvent of a row change, schema change or transaction commit.

    A value that does not fit its declared type (after a projection) is written
    with a type inferred from it. Raises ``UnsupportedColumnTypeError`` for an
    unknown declared type, ``ColumnValueError`` for a value no column type holds
    (or images that disagree), ``EventFormatError`` when the result would not be
    a valid CloudEvent.
    """
    attrs, data = event_parts(item, type_prefix=type_prefix)
    return new_event(attrs, data, where=f"{type(item).__name__} at {item.position}")


def event_parts(
    item: CaptureItem, *, type_prefix: str = DEFAULT_TYPE_PREFIX
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes and the JSON data of an item's CloudEvent, not yet validated.

    ``to_cloudevent`` validates them into an event; the Kafka binding's fast path
    writes them straight to a message (see ``dbus_fn.kafka_binding``).
    """
    if isinstance(item, RowChange):
        types, before, after = encoded_images(item)
        attrs = _base_attributes(
            item,
            source_path(item.source, item.database, item.table),
            ROW_TYPES[item.op],
            type_prefix,
        )
        attrs[ROW_INDEX] = str(item.row_index)
        attrs[SCHEMA_VERSION] = str(item.schema_version)
        key = _key_text(item, types)
        if key is not None:
            attrs["subject"] = key
        attrs[PARTITION_KEY] = item.qualified_table if key is None else key
        data: dict[str, Any] = {
            "before": before,
            "after": after,
            "key": list(item.primary_key),
            "columns": types,
        }
    elif isinstance(item, SchemaChange):
        segments = [item.source, item.database] + ([item.table] if item.table else [])
        attrs = _base_attributes(item, source_path(*segments), SCHEMA_CHANGED, type_prefix)
        data = {"database": item.database, "table": item.table, "statement": item.statement}
    elif isinstance(item, TransactionCommit):
        attrs = _base_attributes(item, source_path(item.source), TRANSACTION_COMMITTED, type_prefix)
        data = {"rows": item.rows}
    else:
        raise TypeError(
            f"to_cloudevent expected a RowChange, SchemaChange or TransactionCommit, "
            f"got a {type(item).__name__}"
        )
    return attrs, data


# Reading ------------------------------------------------------------------------


class _Reader:
    """Collects every problem of one event while its parts are read."""

    def __init__(self, event: BaseCloudEvent) -> None:
        self.event = event
        self.problems: list[str] = []

    def text(self, name: str, *, required: bool = True) -> str | None:
        value = self.event.get_extension(name)
        if value is None:
            if required:
                self.problems.append(f"missing extension {name!r}")
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            self.problems.append(f"extension {name!r} must be a string")
            return None
        return value

    def number(self, name: str, *, default: int | None = None) -> int:
        value = self.text(name, required=default is None)
        if value is None:
            return default or 0
        if not (value.isascii() and value.isdigit()):
            self.problems.append(f"extension {name!r} must be a decimal number, got {value!r}")
            return 0
        return int(value)

    def data(self, *fields: str) -> dict[str, Any]:
        data = self.event.get_data()
        if not isinstance(data, dict):
            got = "nothing" if data is None else f"a {type(data).__name__}"
            self.problems.append(f"data must be a JSON object, got {got}")
            return {}
        for name in fields:
            if name not in data:
                self.problems.append(f"data has no {name!r} member")
        return data

    def source_segments(self, minimum: int, maximum: int) -> list[str]:
        source = self.event.get_source()
        parts = source.split("/")
        if parts[:2] != ["", "mysql"] or not minimum <= len(parts) - 2 <= maximum:
            self.problems.append(
                f"source must be /mysql/<source>{'/<database>/<table>' if minimum > 1 else ''}, "
                f"got {source!r}"
            )
            return [""] * maximum
        return [unquote(part) for part in parts[2:]]

    def time(self) -> datetime:
        moment = self.event.get_time()
        if not isinstance(moment, datetime):
            self.problems.append("missing attribute 'time' (the commit time)")
            return datetime.fromtimestamp(0, UTC)
        if moment.utcoffset() == timedelta(0) and moment.tzinfo is not UTC:
            moment = moment.replace(tzinfo=UTC)  # parsers return their own UTC objects
        return moment

    def position(self) -> BinlogPosition:
        return BinlogPosition(
            file=self.text(BINLOG_FILE) or "",
            pos=self.number(BINLOG_POS),
            gtid=self.text(GTID, required=False),
        )

    def fail(self) -> None:
        if self.problems:
            raise _format_error(self.problems, event_id=self.event.get_id())


_TYPE_SUFFIXES: Final = (*ROW_TYPES.values(), SCHEMA_CHANGED, TRANSACTION_COMMITTED)


def _type_suffix(event_type: str, type_prefix: str | None) -> str | None:
    for suffix in _TYPE_SUFFIXES:
        if event_type.endswith("." + suffix):
            prefix = event_type[: -len(suffix) - 1]
            if type_prefix is None or prefix == type_prefix:
                return suffix
    return None


def item_from_cloudevent(event: BaseCloudEvent, *, type_prefix: str | None = None) -> CaptureItem:
    """The capture item a dbus CloudEvent was made from.

    ``type_prefix`` (``None``: any) is the prefix the event type must carry. Raises
    ``EventFormatError`` listing every problem found.
    """
    reader = _Reader(event)
    suffix = _type_suffix(event.get_type(), type_prefix)
    if suffix is None:
        expected = ", ".join(f"{type_prefix or '<prefix>'}.{k}" for k in _TYPE_SUFFIXES)
        reader.problems.append(f"type must be one of {expected}; got {event.get_type()!r}")
        reader.fail()
    if event.get_specversion() != "1.0":
        reader.problems.append(f"specversion must be '1.0', got {event.get_specversion()!r}")
    if suffix == SCHEMA_CHANGED:
        return _schema_change(reader)
    if suffix == TRANSACTION_COMMITTED:
        return _transaction_commit(reader)
    return _row_change(reader, suffix or "")


def from_cloudevent(event: BaseCloudEvent, *, type_prefix: str | None = None) -> RowChange:
    """The ``RowChange`` of a row event; see ``item_from_cloudevent`` for the markers."""
    item = item_from_cloudevent(event, type_prefix=type_prefix)
    if not isinstance(item, RowChange):
        raise _format_error(
            [
                f"type {event.get_type()!r} is not a row event; read schema changes and "
                "transaction commits with item_from_cloudevent"
            ],
            event_id=event.get_id(),
        )
    return item


def _common(reader: _Reader) -> dict[str, Any]:
    return {
        "source": reader.text(DBUS_SOURCE) or "",
        "server_id": reader.text(SERVER_ID) or "",
        "position": reader.position(),
        "commit_time": reader.time(),
    }


def _check_source(reader: _Reader, name: str, segment: str) -> None:
    if name and segment and name != segment:
        reader.problems.append(
            f"source segment {segment!r} differs from extension {DBUS_SOURCE!r} {name!r}"
        )


def _row_change(reader: _Reader, suffix: str) -> RowChange:
    common = _common(reader)
    source, database, table = reader.source_segments(3, 3)
    _check_source(reader, common["source"], source)
    row_index = reader.number(ROW_INDEX)
    schema_version = reader.number(SCHEMA_VERSION, default=0)
    transaction_id = reader.text(TRANSACTION_ID, required=False)
    data = reader.data("before", "after", "key", "columns")
    types = data.get("columns", {})
    if not isinstance(types, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in types.items()
    ):
        reader.problems.append("data.columns must map column names to type strings")
        types = {}
    key = data.get("key", [])
    if not isinstance(key, list) or not all(isinstance(name, str) for name in key):
        reader.problems.append("data.key must be a list of column names")
        key = []
    op = next(op for op, row_type in ROW_TYPES.items() if row_type == suffix) if suffix else None
    before = _image_from_json(reader, "before", data.get("before"), types)
    after = _image_from_json(reader, "after", data.get("after"), types)
    # An update may lack its old image: a projection's output drops it.
    if op is Operation.DELETE and before is None:
        reader.problems.append(f"a {suffix} event needs data.before")
    if op is not Operation.DELETE and after is None:
        reader.problems.append(f"a {suffix} event needs data.after")
    reader.fail()
    assert op is not None
    return RowChange(
        database=database,
        table=table,
        op=op,
        before=before,
        after=after,
        primary_key=tuple(key),
        row_index=row_index,
        transaction_id=transaction_id,
        column_types=types,
        schema_version=schema_version,
        **common,
    )


def _image_from_json(
    reader: _Reader, which: str, image: Any, types: Mapping[str, str]
) -> dict[str, Any] | None:
    if image is None:
        return None
    if not isinstance(image, dict):
        reader.problems.append(f"data.{which} must be a JSON object or null")
        return None
    try:
        return row_from_json(image, types)
    except (ColumnValueError, UnsupportedColumnTypeError):
        pass  # read it again column by column to report every problem
    row: dict[str, Any] = {}
    for name, value in image.items():
        column_type = types.get(name)
        if column_type is None:
            reader.problems.append(f"data.{which}.{name}: column has no type in data.columns")
            continue
        try:
            row[name] = from_json_value(value, column_type, column=name)
        except (ColumnValueError, UnsupportedColumnTypeError) as exc:
            reader.problems.append(f"data.{which}: {exc}")
    return row


def _schema_change(reader: _Reader) -> SchemaChange:
    common = _common(reader)
    segments = reader.source_segments(2, 3)
    _check_source(reader, common["source"], segments[0])
    data = reader.data("database", "table", "statement")
    database, table, statement = data.get("database"), data.get("table"), data.get("statement")
    if not isinstance(database, str):
        reader.problems.append("data.database must be a string")
    if table is not None and not isinstance(table, str):
        reader.problems.append("data.table must be a string or null")
    if not isinstance(statement, str):
        reader.problems.append("data.statement must be a string")
    reader.fail()
    assert isinstance(database, str) and isinstance(statement, str)
    return SchemaChange(database=database, table=table, statement=statement, **common)


def _transaction_commit(reader: _Reader) -> TransactionCommit:
    common = _common(reader)
    (source,) = reader.source_segments(1, 1)
    _check_source(reader, common["source"], source)
    transaction_id = reader.text(TRANSACTION_ID, required=False)
    rows = reader.data("rows").get("rows", 0)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        reader.problems.append("data.rows must be a non-negative integer")
        rows = 0
    reader.fail()
    return TransactionCommit(transaction_id=transaction_id, rows=rows, **common)
