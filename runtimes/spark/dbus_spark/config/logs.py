"""How much the runtime and the libraries under it print: quiet unless asked to be verbose.

Quiet, the default, shows the runtime's own log, Spark's errors and the client
libraries' errors. Verbose (``--verbose``, or ``DBUS_VERBOSE=1``) adds Spark's
warnings and the clients' warnings and notices. Both settings travel as
environment variables because Spark's Python workers, where the sinks run, are
separate processes that inherit the environment of the JVM the driver starts.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbus_spark.config import jvm

if TYPE_CHECKING:
    from py4j.java_gateway import JavaGateway
    from pyspark import SparkConf

VERBOSE_ENV = "DBUS_VERBOSE"
LOG_FORMAT_ENV = "DBUS_LOG_FORMAT"
"""``text`` (the default) or ``json``: one JSON object per line, for machines."""
FIELDS = "dbus_fields"
"""The ``extra`` key of a record's structured fields (the batch line's counters), which
the JSON form carries as they are and the text form has in its message."""
TEXT_FORMAT = "%(asctime)s %(name)s %(message)s"
RUNTIME_LOG_ENV = "DBUS_RUNTIME_LOG"
"""Level of the runtime's own log (``dbus.runtime``): INFO unless set, as by ``dbus demo``."""

LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
"""Spark's log4j2 configuration: to stderr, at the level in ``-Ddbus.spark.level``."""

LIBRDKAFKA_LOGGER = "dbus.runtime.librdkafka"
"""Where librdkafka's lines go (confluent-kafka maps their syslog levels to logging's)."""

# The Python clients under the runtime that log through Python logging already:
# Elasticsearch's transport, ZooKeeper's (kazoo, which the coordination package
# hands a logger of its own) and Spark's bridge (py4j).
_CLIENT_LOGGERS = (
    "elastic_transport",
    "elasticsearch",
    "kazoo",
    "dbus_fn.coordination.kazoo",
    "py4j",
)

# The JVM prints this before any logging exists, and no flag turns it off; Spark's
# launcher always enables the incubating vector module.
_JVM_NOISE = (b"WARNING: Using incubator modules:",)


STACKS_SIGNAL = signal.SIGUSR2
"""Sent to a runtime's process (its driver, or one of its Python workers), it prints
every thread's stack to that process's standard error, which is the runtime's log:
what a run that hangs is doing (Spark's JVM prints its own threads on SIGQUIT)."""


def stacks_on_signal() -> None:
    """Let ``STACKS_SIGNAL`` print this process's threads (once per process)."""
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def ignore_ctrl_c() -> None:
    """Let this Spark worker process go on through a Ctrl-C (SIGINT) at the terminal.

    Ctrl-C reaches every process of the terminal's group, Spark's Python workers
    too, and pyspark's daemon gives each worker Python's ``KeyboardInterrupt`` back: a
    worker interrupted mid-task printed its traceback and failed its task, which the
    JVM logged in turn, before the runtime's one line. Stopping is the driver's part
    (it stops the query between micro-batches); a worker finishes what it was given.
    """
    from pyspark import TaskContext

    if TaskContext.get() is None:
        # Not a Spark task's process (a test or a command calling worker code in its
        # own): its Ctrl-C stays its own, and so does that of every process it starts.
        return
    with contextlib.suppress(ValueError):  # not the main thread: nothing to set
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def quiet_accumulator_server(context: Any) -> None:
    """Keep pyspark's accumulator server from printing a traceback as its context stops.

    Spark's JVM closes its connection to the server when the context stops; the
    server's handler notices its own shutdown flag only between reads, so it often
    reads the closed connection first and prints an ``EOFError`` traceback (seen
    before a stopped runtime's one line). That close is the stop itself; every other
    error is printed as before.
    """
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return
    loud = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], EOFError | ConnectionError):
            return
        loud(request, client_address)

    server.handle_error = handle_error


def verbose() -> bool:
    """Whether this process (and the Spark it starts) should be verbose."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def set_verbose(on: bool) -> None:
    """Make this process, and the Spark workers it starts from now on, verbose or quiet.

    An application's choice (the CLI's): it sets the client libraries' loggers
    here, and in the workers, which see it in their environment.
    """
    os.environ[VERBOSE_ENV] = "1" if on else "0"
    route_client_logs()


def runtime_log_level() -> int:
    """The level of the runtime's own log: ``DBUS_RUNTIME_LOG`` (a level name), else INFO."""
    name = os.environ.get(RUNTIME_LOG_ENV, "").strip().upper()
    level = logging.getLevelName(name) if name else logging.INFO
    return level if isinstance(level, int) else logging.INFO


def runtime_logger() -> logging.Logger:
    """The runtime's own logger, writing to stderr also from a Spark-managed Python
    process (an executor's worker, or the driver's commit), where nothing set logging up."""
    log = logging.getLogger("dbus.runtime")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(log_formatter())
        log.addHandler(handler)
        log.setLevel(runtime_log_level())
        log.propagate = False
    return log


