"""The runtime's listeners hear each micro-batch of a real streaming query through the
event's JSON (``dbus_spark.spark.query_listener``), with what they read of it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from support import wait_for

from dbus_spark.spark.query_listener import add_listener

pytestmark = pytest.mark.e2e


class _Heard:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self._lock = threading.Lock()

    def onQueryProgress(self, event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def with_rows(self, query_id: str) -> list[Any]:
        with self._lock:
            return [e for e in self.events
                    if str(e.progress.id) == query_id and e.progress.numInputRows]  # fmt: skip


def test_a_listener_hears_each_batch_with_its_id_rows_offsets_and_json(spark: Any) -> None:
    heard = _Heard()
    remove = add_listener(spark, heard)
    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 20).load()
        .writeStream.format("noop").trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        events = wait_for(lambda: (found := heard.with_rows(str(query.id)))[1:] and found,
                          120, "two batches with rows heard")  # fmt: skip
    finally:
        query.stop()
        remove()
    first, second = events[0].progress, events[1].progress
    assert second.batchId > first.batchId
    assert str(first.runId) == str(query.runId)
    # What the cluster member commits: the source's end offset, as JSON.
    [source] = second.sources
    assert json.loads(source.endOffset) == json.loads(source.json)["endOffset"]
    assert json.loads(source.endOffset) > json.loads(first.sources[0].endOffset)
    # What the metrics take: the whole progress, with Spark's phase durations.
    report = json.loads(second.json)
    assert report["batchId"] == second.batchId
    assert report["numInputRows"] == second.numInputRows > 0
    assert "triggerExecution" in report["durationMs"]
    # An event posted before the removal may still reach it; a later query's never do.
    started = spark.readStream.format("rate").load().writeStream.format("noop").start()
    try:
        wait_for(lambda: started.lastProgress, 120, "a batch after the listener was removed")
    finally:
        started.stop()
    later = [e for e in heard.events if str(e.progress.id) == str(started.id)]
    assert not later, "a removed listener hears nothing of a later query"
