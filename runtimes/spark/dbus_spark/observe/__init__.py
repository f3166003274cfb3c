"""The observe layer: what a running runtime shows of itself, in the Prometheus
exposition format and as JSON.

``runtime_metrics`` turns what reaches the driver (each batch's counters,
``state.batch_reports``; the workers' counts as they happen, ``state.live_counters``),
Spark's progress and what the servers say now into one snapshot (``state``), which
``families`` shows as Prometheus metrics (see docs/observability.md for the list).
"""

from __future__ import annotations

from dbus_spark.observe.runtime_metrics import BatchListener, RuntimeMetrics
from dbus_spark.state.batch_reports import take_report, write_report

__all__ = ["BatchListener", "RuntimeMetrics", "take_report", "write_report"]