def json_logs() -> bool:
    return os.environ.get(LOG_FORMAT_ENV, "").strip().lower() == "json"


def log_formatter() -> logging.Formatter:
    """The runtime's log format, as ``DBUS_LOG_FORMAT`` says when a line is written
    (workers inherit it; a logger set up before the CLI read its options follows)."""
    return _ChosenFormat()


class _ChosenFormat(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._json = JsonFormatter()

    def format(self, record: logging.LogRecord) -> str:
        return self._json.format(record) if json_logs() else super().format(record)


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time (UTC, ISO 8601), level, logger, message, the
    record's structured fields (``FIELDS``) and, with an exception, its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, Mapping):
            data.update(fields)
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def client_log_level() -> int:
    """Client libraries show errors; verbose, their warnings and notices too."""
    return logging.INFO if verbose() else logging.ERROR


def route_client_logs() -> None:
    """Set the client libraries' loggers to ``client_log_level()`` in this process."""
    level = client_log_level()
    for name in (*_CLIENT_LOGGERS, LIBRDKAFKA_LOGGER):
        logging.getLogger(name).setLevel(level)


CLIENT_LINE_INTERVAL = 30.0
"""Seconds between two lines of the Kafka client when quiet: during an outage it
reports every reconnect attempt, several a second; the sinks say once per retry
what is waiting."""


class OncePer(logging.Filter):
    """Lets one record through per ``interval`` seconds; the next one says how many
    were held back meanwhile."""

    def __init__(self, interval: float, clock: Any = None) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock or time.monotonic
        self._next = 0.0
        self._held = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            now = self._clock()
            if now < self._next:
                self._held += 1
                return False
            self._next = now + self.interval
            held, self._held = self._held, 0
        if held:
            record.msg = f"{record.getMessage()} ({held} more client line(s) held back)"
            record.args = None
        return True


def kafka_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A confluent-kafka client configuration whose log lines go through Python logging.

    Without a ``logger``, librdkafka prints ``%4|...`` lines straight to stderr,
    whatever the level; with one, they become records of ``LIBRDKAFKA_LOGGER``.
    Producers and consumers hand them over in ``poll()``/``flush()``. In a Spark
    worker, where the clients are made, this also applies the application's
    ``set_verbose`` choice to the other clients' loggers. Quiet, the client's lines
    are at most one per ``CLIENT_LINE_INTERVAL``.
    """
    if VERBOSE_ENV in os.environ:
        route_client_logs()
    librdkafka = logging.getLogger(LIBRDKAFKA_LOGGER)
    librdkafka.setLevel(client_log_level())
    for held in [f for f in librdkafka.filters if isinstance(f, OncePer)]:
        librdkafka.removeFilter(held)
    if not verbose():
        librdkafka.addFilter(OncePer(CLIENT_LINE_INTERVAL))
    return {**settings, "logger": librdkafka}


def spark_log_level() -> str:
    """Spark's own log level: ERROR, or WARN when verbose."""
    return "WARN" if verbose() else "ERROR"


def spark_java_options() -> str:
    """JVM options that make Spark log through ``LOG4J2_CONFIG`` at ``spark_log_level()``
    (and start it from its class archive, when there is one, with the user's own
    options after: ``dbus_spark.config.jvm``)."""
    return (
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()} "
        f"-Ddbus.spark.level={spark_log_level().lower()} {jvm.java_options()} "
        f"{shlex.join(jvm.added_options())}"
    ).strip()


def launch_gateway(conf: SparkConf) -> JavaGateway | None:
    """Start Spark's JVM with its stderr filtered of start-up noise; ``None`` if not ours to start.

    Verbose, or under ``spark-submit`` (which started the JVM already), pyspark
    starts it as usual. Otherwise everything the JVM writes to stderr still
    reaches this process's stderr, less the lines in ``_JVM_NOISE``.
    """
    if verbose() or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    from pyspark.java_gateway import launch_gateway as launch

    read_end, write_end = os.pipe()
    threading.Thread(
        target=_forward_stderr, args=(read_end,), name="dbus-spark-stderr", daemon=True
    ).start()
    try:
        return launch(conf, popen_kwargs={"stderr": write_end})
    except Exception as failed:
        _close_jvm_stdin(failed)
        raise
    finally:
        os.close(write_end)


def _close_jvm_stdin(failed: BaseException) -> None:
    """Close the stdin pipe of a JVM pyspark started and gave up on (it exited before
    sending its port): pyspark's launch leaves it open, held by ``failed``'s frames."""
    for frame, _ in traceback.walk_tb(failed.__traceback__):
        for value in frame.f_locals.values():
            if isinstance(value, subprocess.Popen) and value.stdin is not None:
                value.stdin.close()


def _forward_stderr(read_end: int, out: int = 2) -> None:
    with open(read_end, "rb") as pipe:
        for line in pipe:
            if not line.startswith(_JVM_NOISE):
                os.write(out, line)
