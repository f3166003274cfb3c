"""The Spark session a runtime runs in: Spark's settings, the Python its workers run
(``workers_python``) and the path they start with (``_files_on_workers_path``), dbus's
log and JVM options, the driver's calls into the JVM without pyspark's NumPy converters
(``_without_numpy_converters``) and its JVM classes named whole (``java_class``), dbus's
two data sources registered, and the session's end (``end_spark``): its JVM and Python
workers gone before a runtime says it stopped.

``python -m dbus_spark.spark.session`` starts one session and prints its JVM's pid: the
process ``dbus_spark.config.jvm`` runs to make Spark's class archive as that JVM ends.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import psutil
from py4j.java_gateway import JavaClass
from pyspark import SparkConf, SparkContext, SparkFiles
from pyspark.sql import SparkSession

from dbus_fn.errors import ConfigError
from dbus_fn.processes import still_running
from dbus_spark.config import jvm, logs
from dbus_spark.config.runtime import EXECUTOR_PYTHON_ENV
from dbus_spark.reads import open_read_control
from dbus_spark.spark.datasources import BinlogDataSource, FunctionSinkDataSource

_SPARK_SETTINGS: tuple[tuple[str, str], ...] = (
    ("spark.ui.enabled", "false"),
    ("spark.ui.showConsoleProgress", "false"),
    # Spark binds to loopback only, like every service here.
    ("spark.driver.bindAddress", "127.0.0.1"),
    ("spark.driver.host", "127.0.0.1"),
    ("spark.sql.shuffle.partitions", "4"),
    # A task runs once at a time: a speculative copy would write its lanes beside it
    # (``dbus_spark.sinks.kafka_positions``), whatever Spark's defaults file says.
    ("spark.speculation", "false"),
    # Keep Python workers alive between tasks: functions and clients load once.
    ("spark.python.worker.reuse", "true"),
    # Task workers fork from a daemon that has pyspark's worker and dbus loaded.
    ("spark.python.daemon.module", "dbus_spark.spark.worker_daemon"),
    ("spark.sql.streaming.noDataMicroBatches.enabled", "false"),
    # After an empty latestOffset Spark asks again in pollingDelay (10 ms by default):
    # an idle runtime then sent its source about 240 queries a second and spent 22%
    # of a core. 100 ms is at most that much later for the first change after a lull.
    ("spark.sql.streaming.pollingDelay", "100ms"),
    ("spark.driver.memory", "1g"),
    # Hadoop's FileContext-based checkpoint writer forks `chmod` for every file it
    # writes when Hadoop's native library is absent (pyspark's jars lack it). The
    # FileSystem-based writer keeps write-then-rename atomicity with fewer forks,
    # and the raw local file system writes no .crc side files.
    (
        "spark.sql.streaming.checkpointFileManagerClass",
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager",
    ),
    ("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem"),
)


def spark_session(
    master: str = "local[*]",
    *,
    app_name: str = "dbus-runtime",
    verbose: bool | None = None,
    python: str | None = None,
) -> SparkSession:
    """A Spark session whose Python workers run this interpreter.

    Spark logs its errors only, unless ``verbose`` (``None``: as ``DBUS_VERBOSE``
    says); see ``dbus_spark.config.logs``. ``python``: what ``workers_python`` gave, when
    the caller asked it already.
    """
    if verbose is not None:
        logs.set_verbose(verbose)
    logs.stacks_on_signal()
    _without_numpy_converters()
    # Workers must import the same dbus and the same functions as the driver.
    os.environ["PYSPARK_PYTHON"] = python or workers_python(os.environ)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Only a local master's workers inherit it: open reads go on between batches there.
    carry = master.startswith("local") and open_read_control.switched_on(os.environ)
    os.environ[open_read_control.LOCAL_ENV] = "1" if carry else "0"
    conf = SparkConf().setMaster(master).setAppName(app_name).setAll(_SPARK_SETTINGS)
    conf.set("spark.driver.extraJavaOptions", logs.spark_java_options())
    if added := jvm.added_options():
        conf.set("spark.executor.extraJavaOptions", shlex.join(added))
    conf.set(f"spark.executorEnv.{logs.VERBOSE_ENV}", "1" if logs.verbose() else "0")
    conf.set(f"spark.executorEnv.{logs.LOG_FORMAT_ENV}", "json" if logs.json_logs() else "text")
    try:
        if SparkContext._gateway is None:
            gateway = logs.launch_gateway(conf)
            if gateway is not None:
                SparkContext(conf=conf, gateway=gateway)
        session = SparkSession.builder.config(conf=conf).getOrCreate()
    except Exception:
        refused = jvm.refused_options()
        if refused is None:
            raise
        raise ConfigError(
            f"Spark's JVM did not start with {jvm.OPTIONS_ENV}={os.environ[jvm.OPTIONS_ENV]!r} "
            f"(java: {refused}): fix the options or unset it",
            setting=jvm.OPTIONS_ENV,
        ) from None
    session.sparkContext.setLogLevel(logs.spark_log_level())
    logs.quiet_accumulator_server(session.sparkContext)
    _files_on_workers_path(session.sparkContext)
    session.dataSource.register(BinlogDataSource)
    session.dataSource.register(FunctionSinkDataSource)
    return session


END_SECONDS = 30.0
"""How long a stopping runtime waits for Spark's processes before it kills them."""


