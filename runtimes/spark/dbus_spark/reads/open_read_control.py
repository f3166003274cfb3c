"""Whether a runtime carries its sources' open reads across micro-batches
(``dbus_spark.reads.open_read``), and how the driver ends them: when its query stops, or
before a pause.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dbus_fn.capture import position_to_json
from dbus_fn.errors import ConfigError
from dbus_fn.events import BinlogPosition
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.reads.open_read import mark_stopped, quiet
from dbus_spark.reads.open_read_socket import ask
from dbus_spark.state.checkpoint import record_reached
from dbus_spark.state.progress import Admission

SWITCH = "DBUS_CARRY_OPEN_READS"
"""On by default: a runtime on a local master carries its open reads across batches.
Set to 0 (or off, false, no), each batch's task reads on its own, and changes
committed between two batches wait for the next one."""
LOCAL_ENV = "DBUS_LOCAL_EXECUTORS"
"""Set to 1 by the runtime on a local master with ``SWITCH`` on (``session.spark_session``):
its executors are processes of the driver's host, where a source's open read can be
found (its socket, its lock) by every task and by the driver."""


_ON = ("", "1", "on", "true", "yes")
_OFF = ("0", "off", "false", "no")


def switched_on(environ: Mapping[str, str]) -> bool:
    """Whether reads are carried across batches: unless ``SWITCH`` turns it off; a
    value that is neither on nor off is a ``ConfigError``."""
    value = environ.get(SWITCH, "").strip().lower()
    if value not in _ON + _OFF:
        raise ConfigError(
            f"{SWITCH}={environ[SWITCH]!r} is neither on nor off; set it to 1 (on, true, "
            "yes) or 0 (off, false, no), or unset it to carry reads across micro-batches",
            setting=SWITCH,
        )
    return value in _ON


def local_executors() -> bool:
    return os.environ.get(LOCAL_ENV) == "1"


def carries(config: RuntimeConfig, partition: Any, gate: Any, shards: int) -> bool:
    """Whether a ``SourceRange`` is read by an open read carried across batches: read
    open, by one task, every deployment with the stream, no history merging, no fence,
    executors on the driver's host."""
    return (
        local_executors()
        and config.open_read_seconds > 0
        and shards == 1
        and gate is None
        and config.fencing is None
        and not Admission.from_json(partition.admission)
    )


def end_read(checkpoint: str, source: str) -> BinlogPosition | None:
    """End ``source``'s read (``quiet``) from the driver, noting how far it delivered as
    reached (``checkpoint.record_reached``), not to be read again; that position."""
    handed = quiet(checkpoint, source)
    if handed.reached is not None:
        record_reached(checkpoint, {source: position_to_json(handed.reached)})
    return handed.reached


def hurry_all(checkpoint: str, sources: list[str]) -> None:
    """A query is stopping: its sources' reads cut each task's span as soon as it
    reaches its end (``OpenRead.hurry``), so the batch in flight commits soon."""
    if local_executors():
        for source in sources:
            ask(checkpoint, source, {"hurry": True})


def end_all(checkpoint: str, sources: list[str], run: str | None = None) -> None:
    """A query stopped: no task of it (``run``) starts a read any more
    (``open_read.mark_stopped``), and its sources' reads end (``end_read``)."""
    if local_executors():
        for source in sources:
            if run is not None:
                mark_stopped(checkpoint, source, run)
            end_read(checkpoint, source)
