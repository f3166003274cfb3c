"""What a sink has done so far in this worker process, for the runtime's metrics.

Counted as it happens (not at the end of a batch), so a sink that waits on its
destination shows that while it waits: what it has in flight, how often it
retried. ``dbus_spark.state.live_counters`` publishes these to the driver.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any


class SinkActivity:
    """One sink's counters; thread-safe (client callbacks count from their threads)."""

    def __init__(self, in_flight: Callable[[], int] = lambda: 0) -> None:
        self._lock = threading.Lock()
        self._in_flight = in_flight
        self.messages: Counter[str] = Counter()
        """Per destination (topic, index), messages the destination acknowledged."""
        self.bytes: Counter[str] = Counter()
        """Per destination, their bytes (Kafka: key and value; Elasticsearch: the document)."""
        self.retries = 0
        """Times the sink waited on its destination and tried again (Kafka: also each
        time its client lost the cluster and connects again)."""
        self.errors = 0
        """Messages the destination refused (dead-lettered or failing the batch)."""

    def acknowledged(self, destination: str, size: int, count: int = 1) -> None:
        with self._lock:
            self.messages[destination] += count
            self.bytes[destination] += size

    def retried(self) -> None:
        with self._lock:
            self.retries += 1

    def failed(self, count: int = 1) -> None:
        with self._lock:
            self.errors += count

    def reset(self) -> None:
        with self._lock:
            self.messages.clear()
            self.bytes.clear()
            self.retries = self.errors = 0

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "messages": dict(self.messages), "bytes": dict(self.bytes),
                "retries": self.retries, "errors": self.errors, "in_flight": self._in_flight(),
            }  # fmt: skip
