"""Exactly once into Kafka, against the real broker: a lane's changes written again (a
batch read again after a kill, a task tried again, a source moved) reach a
``read_committed`` consumer once, because each transaction carries how far its lanes
go (``dbus_spark.sinks.kafka_positions``) and a sink drops what a lane's mark is past.

The kills are real: a writer process is SIGKILLed with a transaction open, and the
broker ends that transaction (at once for a writer with the same transactional id,
else at its timeout).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from elasticsearch import Elasticsearch
from support import es_count
from test_kafka_fencing import SCAN, TIMEOUT, Hold, read, wrap_produce

from dbus_deploy.services import KafkaEndpoint
from dbus_fn.events import BinlogPosition, Operation, RowChange
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.sinks.batch_commit import TaskReport
from dbus_spark.sinks.kafka import KafkaSink, WriteFence
from dbus_spark.sinks.kafka_positions import (
    POSITIONS_TOPIC,
    Lane,
    MarkReader,
    mark_record,
    scope_of,
)
from dbus_spark.sinks.writer import WorkerSinks
from dbus_spark.stage.functions import StageRecord
from dbus_spark.state.checkpoint import checkpoint_incarnation
from dbus_spark.state.records import IndexAction, KafkaRecord

pytestmark = pytest.mark.integration


@pytest.fixture
def make_sink(kafka_service: KafkaEndpoint) -> Iterator[Callable[..., KafkaSink]]:
    sinks: list[KafkaSink] = []

    def make(transactional_id: str | None = None) -> KafkaSink:
        fence = WriteFence(
            transactional_id=transactional_id or f"dbus-test-{uuid.uuid4().hex}",
            transaction_timeout=TIMEOUT,
            hold_seconds=0.0,
            confirm=Hold("held"),
        )
        sink = KafkaSink(kafka_service.bootstrap_servers, fence=fence)
        sink.hold("shop", 1)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.close()


@pytest.fixture
def lane() -> Lane:
    return Lane(f"standalone/test-{uuid.uuid4().hex[:8]}", "orders", "shop")


def changes(topic: str, lane: Lane, orders: range, per_change: int = 1) -> list[tuple]:
    """(record, mark) for each change of ``orders``, ``per_change`` records each (a
    change routed to several topics, or with a dead letter)."""
    return [
        (KafkaRecord(topic, b"k%d" % (order % 5), f"{order}.{i}".encode()), (lane, order))
        for order in orders
        for i in range(per_change)
    ]


def write(sink: KafkaSink, written: list[tuple]) -> None:
    for record, mark in written:
        sink.write(record, "orders", mark)


def committed_marks(settings: dict[str, str], *, timeout: float) -> dict[bytes, int]:
    """Per lane key, its committed mark: the positions topic read whole, once."""
    reader = MarkReader(settings)
    try:
        return reader.read(timeout=timeout)
    finally:
        reader.close()


@contextmanager
def lanes_task(config: RuntimeConfig) -> Iterator[tuple[WorkerSinks, TaskReport]]:
    """A standalone runtime's read task of source ``shop`` in lanes (its worker's sinks
    for ``config``); what the body delivered is settled as it ends."""
    sinks = WorkerSinks(config)
    try:
        sinks.pace(False)
        sinks.hold("shop", 0)
        sinks.start("")
        report = TaskReport()
        yield sinks, report
        sinks.settle(report, 0.0)
    finally:
        sinks.release()


def settings(kafka: KafkaEndpoint) -> dict[str, str]:
    return {"bootstrap.servers": kafka.bootstrap_servers}


def test_a_lane_written_again_after_its_commit_reaches_the_consumer_once(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """Killed between the Kafka commit and Spark's: the batch is read again by a new
    runtime (a new sink, a new transactional id) and goes on past where it was."""
    first = make_sink()
    write(first, changes(kafka_topic, lane, range(1, 101)))
    assert first.flush() == 100
    assert committed_marks(settings(kafka_service), timeout=30)[lane.key] == 100

    again = make_sink()
    again.refresh_marks()  # a task begins
    write(again, changes(kafka_topic, lane, range(1, 151)))
    assert again.flush() == 50
    assert again.already == 100
    values = read(kafka_service.bootstrap_servers, kafka_topic)
    assert sorted(values) == sorted(f"{o}.0".encode() for o in range(1, 151))
    assert committed_marks(settings(kafka_service), timeout=30)[lane.key] == 150


def test_a_changes_records_never_straddle_two_transactions(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A transaction due to commit between two records of one change waits for the
    change's last: its mark then covers all of them, and a read again sends none."""
    monkeypatch.setattr("dbus_spark.sinks.kafka.CHUNK_RECORDS", 2)
    sink = make_sink()
    write(sink, changes(kafka_topic, lane, range(1, 4), per_change=3))
    # Due after two records, committed at each change's boundary: changes 1 and 2 so far.
    assert committed_marks(settings(kafka_service), timeout=30)[lane.key] == 2
    sink.refresh_marks()  # the task fails; its open transaction (change 3) is aborted
    write(sink, changes(kafka_topic, lane, range(1, 4), per_change=3))
    assert sink.flush() == 6 + 3  # committed since the last flush: changes 1 and 2, then 3
    assert sink.already == 6
    values = read(kafka_service.bootstrap_servers, kafka_topic)
    assert sorted(values) == sorted(f"{o}.{i}".encode() for o in range(1, 4) for i in range(3))


