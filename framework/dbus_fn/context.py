"""What a function may learn about the call besides the event: the context.

A function that declares a second parameter receives a ``FunctionContext``. It
is read-only: it tells the function who it is (name, deployment, version), where
the event came from (source, position), and gives it a logger and counters.
Nothing a function does to its context changes how the event is processed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from dbus_fn.events import BinlogPosition


class Metrics(Protocol):
    """Counters a function may bump; the runtime exports them."""

    def increment(self, name: str, value: int = 1) -> None: ...


class Counters:
    """Named integer counters of one function, safe to bump from several threads."""

    __slots__ = ("_counts", "_lock")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def increment(self, name: str, value: int = 1) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a counter name must be a non-empty str, got {name!r}")
        with self._lock:
            self._counts[name] = self._counts.get(name, 0) + value

    def snapshot(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)


@dataclass(frozen=True, slots=True)
class FunctionContext:
    """The read-only context of one function call."""

    function: str
    """The function's name, ``module:qualname`` unless it was given one."""
    deployment: str
    version: str
    source: str
    table: str
    """``db.table`` of the event."""
    position: BinlogPosition
    logger: logging.Logger
    metrics: Metrics


def function_logger(function: str) -> logging.Logger:
    """The logger of a user's function: ``dbus_fn.functions.<module>.<qualname>``."""
    return logging.getLogger("dbus_fn.functions." + function.replace(":", "."))
