"""Sinks that do not answer name the deployment within the detach bound: a Kafka broker
or an Elasticsearch node nothing listens for, beside the real broker that answers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from support import Proxy, free_port
from test_runtime_config import _config

from dbus_fn.errors import KafkaSinkError
from dbus_fn.testing import insert
from dbus_spark.sinks.batch_commit import TaskReport
from dbus_spark.sinks.elasticsearch import ElasticsearchSink, ElasticsearchSinkError
from dbus_spark.sinks.kafka import KafkaSink
from dbus_spark.sinks.writer import WorkerSinks
from dbus_spark.stage.documents import index_action
from dbus_spark.stage.functions import StageRecord
from dbus_spark.state.records import KafkaRecord


def _record(topic: str) -> KafkaRecord:
    return KafkaRecord(topic, b"[1]", b"{}")


def test_a_broker_nobody_answers_for_is_named_within_the_bound() -> None:
    sink = KafkaSink(f"127.0.0.1:{free_port()}")
    sink.block_for = 1.0
    began = time.monotonic()
    with pytest.raises(KafkaSinkError, match="did not list its topics"):
        sink.write(_record("t"), "a")  # the topic's first write asks for the topics
    assert time.monotonic() - began < 10
    sink.ensure_topics = lambda topics: None  # type: ignore[method-assign]
    sink.write(_record("t"), "a")
    sink.write(_record("t"), "b")
    began = time.monotonic()
    sent, failed = sink.settle(1.0)
    assert time.monotonic() - began < 5
    assert sent == 0 and set(failed) == {"a", "b"}
    assert "did not acknowledge 1 message(s) within 1s" in failed["a"]
    assert sink.settle(1.0) == (0, {})  # purged: nothing holds the next one


def test_a_broker_nobody_answers_for_counts_as_retries_before_any_flush_waits() -> None:
    sink = KafkaSink(f"127.0.0.1:{free_port()}")
    sink.ensure_topics = lambda topics: None  # type: ignore[method-assign]
    sink.write(_record("t"), "a")
    assert sink.activity.to_json()["in_flight"] == 1
    sink.settle(1.0)  # shorter than a flush waits before it counts a retry (5 s)
    assert sink.activity.retries >= 1, "the client's lost connection is a retry"


def test_an_elasticsearch_nobody_answers_for_raises_within_the_bound() -> None:
    sink = ElasticsearchSink(f"http://127.0.0.1:{free_port()}", on_refused=print, bulk_actions=1)
    began = time.monotonic()
    with pytest.raises(ElasticsearchSinkError, match="within 1s"):
        sink.write(index_action(insert("shop.orders", id=1), "orders"), within=1.0)
    assert time.monotonic() - began < 10
    sink.drop()
    assert sink.flush(within=1.0) == 0


def test_an_elasticsearch_back_within_the_bound_takes_the_write_it_was_retrying(
    elasticsearch_service: Any, es_index: str
) -> None:
    from elasticsearch import Elasticsearch

    proxy = Proxy(elasticsearch_service.url.removeprefix("http://"))
    try:
        proxy.cut()
        sink = ElasticsearchSink(f"http://127.0.0.1:{proxy.port}", on_refused=print,
                                 bulk_actions=1)  # fmt: skip
        back = threading.Timer(2.0, proxy.restore)
        back.start()
        sink.write(index_action(insert("shop.orders", id=1), es_index), within=60.0)
        back.join()
        assert sink.activity.retries >= 1  # it was away, and tried again until back
        assert sink.flush(within=5.0) == 1  # acknowledged
        with Elasticsearch(elasticsearch_service.url) as client:
            client.indices.refresh(index=es_index)
            assert client.count(index=es_index)["count"] == 1
    finally:
        proxy.close()


def test_one_deployment_s_unreachable_elasticsearch_leaves_the_other_s_kafka_acknowledged(
    kafka_service: Any, kafka_topic: str
) -> None:
    config = _config(kafka=kafka_service.bootstrap_servers,
                     elasticsearch=f"http://127.0.0.1:{free_port()}", detach_after=1.0)  # fmt: skip
    sinks = WorkerSinks(config)
    sinks.pace(True)
    report = TaskReport()
    for i in range(1, 4):
        change = insert("shop.orders", id=i)
        sinks.deliver(StageRecord("to_kafka", _record(kafka_topic)), "shop", report)
        sinks.deliver(StageRecord("to_es", index_action(change, "orders")), "shop", report)
    began = time.monotonic()
    failed = sinks.settle(report, began)
    assert set(failed) == {"to_es"} and "Elasticsearch" in failed["to_es"]
    assert report.kafka == 3 and report.elasticsearch == 0
    assert time.monotonic() - began < 10
    # Unbounded (one deployment alone), a flush is waited for as before.
    sinks.pace(False)
    sinks.deliver(StageRecord("to_kafka", _record(kafka_topic)), "shop", report)
    assert sinks.settle(report, time.monotonic()) == {} and report.kafka == 4


def test_an_unpaced_task_waits_whatever_bound_a_paced_one_left_in_its_worker() -> None:
    config = _config(kafka=f"127.0.0.1:{free_port()}", detach_after=1.0)
    sinks = WorkerSinks(config)
    sinks.pace(True)
    assert sinks.within == 1.0 and sinks.kafka.block_for == 1.0
    report = TaskReport()
    sinks.pace(False)  # a task of one deployment alone, in the same worker
    assert sinks.settle(report, time.monotonic()) == {}
    assert report.records == 0
    assert sinks.within is None and sinks.kafka.block_for is None