def test_a_send_that_failed_inside_a_change_loses_none_of_the_changes_records(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A record the client did not take (an error of its own, injected: the broker
    makes none on demand) sends the open transaction again with it and commits it,
    inside its change: the change's records that follow still go, once."""
    sink = make_sink()
    failed: list[bytes] = []

    def produce(real: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        if args[0] == kafka_topic and kwargs.get("value") == b"2.1" and not failed:
            failed.append(kwargs["value"])
            raise KafkaException(KafkaError(KafkaError._STATE, "not taken"))
        real(*args, **kwargs)

    wrap_produce(sink, monkeypatch, produce)
    write(sink, changes(kafka_topic, lane, range(1, 4), per_change=3))
    sink.flush()
    assert failed == [b"2.1"]
    assert sink.already == 0
    values = read(kafka_service.bootstrap_servers, kafka_topic)
    assert sorted(values) == sorted(f"{o}.{i}".encode() for o in range(1, 4) for i in range(3))
    assert committed_marks(settings(kafka_service), timeout=30)[lane.key] == 3


def test_a_lane_read_at_a_position_is_followed_once_and_names_that_position(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """A history chunk's records share one order: read again at a later position once
    they are committed, none goes again, and the position they were read at stands."""
    chunk = [(KafkaRecord(kafka_topic, b"k%d" % key, b"%d" % key), (lane, 0)) for key in range(20)]
    first = make_sink()
    first.refresh_marks()
    first.read_at(lane, {"file": "binlog.000001", "pos": 400})
    assert first.committed_at(lane) is None
    write(first, chunk)
    assert first.flush() == 20
    assert first.committed_at(lane) == {"file": "binlog.000001", "pos": 400}

    again = make_sink()  # the batch read again by the next runtime
    again.refresh_marks()
    again.read_at(lane, {"file": "binlog.000001", "pos": 900})
    write(again, chunk)
    assert again.flush() == 0
    assert again.already == 20
    assert again.committed_at(lane) == {"file": "binlog.000001", "pos": 400}
    assert len(read(kafka_service.bootstrap_servers, kafka_topic)) == 20


def test_lanes_are_apart(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """Another deployment of the source, the same deployment of another source, and
    the same names in another runtime (a second checkpoint on one Kafka: its own
    database and binlog), each have their own mark."""
    other_deployment = Lane(lane.scope, f"{lane.deployment}-b", lane.source)
    other_source = Lane(lane.scope, lane.deployment, "warehouse")
    other_runtime = Lane(f"{lane.scope}-b", lane.deployment, lane.source)
    first = make_sink()
    write(first, changes(kafka_topic, lane, range(1, 11)))
    write(first, changes(kafka_topic, other_deployment, range(1, 4)))
    first.flush()
    again = make_sink()
    write(again, changes(kafka_topic, other_deployment, range(1, 11)))
    write(again, changes(kafka_topic, other_source, range(1, 11)))
    write(again, changes(kafka_topic, other_runtime, range(1, 6)))
    assert again.flush() == 7 + 10 + 5
    marks = committed_marks(settings(kafka_service), timeout=30)
    assert [marks[x.key] for x in (lane, other_deployment, other_source, other_runtime)] == [
        10, 10, 10, 5,
    ]  # fmt: skip


WRITER_TIMEOUT = 10.0
"""The killed writer's transaction timeout, seconds."""
WRITER = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import dbus_spark.sinks.kafka as kafka
    from dbus_spark.sinks.kafka import KafkaSink, WriteFence
    from dbus_spark.sinks.kafka_positions import Lane
    from dbus_spark.state.records import KafkaRecord

    bootstrap, topic, scope, deployment, transactional_id, ready, where = sys.argv[1:]
    kafka.CHUNK_SECONDS = 600.0  # one transaction for 1..100, one for 101..200
    fence = WriteFence(transactional_id, %(timeout)r, 0.0, lambda s, e: time.monotonic())
    sink = KafkaSink(bootstrap, fence=fence)
    sink.hold("shop", 1)
    lane = Lane(scope, deployment, "shop")
    for order in range(1, 201):
        sink.write(KafkaRecord(topic, b"k%%d" %% (order %% 5), b"%%d" %% order), "orders",
                   (lane, order))
        if order == 100:
            sink.flush()  # 1..100 committed
    sink._producer.flush(10)  # 101..200 written, their transaction open
    if where == "committed":  # and committed: killed before the batch is recorded
        sink.flush()
    elif where == "committing":  # killed while its commit is on its way
        threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGKILL)).start()
        sink.flush()
        time.sleep(600)
    open(ready, "w").close()
    time.sleep(600)
    """
)


@pytest.mark.parametrize(
    ("where", "same_id"),
    [("open", True), ("open", False), ("committed", True), ("committing", True)],
    ids=["in-a-transaction", "in-a-transaction-new-id", "after-the-commit", "in-the-commit"],
)
def test_a_writer_killed_at_each_point_of_a_transaction_is_followed_exactly_once(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane, tmp_path: Path, where: str, same_id: bool,
) -> None:  # fmt: skip
    """kill -9 of a writer that committed changes 1..100, with 101..200 in a
    transaction that is open, committed (the kill between the Kafka commit and the
    batch's record), or on its way to commit. The next writer gets 1..250 again and
    sends exactly what was not committed: none of the open transaction is ever seen.
    With the same transactional id, its new producer aborts an open transaction at
    once; with another, the broker does at the transaction's timeout, and until then
    a ``read_committed`` consumer sees nothing past it (it is waited for here)."""
    transactional_id = f"dbus-test-{uuid.uuid4().hex}"
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER % {"timeout": WRITER_TIMEOUT},
         kafka_service.bootstrap_servers, kafka_topic, lane.scope, lane.deployment,
         transactional_id, str(ready), where],
        env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and writer.poll() is None:
            assert time.monotonic() < deadline, "the writer did not get its transaction open"
            time.sleep(0.1)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert writer.returncode == -signal.SIGKILL
    sink = make_sink(transactional_id if same_id else None)
    began = time.monotonic()
    sink.refresh_marks()
    write(sink, changes(kafka_topic, lane, range(1, 251)))
    waited = time.monotonic() - began
    sent = sink.flush()
    committed = {"open": 100, "committed": 200}.get(where, sink.already)
    assert (sink.already, sent) == (committed, 250 - committed)
    assert committed in (100, 200)
    expected = [str(o).encode() for o in range(1, committed + 1)] + [
        f"{o}.0".encode() for o in range(committed + 1, 251)
    ]
    values = read(kafka_service.bootstrap_servers, kafka_topic)
    until = time.monotonic() + WRITER_TIMEOUT + 20
    while not same_id and len(values) < len(expected) and time.monotonic() < until:
        time.sleep(1)  # the killed transaction is open until the broker aborts it
        values = read(kafka_service.bootstrap_servers, kafka_topic)
    assert sorted(values) == sorted(expected)
    if same_id:
        # An open transaction did not hold the new writer back until its timeout.
        assert waited < WRITER_TIMEOUT, waited


def test_the_mark_is_in_the_transaction_it_counts(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """An aborted transaction's mark is never seen: a read again sends its changes."""
    sink = make_sink()
    write(sink, changes(kafka_topic, lane, range(1, 6)))
    sink.refresh_marks()  # aborted, not committed
    assert lane.key not in committed_marks(settings(kafka_service), timeout=30)
    write(sink, changes(kafka_topic, lane, range(1, 6)))
    assert sink.flush() == 5
    assert sink.already == 0
    assert sorted(read(kafka_service.bootstrap_servers, kafka_topic)) == sorted(
        f"{o}.0".encode() for o in range(1, 6)
    )


def test_a_mark_message_says_its_lane_and_order() -> None:
    record = mark_record(Lane("cluster/eu", "orders", "shop"), 42)
    assert (record.topic, json.loads(record.key or b""), json.loads(record.value or b"")) == (
        POSITIONS_TOPIC, ["cluster/eu", "orders", "shop"], {"order": 42},
    )  # fmt: skip
    partition = mark_record(Lane("cluster/eu", "mirror", "dc2", "orders/3"), 7)
    assert json.loads(partition.key or b"") == ["cluster/eu", "mirror", "dc2", "orders/3"]


def test_a_new_clusters_first_lane_is_marked_and_followed_once(
    private_services: Callable[..., Any],
) -> None:
    """On a broker that never had a transaction nor a positions topic, the sink makes
    the topic, and its first commit's mark is read back by the next writer."""
    bootstrap = private_services("kafka").endpoints.kafka.bootstrap_servers
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    lane = Lane(f"standalone/test-{uuid.uuid4().hex[:8]}", "orders", "shop")
    sinks = []
    for _attempt in range(2):
        fence = WriteFence(f"dbus-test-{uuid.uuid4().hex}", TIMEOUT, 0.0, Hold("held"))
        sink = KafkaSink(bootstrap, fence=fence)
        sinks.append(sink)
        sink.hold("shop", 1)
        write(sink, changes(topic, lane, range(1, 21)))
        sink.flush()
    try:
        assert (sinks[0].already, sinks[1].already) == (0, 20)
        assert committed_marks({"bootstrap.servers": bootstrap}, timeout=30) == {lane.key: 20}
        assert sorted(read(bootstrap, topic)) == sorted(f"{o}.0".encode() for o in range(1, 21))
    finally:
        for sink in sinks:
            sink.close()


def test_a_broker_paused_past_the_transactions_timeout_gets_the_chunk_once(
    private_services: Callable[..., Any], lane: Lane,
) -> None:  # fmt: skip
    """The broker paused (SIGSTOP) past the transaction's timeout, which is also its
    messages': the chunk goes again from a new producer, and is seen once."""
    from dbus_deploy.services import status

    services = private_services("kafka")
    bootstrap = services.endpoints.kafka.bootstrap_servers
    [kafka] = status(["kafka"], config=services.config)
    assert kafka.pid is not None
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    timeout = 2.0  # the transaction's, and so its messages'
    fence = WriteFence(f"dbus-test-{uuid.uuid4().hex}", timeout, 0.0, Hold("held"))
    sink = KafkaSink(bootstrap, fence=fence)
    try:
        sink.hold("shop", 1)
        write(sink, changes(topic, lane, range(1, 3)))
        assert sink.flush() == 2
        first_producer = sink._producer
        os.kill(kafka.pid, signal.SIGSTOP)
        try:
            write(sink, changes(topic, lane, range(3, 13)))
            waker = threading.Timer(timeout * 2, os.kill, (kafka.pid, signal.SIGCONT))
            waker.start()
            assert sink.flush() == 10
        finally:
            os.kill(kafka.pid, signal.SIGCONT)
        assert sink._producer is not first_producer
        assert sorted(read(bootstrap, topic)) == sorted(f"{o}.0".encode() for o in range(1, 13))
        assert committed_marks({"bootstrap.servers": bootstrap}, timeout=30) == {lane.key: 12}
    finally:
        sink.close()


def test_a_writer_paused_past_its_transactions_timeout_sends_the_chunk_again_once(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """The writer starved (a loaded machine, a long pause) past its transaction's
    timeout with a lane's changes in it: the broker aborts the transaction and fences
    the producer, whose next step, adding the positions topic for the lane's mark,
    fails fatally (librdkafka raises it out of ``flush`` as a bare ``KafkaError``,
    which no ``except Exception`` sees). The chunk goes again from a new producer,
    and is seen once."""
    sink = make_sink()
    write(sink, changes(kafka_topic, lane, range(1, 21)))
    first_producer = sink._producer
    time.sleep(TIMEOUT + SCAN + 1.5)
    assert sink.flush() == 20
    assert sink._producer is not first_producer
    assert sorted(read(kafka_service.bootstrap_servers, kafka_topic)) == sorted(
        f"{o}.0".encode() for o in range(1, 21)
    )
    assert committed_marks(settings(kafka_service), timeout=30)[lane.key] == 20


class _TimedOut:
    """A delivery report's error: the client gave up waiting for the message."""

    def code(self) -> int:
        return KafkaError._MSG_TIMED_OUT

    def str(self) -> str:
        return "Local: Message timed out"


def test_a_message_that_timed_out_is_sent_again_from_a_new_producer(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A message the client gave up on may still reach the broker, and land in this
    producer's next transaction (librdkafka lacks KIP-890's protection): the chunk is
    sent again from a new producer, whose start fences the old one out. The timeout is
    injected (one delivery report says so; the broker cannot time out one message of a
    transaction apart from the transaction itself)."""
    sink = make_sink()
    write(sink, changes(kafka_topic, lane, range(1, 3)))
    assert sink.flush() == 2
    reported: list[int] = []

    def produce(real: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        if args[0] == kafka_topic and not reported:
            reported.append(1)  # not handed over: its report says it timed out
            kwargs["on_delivery"](_TimedOut(), _Message(args[0]))
            return
        real(*args, **kwargs)

    wrap_produce(sink, monkeypatch, produce)
    wrapped = sink._producer
    write(sink, changes(kafka_topic, lane, range(3, 8)))
    assert sink.flush() == 5
    assert reported == [1]
    assert sink._producer is not wrapped, "the chunk went again from the same producer"
    assert sorted(read(kafka_service.bootstrap_servers, kafka_topic)) == sorted(
        f"{o}.0".encode() for o in range(1, 8)
    )


class _Message:
    def __init__(self, topic: str) -> None:
        self._topic = topic

    def topic(self) -> str:
        return self._topic


def test_a_lanes_scope_is_its_cluster_or_its_standalone_runtimes_checkpoint() -> None:
    assert scope_of("/srv/a/checkpoint", "eu") == scope_of("/srv/b/checkpoint", "eu") == (
        "cluster/eu"
    )  # fmt: skip
    one, other = scope_of("/srv/a/checkpoint", None), scope_of("/srv/b/checkpoint", None)
    assert one.startswith("standalone/") and other.startswith("standalone/") and one != other
    assert scope_of("/srv/a/checkpoint", None) == one  # the same runtime after a restart
    # Another making of the same cluster, or of a checkpoint at the same path: lanes
    # of its own (the first making's marks are orders of another binlog history).
    made, remade = scope_of("/srv/a/checkpoint", "eu", "1f2e"), scope_of("/x", "eu", "9a0b")
    assert made == "cluster/eu/1f2e" and remade != made and made != scope_of("/x", "eu")
    begun, begun_again = scope_of("/srv/a/checkpoint", None, "1f2e"), scope_of(
        "/srv/a/checkpoint", None, "9a0b"
    )
    assert len({one, begun, begun_again}) == 3 and begun.startswith(one + "/")


def test_a_mark_reader_reads_on_from_where_it_stopped(
    make_sink: Callable[..., KafkaSink], kafka_topic: str, kafka_service: KafkaEndpoint,
    lane: Lane,
) -> None:  # fmt: skip
    """A sink reads the marks for every task: each read takes what was committed since
    the last, with the marks before it kept."""
    reader = MarkReader(settings(kafka_service))
    other = Lane(lane.scope, f"{lane.deployment}-b", lane.source)
    try:
        sink = make_sink()
        write(sink, changes(kafka_topic, lane, range(1, 4)))
        sink.flush()
        assert reader.read(timeout=30)[lane.key] == 3
        write(sink, changes(kafka_topic, lane, range(4, 6)))
        write(sink, changes(kafka_topic, other, range(1, 3)))
        sink.flush()
        marks = reader.read(timeout=30)
        assert (marks[lane.key], marks[other.key]) == (5, 2)
    finally:
        reader.close()


TASK = textwrap.dedent(
    """
    import os, signal, sys
    import dbus_spark.sinks.kafka as kafka
    from dbus_spark.config.runtime import RuntimeConfig
    from dbus_spark.sinks.batch_commit import TaskReport
    from dbus_spark.sinks.writer import WorkerSinks
    from dbus_spark.stage.functions import StageRecord
    from dbus_spark.state.records import IndexAction, KafkaRecord

    bootstrap, es_url, checkpoint, topic, index, first, last, kill = sys.argv[1:]
    kafka.CHUNK_SECONDS = 600.0  # one transaction, committed when the task settles
    if kill == "yes":  # after Elasticsearch took everything, before the Kafka commit
        kafka.KafkaSink.flush = lambda self: os.kill(os.getpid(), signal.SIGKILL)
    config = RuntimeConfig(
        sources=(), deployments=(), kafka_bootstrap=bootstrap, elasticsearch_url=es_url,
        checkpoint_dir=checkpoint, exactly_once_deployments=("orders",),
    )
    sinks = WorkerSinks(config)
    sinks.pace(False)
    sinks.hold("shop", 0)
    sinks.start("")
    report = TaskReport()
    for order in range(int(first), int(last) + 1):
        sinks.order = order
        for record in (KafkaRecord(topic, b"k%d" % order, b"%d" % order),
                       IndexAction(index, str(order), order, {"v": order})):
            sinks.deliver(StageRecord("orders", record), "shop", report)
    sinks.settle(report, 0.0)
    print(report.kafka, report.already, report.elasticsearch, flush=True)
    """
)


def test_a_task_killed_between_its_elasticsearch_flush_and_its_kafka_commit(
    kafka_topic: str, kafka_service: KafkaEndpoint, es_index: str,
    elasticsearch_service: Any, tmp_path: Path,
) -> None:  # fmt: skip
    """A standalone runtime's task (its worker's sinks, an exactly-once deployment)
    killed once Elasticsearch took its 50 changes and before their Kafka transaction
    committed; the task read again with 10 more changes, in a process of the same
    runtime (its checkpoint: its lanes, its write slot): Kafka gets every change once,
    and Elasticsearch ends with each document at its newest version."""
    checkpoint = str(tmp_path / "checkpoint")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def task(last: int, kill: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", TASK, kafka_service.bootstrap_servers,
             elasticsearch_service.url, checkpoint, kafka_topic, es_index, "1", str(last),
             kill],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    killed = task(50, "yes")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert es_count(elasticsearch_service.url, es_index) == 50
    again = task(60, "no")
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["60", "0", "60"]  # nothing of the killed one committed
    values = read(kafka_service.bootstrap_servers, kafka_topic)
    assert sorted(values) == sorted(str(o).encode() for o in range(1, 61))
    assert es_count(elasticsearch_service.url, es_index) == 60


def test_a_dead_letter_of_a_document_elasticsearch_refused_is_sent_once(
    kafka_topic: str, kafka_service: KafkaEndpoint, es_index: str,
    elasticsearch_service: Any, tmp_path: Path,
) -> None:  # fmt: skip
    """A document Elasticsearch refuses becomes a dead letter in a lane of its own, in
    the order of its change: the task read again (as after a kill before Spark's
    commit) sends neither the changes nor the letter again."""
    with Elasticsearch(elasticsearch_service.url) as es:
        # A mapping the documents can break: a name that is not a number is refused.
        es.indices.create(index=es_index, mappings={"properties": {"name": {"type": "long"}}})
    config = RuntimeConfig(
        sources=(), deployments=(), kafka_bootstrap=kafka_service.bootstrap_servers,
        elasticsearch_url=elasticsearch_service.url, checkpoint_dir=str(tmp_path / "cp"),
        exactly_once_deployments=("orders",),
    )  # fmt: skip
    dead = f"{kafka_topic}.dead"

    def task() -> TaskReport:
        with lanes_task(config) as (sinks, report):
            for order, name in enumerate(["12", "widget", "34"], start=1):
                change = RowChange(
                    source="shop", database="d", table="t", op=Operation.INSERT, before=None,
                    after={"id": order, "name": name}, primary_key=("id",),
                    position=BinlogPosition("binlog.000001", 100 * order),
                    commit_time=datetime.now(UTC), server_id="1",
                )  # fmt: skip
                sinks.order = order
                document = IndexAction(es_index, str(order), order, {"name": name})
                document = replace(document, dead_letter=dead, change=pickle.dumps(change))
                for record in (KafkaRecord(kafka_topic, b"%d" % order, name.encode()), document):
                    sinks.deliver(StageRecord("orders", record), "shop", report)
        return report

    first = task()
    assert (first.kafka, first.already) == (4, 0)  # three changes and the letter
    again = task()
    assert (again.kafka, again.already) == (0, 4)
    assert sorted(read(kafka_service.bootstrap_servers, kafka_topic)) == [b"12", b"34", b"widget"]
    [letter] = read(kafka_service.bootstrap_servers, dead)
    assert b'"widget"' in letter  # the refused change, in its dead letter


def test_a_checkpoint_begun_again_at_its_path_sends_its_changes_again(
    kafka_topic: str, kafka_service: KafkaEndpoint, tmp_path: Path,
) -> None:  # fmt: skip
    """A standalone runtime's checkpoint deleted and begun again at the same path (to
    read the binlog again, ``--from earliest``; or on another server whose positions
    lie before the first's): the first making's marks are not the new one's, so its
    changes are sent, where a restart of one making sends none of them twice."""
    checkpoint = tmp_path / "cp"
    base = RuntimeConfig(
        sources=(), deployments=(), kafka_bootstrap=kafka_service.bootstrap_servers,
        elasticsearch_url="http://127.0.0.1:9", checkpoint_dir=str(checkpoint),
        exactly_once_deployments=("orders",),
    )  # fmt: skip

    def run() -> tuple[int, int]:
        """A run's first task (its config as the runtime's start writes it): its three
        changes' records sent, and those a mark already had."""
        config = replace(base, incarnation=checkpoint_incarnation(str(checkpoint)))
        (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
        (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}\n")  # Spark planned a batch
        with lanes_task(config) as (sinks, report):
            for order in (1, 2, 3):
                sinks.order = order
                record = KafkaRecord(kafka_topic, b"%d" % order, b"%d" % order)
                sinks.deliver(StageRecord("orders", record), "shop", report)
        return report.kafka, report.already

    assert run() == (3, 0)
    assert run() == (0, 3)  # restarted: the same lanes
    shutil.rmtree(checkpoint)
    assert run() == (3, 0)  # begun again: lanes of its own
    assert sorted(read(kafka_service.bootstrap_servers, kafka_topic)) == sorted(
        [b"1", b"2", b"3"] * 2
    )