def end_spark(timeout: float = END_SECONDS) -> None:
    """End this process's Spark and wait until its JVM and every Python worker the
    JVM started are gone; what is left after ``timeout`` is killed.

    Without the wait, Spark's processes outlive the runtime that said it stopped:
    the JVM ends only once it sees its driver gone, and its Python workers after it,
    publishing counters into the runtime's folder and holding their sources' read
    locks meanwhile, while a service manager or a user may already start the next run.
    """
    processes = psutil.Process().children(recursive=True)
    # What py4j says from here on is that the JVM went: a listener's last call in
    # flight as it exits, an object freed after. That is the end that was asked for.
    for handler in logging.getLogger().handlers:
        handler.addFilter(_without_py4j)
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway._gateway_client.is_connected = False  # freed objects tell the JVM nothing
    # No call into the JVM: a signal sent to the whole group may be ending it already.
    # It ends on its stdin's end, stopping Spark (and its workers' daemons) as it exits.
    child = getattr(gateway, "proc", None)
    if child is not None and child.stdin is not None:
        with contextlib.suppress(OSError):
            child.stdin.close()
    left = still_running(processes, timeout)
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    still_running(left, 5)


def _without_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def java_class(context: SparkContext, name: str) -> Any:
    """The JVM's class ``name`` (fully qualified): its static methods, its constructor.
    Not through ``context._jvm``: each name that walks (``java``, ``java.lang``) is
    looked up as a class in every package pyspark imported, each miss a scan of the
    classpath."""
    assert context._gateway is not None
    return JavaClass(name, context._gateway._gateway_client)


def _without_numpy_converters() -> None:
    """Take pyspark's two NumPy converters off py4j's input converters, which every
    driver-side call into the JVM with an argument that is not a string asks in turn.

    The first of them to be asked imports ``pyspark.testing.utils`` to learn whether
    NumPy is installed, and that module imports pandas to check its version: about
    0.35 s of a core in each driver's start on a quiet machine (docs/performance.md),
    for values the runtime never hands the JVM
    (its driver passes strings, numbers, lists and maps; NumPy values are only ever
    in its workers, which make no py4j calls)."""
    from py4j import protocol
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    numpy_kinds = (NumpyArrayConverter, NumpyScalarConverter)
    protocol.INPUT_CONVERTER[:] = [
        c for c in protocol.INPUT_CONVERTER if not isinstance(c, numpy_kinds)
    ]


def _files_on_workers_path(context: SparkContext) -> None:
    """Start the Python processes of ``context``'s functions (the data sources registered
    after this, their tasks) with Spark's files folder on their path already.

    Before its first task, each of Spark's Python processes (a dozen through a query's
    start) puts that folder on ``sys.path`` and, having changed the path, calls
    ``importlib.invalidate_caches()``. On Python 3.11 that makes every zip importer
    re-read its archive's directory, and pyspark's worker imports pyspark from
    ``pyspark.zip`` through one importer per package, so one call reads its 2,771
    entries 15 times: 0.28-0.38 s of a core in each process of a start (measured,
    docs/performance.md). With the folder given here, in the environment Spark starts
    them with, the path does not change and nothing is read again; where an executor's
    folder is another (a cluster's hosts), it is added at its first task as before.
    """
    folder = SparkFiles.getRootDirectory()
    given = context.environment.get("PYTHONPATH", "")
    if folder not in given.split(os.pathsep):
        context.environment["PYTHONPATH"] = os.pathsep.join(filter(None, [given, folder]))


def workers_python(environ: MutableMapping[str, str]) -> str:
    """The interpreter Spark's Python workers run, on the driver and on every executor
    (Spark sends one command to all): ``PYSPARK_PYTHON`` if set, else this one.

    With ``DBUS_EXECUTOR_PYTHON`` set to a bare name (``python3``), each host runs
    the one its ``PATH`` finds first: executors in the runtime image find the
    image's, and the driver finds this one, its folder put first on ``PATH`` here.
    A path must exist on every host, this one included.
    """
    wanted = environ.get(EXECUTOR_PYTHON_ENV, "").strip()
    if not wanted:
        return environ.get("PYSPARK_PYTHON") or sys.executable
    here = str(Path(sys.executable).parent)
    if "/" in wanted:
        if not os.access(wanted, os.X_OK):
            raise ConfigError(
                f"--executor-python {wanted} is not an interpreter on this host, where Spark's "
                "planning workers run it too: give a name each host finds on its PATH "
                "(python3), or a path that exists everywhere",
                setting="executor_python",
            )
        return wanted
    path = os.pathsep.join([here, environ.get("PATH", "")])
    found = shutil.which(wanted, path=path)
    if found is None or str(Path(found).parent) != here:
        raise ConfigError(
            f"--executor-python {wanted}: this runtime's interpreter folder {here} has no "
            f"{wanted!r}, so the driver's workers would run another Python; name one it has "
            f"({Path(sys.executable).name}, python3)",
            setting="executor_python",
        )
    environ["PATH"] = path
    return wanted


def main() -> int:
    """Start a session and say its JVM's pid (``dbus_spark.config.jvm.build``: that JVM writes
    the class archive as it ends, after this process stops it)."""
    spark = spark_session("local[1]", app_name="dbus-class-archive")
    print(spark.sparkContext._jvm.ProcessHandle.current().pid(), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
