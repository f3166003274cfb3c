"""The daemon Spark forks a runtime's Python task workers from, with what every task
imports already loaded.

Spark starts one daemon per kind of Python process (``spark.python.daemon.module``,
run as ``python -m <daemon> <worker module>``) and forks a worker from it for each
task slot it needs: four task workers in a local runtime on two cores (a read task's
stage and its write run side by side), more after a worker dies. Spark's own daemon
imports the worker module in each fork, after it, so every task worker spent about
0.7 s of a core importing ``pyspark.worker`` and dbus's modules again before its first
row (docs/performance.md).

For ``pyspark.worker``, this daemon imports those modules once, before it forks, and
the forks share them. Spark imports late to be safe: a module that starts a thread as
it is imported (pyarrow, pandas, NumPy's math libraries do) would leave the forks with
a lock a thread held. So ``PRELOADED`` names only modules that start none and load none
of those (tests/runtimes/spark/test_worker_daemon.py), a task still imports pyarrow and
the user's functions in its own process, and if the daemon finds a second thread
running after the preload all the same (a ``sitecustomize``, a future version of a
library), it starts again as Spark's own daemon, which imports nothing early. Every other
kind of process (the planners, the streaming source's and sink's runners) forks once or
twice per query: their daemons run exactly as Spark's.
"""

from __future__ import annotations

import importlib
import os
import sys

TASK_WORKER = "pyspark.worker"
PRELOADED: tuple[str, ...] = (
    TASK_WORKER,
    "dbus_fn",
    "dbus_spark.spark.datasources",
    "dbus_spark.sinks.kafka",
    "dbus_spark.sinks.kafka_positions",
    "dbus_spark.sinks.elasticsearch",
    "dbus_spark.stage.functions",
    "dbus_spark.stage.documents",
    "dbus_spark.state.history",
    "dbus_spark.state.live_counters",
    "dbus_spark.state.sink_activity",
)
"""What a task worker imports that starts no thread: loaded before the forks."""

SPARK_DAEMON = "pyspark.daemon"


def threads() -> int:
    """How many threads this process runs (the operating system's count, which sees
    threads a native library started as well as Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def preload() -> bool:
    """Import ``PRELOADED``; whether this process still runs one thread only."""
    for name in PRELOADED:
        importlib.import_module(name)
    return threads() == 1


def main() -> None:
    worker_module = sys.argv[1] if len(sys.argv) > 1 else TASK_WORKER
    if worker_module == TASK_WORKER and not preload():
        # Forks of a threaded process are not safe: be Spark's daemon, from the start.
        sys.stderr.write(
            "dbus: a module the task workers' daemon loads started a thread; "
            "it runs as Spark's daemon instead\n"
        )
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", SPARK_DAEMON, *sys.argv[1:]])
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
