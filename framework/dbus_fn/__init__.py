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
from dbus_fn.context import FunctionContext
from dbus_fn.deadletter import capture_dead_letter, dead_letter_event, original_from_dead_letter
from dbus_fn.decorators import filter, projection, route
from dbus_fn.errors import (
    BundleError,
    ClusterNotFoundError,
    ColumnValueError,
    ConfigError,
    CoordinationError,
    DbusError,
    DestinationError,
    EventFormatError,
    FencedError,
    FunctionError,
    FunctionNotFoundError,
    FunctionTimeoutError,
    FunctionValidationError,
    ManifestError,
    ModuleLoadError,
    ReadOnlyRowError,
    RegistryError,
    SecretLeakError,
    ServiceError,
    UnsupportedColumnTypeError,
    VersionConflictError,
    ZooKeeperUnavailableError,
)
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    Row,
    RowChange,
    SchemaChange,
    TransactionCommit,
    UndecodedRows,
)
from dbus_fn.json_format import event_from_json, event_to_json, read_jsonl, write_jsonl
from dbus_fn.kafka_binding import KafkaMessage, from_kafka_message, to_kafka_message
from dbus_fn.manifest import Destination, Manifest, load_manifest
from dbus_fn.pipeline import DeadLetter, Delivery, Outcome, Pipeline, PipelineStats
from dbus_fn.registry import FunctionRegistry, LoadedDeployment, load_deployment, load_module

__all__ = [
    "BinlogPosition",
    "BundleError",
    "CaptureItem",
    "CloudEvent",
    "ClusterNotFoundError",
    "ColumnValueError",
    "ConfigError",
    "CoordinationError",
    "DbusError",
    "DeadLetter",
    "Delivery",
    "Destination",
    "DestinationError",
    "EventFormatError",
    "FencedError",
    "FunctionContext",
    "FunctionError",
    "FunctionNotFoundError",
    "FunctionRegistry",
    "FunctionTimeoutError",
    "FunctionValidationError",
    "KafkaMessage",
    "LoadedDeployment",
    "Manifest",
    "ManifestError",
    "ModuleLoadError",
    "Operation",
    "Outcome",
    "Pipeline",
    "PipelineStats",
    "ReadOnlyRowError",
    "RegistryError",
    "Row",
    "RowChange",
    "SchemaChange",
    "SecretLeakError",
    "ServiceError",
    "TransactionCommit",
    "UndecodedRows",
    "UnsupportedColumnTypeError",
    "VersionConflictError",
    "ZooKeeperUnavailableError",
    "capture_dead_letter",
    "dead_letter_event",
    "event_from_json",
    "event_id",
    "event_to_json",
    "filter",
    "from_cloudevent",
    "from_kafka_message",
    "item_from_cloudevent",
    "load_deployment",
    "load_manifest",
    "load_module",
    "original_from_dead_letter",
    "primary_key_text",
    "projection",
    "read_jsonl",
    "route",
    "to_cloudevent",
    "to_kafka_message",
    "write_jsonl",
]
