"""dbus: write small Python functions over MySQL/MariaDB row changes.

The public API is what this module re-exports; everything else is internal.
"""

from __future__ import annotations

from dbus_fn.errors import ConfigError, DbusError, ServiceError
from dbus_fn.events import BinlogPosition, Operation, RowChange

__all__ = [
    "BinlogPosition",
    "ConfigError",
    "DbusError",
    "Operation",
    "RowChange",
    "ServiceError",
]
