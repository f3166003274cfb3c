"""What a running runtime shows of itself, in the Prometheus exposition format.

``reports`` carries each batch's counters from the sink's ``commit()`` to the
driver, ``live`` the workers' sink and function counts as they happen;
``runtime`` turns them, Spark's progress and what the servers say now into one
snapshot (``state``), which ``families`` shows as Prometheus metrics (see
docs/observability.md for the list).
"""

from __future__ import annotations

from dbus_spark.metrics.reports import reports_dir, take_report, write_report
from dbus_spark.metrics.runtime import BatchListener, RuntimeMetrics

__all__ = ["BatchListener", "RuntimeMetrics", "reports_dir", "take_report", "write_report"]
