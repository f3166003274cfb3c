"""Sinks: where the function stage's results are written.

A sink buffers what one Spark task produces and ``flush()`` returns only when the
destination has acknowledged all of it, or raises ``SinkError``. The writer commits
a micro-batch (and so its binlog positions) only after every sink of every task
has flushed: that is the at-least-once guarantee. Exactly once to Kafka adds
transactions that carry how far each lane goes (``kafka_positions``), under stable
transactional ids for a standalone runtime (``write_slots``).
"""

from __future__ import annotations

from typing import Protocol

from dbus_spark.state.records import IndexAction, KafkaRecord


class Sink(Protocol):
    """What the writer needs of a destination."""

    def flush(self) -> int:
        """Block until everything written so far is acknowledged; return how many."""
        ...

    def close(self) -> None: ...


__all__ = ["IndexAction", "KafkaRecord", "Sink"]
