"""Counters as they happen, from the Spark Python workers to the driver.

A batch's report reaches the driver only once the batch commits; a sink that
waits on its destination (Kafka down, Elasticsearch busy) must show while it
waits. Each Python worker publishes every second: the writers their sinks'
counters (``dbus_spark.state.sink_activity``) to ``<reports>/sinks/<pid>.json``, the
readers their functions' counts and call times to ``<reports>/functions/<pid>.json``;
the driver sums the files when scraped. Counters only grow (a worker that ended
keeps its file); what is in flight counts only from files updated lately.

Only workers on the driver's host can publish so. On a cluster whose executors
run elsewhere, the driver's metrics have each batch's counts (its report) but not
the workers' live counts: functions' calls and call times, sinks' retries and
what they hold in flight.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dbus_fn.files import replace_file
from dbus_fn.outcomes import RECENT_ERRORS
from dbus_spark.state.sink_activity import SinkActivity

PUBLISH_SECONDS = 1.0
FRESH_SECONDS = 10.0
"""A worker file older than this is a worker gone: nothing of it is in flight."""


class Publisher:
    """Writes a snapshot of one kind of this worker's counters (``sinks``,
    ``functions``) to ``<folder>/<kind>/<pid>.json``, every second."""

    def __init__(self, kind: str, snapshot: Callable[[], dict[str, Any]], label: str = "") -> None:
        """``label``: told apart from the worker's other publishers of ``kind``."""
        self._kind = kind
        self._label = label
        self._snapshot = snapshot
        self._folder: Path | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def use(self, folder: str, snapshot: Callable[[], dict[str, Any]] | None = None) -> bool:
        """Publish to ``folder`` (what ``snapshot`` says, when given); whether the
        folder is new (a new query, whose counts start at 0). A folder that is not
        there is the driver's on another host: nothing is published."""
        if not os.path.isdir(folder):
            return False
        path = Path(folder) / self._kind
        with self._lock:
            if snapshot is not None:
                self._snapshot = snapshot
            new = path != self._folder
            self._folder = path
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"dbus-{self._kind}-activity", daemon=True
                )
                self._thread.start()
        return new

    def publish(self) -> None:
        with self._lock:
            folder, snapshot = self._folder, self._snapshot
        if folder is None:
            return
        folder.mkdir(exist_ok=True)  # never the driver's folder itself: see ``use``
        data = {"updated": time.time(), "data": snapshot()}
        replace_file(folder / f"{os.getpid()}{self._label}.json", json.dumps(data))

    def _run(self) -> None:
        while True:
            time.sleep(PUBLISH_SECONDS)
            # The folder may go with its runtime; the next query gives another.
            with contextlib.suppress(OSError):
                self.publish()


class SinkPublisher(Publisher):
    """A worker's sinks' activity (``dbus_spark.state.sink_activity``)."""

    def __init__(self, sinks: Mapping[str, SinkActivity], label: str = "") -> None:
        super().__init__("sinks", lambda: {name: a.to_json() for name, a in sinks.items()}, label)
        self._sinks = sinks

    def use(self, folder: str, snapshot: Callable[[], dict[str, Any]] | None = None) -> bool:
        new = super().use(folder, snapshot)
        if new:
            for activity in self._sinks.values():
                activity.reset()
        return new


def _published(folder: Path, kind: str, now: float) -> Iterator[tuple[bool, dict[str, Any]]]:
    """Each worker's last snapshot of ``kind``, and whether it is fresh."""
    for path in (folder / kind).glob("[0-9]*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        yield now - float(data.get("updated", 0)) <= FRESH_SECONDS, data.get("data", {})


def read_functions(folder: Path, now: float) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (deployment, function), the workers' counts summed: calls, passed,
    filtered, dead, timeouts, call times (``latency`` buckets, ``seconds``), the
    latest ``last_error`` of any worker and the latest ``recent_errors`` of all."""
    totals: dict[tuple[str, str], dict[str, Any]] = {}
    for _, data in _published(folder, "functions", now):
        for deployment, functions in data.items():
            for name, stats in functions.items():
                total = totals.setdefault((deployment, name), {
                    "kind": stats.get("kind", ""), "counts": Counter(), "latency": [],
                    "seconds": 0.0,
                })  # fmt: skip
                total["counts"].update({k: int(stats.get(k, 0)) for k in _FUNCTION_COUNTS})
                buckets = stats.get("latency", [])
                if len(total["latency"]) < len(buckets):
                    total["latency"] += [0] * (len(buckets) - len(total["latency"]))
                for index, count in enumerate(buckets):
                    total["latency"][index] += int(count)
                total["seconds"] += float(stats.get("seconds", 0.0))
                error = stats.get("last_error")
                if error and error.get("at", 0) > (total.get("last_error") or {}).get("at", 0):
                    total["last_error"] = error
                recent = total.setdefault("recent_errors", [])
                recent += stats.get("recent_errors", ())
                recent.sort(key=lambda e: e.get("at", 0))
                del recent[:-RECENT_ERRORS]
    return totals


_FUNCTION_COUNTS = ("calls", "passed", "filtered", "dead", "timeouts")


def read_sinks(folder: Path, now: float) -> dict[str, dict[str, Any]]:
    """Per sink, the workers' counters summed: messages and bytes per destination,
    retries, errors, and what fresh workers have in flight."""
    totals: dict[str, dict[str, Any]] = {}
    for fresh, data in _published(folder, "sinks", now):
        for name, sink in data.items():
            total = totals.setdefault(name, {
                "messages": Counter(), "bytes": Counter(), "retries": 0, "errors": 0,
                "in_flight": 0,
            })  # fmt: skip
            total["messages"].update(sink.get("messages", {}))
            total["bytes"].update(sink.get("bytes", {}))
            total["retries"] += int(sink.get("retries", 0))
            total["errors"] += int(sink.get("errors", 0))
            if fresh:
                total["in_flight"] += int(sink.get("in_flight", 0))
    return totals
