"""dbus: write small Python functions over MySQL/MariaDB row changes.

The public API is what this module re-exports; everything else is internal.
"""

from __future__ import annotations

from dbus_fn.errors import ConfigError, DbusError, ServiceError
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    RowChange,
    SchemaChange,
    TransactionCommit,
)

__all__ = [
    "BinlogPosition",
    "CaptureItem",
    "ConfigError",
    "DbusError",
    "Operation",
    "RowChange",
    "SchemaChange",
    "ServiceError",
    "TransactionCommit",
]
