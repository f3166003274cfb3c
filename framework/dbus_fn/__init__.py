"""dbus: write small Python functions over MySQL/MariaDB row changes.

The public API is what this module re-exports; everything else is internal.
"""

from __future__ import annotations

from dbus_fn.cloudevent import (
    CloudEvent,
    event_id,
    from_cloudevent,
    item_from_cloudevent,
    primary_key_text,
    to_cloudevent,
)
from dbus_fn.errors import (
    ColumnValueError,
    ConfigError,
    DbusError,
    EventFormatError,
    ReadOnlyRowError,
    ServiceError,
    UnsupportedColumnTypeError,
)
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    Row,
    RowChange,
    SchemaChange,
    TransactionCommit,
)
from dbus_fn.json_format import event_from_json, event_to_json, read_jsonl, write_jsonl
from dbus_fn.kafka_binding import KafkaMessage, from_kafka_message, to_kafka_message

__all__ = [
    "BinlogPosition",
    "CaptureItem",
    "CloudEvent",
    "ColumnValueError",
    "ConfigError",
    "DbusError",
    "EventFormatError",
    "KafkaMessage",
    "Operation",
    "ReadOnlyRowError",
    "Row",
    "RowChange",
    "SchemaChange",
    "ServiceError",
    "TransactionCommit",
    "UnsupportedColumnTypeError",
    "event_from_json",
    "event_id",
    "event_to_json",
    "from_cloudevent",
    "from_kafka_message",
    "item_from_cloudevent",
    "primary_key_text",
    "read_jsonl",
    "to_cloudevent",
    "to_kafka_message",
    "write_jsonl",
]
