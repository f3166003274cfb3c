"""The native row decoder, when it is built: ``dbus_native`` from ``framework/native``.

``deploy/dev env`` builds it with the machine's cargo; without one the capture
decodes every row in Python (``_decode``), with the same values. Each column's
Python reader says how the native decoder reads the same value
(``_column_readers.NATIVE``), and stays the reference: a column the native side
does not decode itself is read by it, row by row.

``DBUS_NATIVE_DECODE=0`` switches the native decoder off, with the native split of
the binlog's events (``_events``) and of a snapshot's rows (``_text_rows``); the
capture tests run both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from decimal import Decimal
from typing import Any

from dbus_fn._native import native
from dbus_fn._zero_dates import zero_date_text
from dbus_fn.capture._column_readers import _ZERO_TIMESTAMP, NATIVE, Reader

SWITCH = "DBUS_NATIVE_DECODE"
"""Set to 0 to decode in Python alone."""

_MAKERS = (Decimal, zero_date_text, _ZERO_TIMESTAMP, UTC)


def native_decoding() -> bool:
    """Whether rows are decoded natively: the module is built and not switched off."""
    return native(SWITCH) is not None


def native_plan(columns: Sequence[tuple[str, Reader]]) -> Any | None:
    """The native decoder of a table's ``(name, reader)`` columns; None when rows are
    decoded in Python (not built, switched off, or no column it reads itself)."""
    module = native(SWITCH)
    if module is None:
        return None
    described = []
    for name, reader in columns:
        kind, a, b, labels = getattr(reader, NATIVE, ("python", 0, 0, ()))
        described.append((name, kind, a, b, list(labels), reader))
    if all(column[1] == "python" for column in described):
        return None
    return module.Plan(described, _MAKERS)


__all__ = ["SWITCH", "native_decoding", "native_plan"]
