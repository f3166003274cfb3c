"""How the runtime's listeners hear of each micro-batch Spark reports done: its progress
crosses from the JVM as JSON, in one call.

pyspark's own bridge (``JStreamingQueryListener``) builds a progress field by field
over py4j, and walks each of its maps (durations, event times, every source's and
the sink's metrics) with a Java iterator that ends by throwing. pyspark turns each
such exception into a Python one by asking the JVM whether it is one of a dozen
classes, each ask a class lookup by partial names that scans the classpath. On a
runtime under a trickle of changes, that was 8 % of a core on Spark's listener
thread at one batch every two seconds. Spark's events carry their own JSON
(``json()``), from which pyspark builds the same progress object it hands a
listener. The other events (started, idle, terminated) are not read at all: no
listener of the runtime needs them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import QueryProgressEvent

from dbus_spark.spark.session import java_class

_WRAPPER = "org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper"


class ProgressListener(Protocol):
    """What a listener of the runtime takes: each micro-batch's progress event."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None: ...


class _JsonEvents:
    """The Java side's listener (``PythonStreamingQueryListener``), handing each
    progress event, read as its JSON, to ``listener``."""

    def __init__(self, listener: ProgressListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        pass

    def onQueryProgress(self, jevent: Any) -> None:
        self._listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        pass

    def onQueryTerminated(self, jevent: Any) -> None:
        pass

    class Java:
        implements: ClassVar[list[str]] = [
            "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
        ]


def add_listener(spark: SparkSession, listener: ProgressListener) -> Callable[[], None]:
    """Have ``listener`` hear of every micro-batch of ``spark``'s streaming queries; what
    removes it again."""
    context = spark.sparkContext
    assert context._gateway is not None
    ensure_callback_server_started(context._gateway)  # the JVM calls the listener back
    wrapper = java_class(context, _WRAPPER)(_JsonEvents(listener))
    streams = spark._jsparkSession.streams()
    streams.addListener(wrapper)
    return lambda: streams.removeListener(wrapper)
