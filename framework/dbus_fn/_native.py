"""The native code, when it is built: ``dbus_native`` from ``framework/native``.

``deploy/dev env`` builds it with the machine's cargo; without one, everything it
does is done in Python, with the same results: the capture's reading of binlog
events (``dbus_fn.capture._events``), row images (``dbus_fn.capture._native``) and
a snapshot's rows (``dbus_fn.capture._text_rows``), all off with
``DBUS_NATIVE_DECODE=0``, and the row images' JSON text
(``dbus_fn.row_json.row_json_encoder``, off with ``DBUS_NATIVE_ENCODE=0``). The
Python code (and mysql-replication, for events) stays the reference for each.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

try:
    module: Any = importlib.import_module("dbus_native")
except ImportError:
    module = None

OFF = ("0", "off", "false", "no")


def native(switch: str) -> Any | None:
    """The native module, unless it is not built or ``switch`` turns it off."""
    if module is None or os.environ.get(switch, "").strip().lower() in OFF:
        return None
    return module
