"""A source whose server (or Kafka brokers) stops answering stops neither the runtime nor
its other sources.

A runtime reads two sources: the shared MariaDB and a MySQL of the test's own, each
with a deployment of its own. The MySQL server is stopped: the MariaDB source's
changes still reach Kafka and the runtime keeps running; the server is started
again: a change written to it reaches Kafka, and the runtime's other source goes
on. The same holds for a Kafka source whose own broker is stopped and started again,
and a Kafka read task waits for its broker rather than failing the batch.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from scratch import scratch_database
from support import FIRST_BATCH, kafka_ids, route_code, runtime_api, wait_for

from dbus_deploy.services import down, status, up

pytestmark = [pytest.mark.e2e]

def _deployment(scratch: Scratch, name: str, table: str, topic: str, source: str) -> Path:
    folder = Path(scratch.function_folder(name, route_code(table, f"kafka://{topic}"), [table]))
    manifest = folder / "dbus.toml"
    manifest.write_text(manifest.read_text() + f'sources = ["{source}"]\n')
    return folder


def _two_sources(scratch: Scratch, folders: list[Path], other: str) -> subprocess.Popen[bytes]:
    """A runtime of both deployments over the shared MariaDB and ``other`` (``NAME=URL``)."""
    checkpoint = str(scratch.tmp_path / "checkpoint")
    return spawn_cli_runtime(scratch, folders[0], checkpoint, "--functions", str(folders[1]),
                             "--source", other)  # fmt: skip


def _insert(database: Any, *ids: int) -> None:
    with database.connect() as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s)", (i,))


def _signal(other: Any, sig: signal.Signals) -> None:
    """Send ``sig`` to the private MySQL server of ``other`` (its services)."""
    [mysql] = status(["mysql"], config=other.config)
    assert mysql.pid is not None, "the private MySQL runs"
    os.kill(mysql.pid, sig)


FAULTS = {
    "stopped": (lambda other: down(["mysql"], config=other.config),
                lambda other: up(["mysql"], config=other.config)),
    # SIGSTOP: the server hangs, refusing nothing (its questions wait, not fail).
    "paused": (lambda other: _signal(other, signal.SIGSTOP),
               lambda other: _signal(other, signal.SIGCONT)),
}  # fmt: skip


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_stopped_source_server_leaves_the_runtime_and_its_other_sources_running(
    scratch: Scratch, private_services: Any, fault: str
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    other = private_services("mysql")
    stop, start = FAULTS[fault]
    topics = {"shop": scratch.kafka_topic, "other": f"{scratch.kafka_topic}.other"}
    with scratch_database(other.endpoints.mysql) as theirs:
        databases = {"shop": scratch.fresh_database, "other": theirs}
        folders = []
        for source, database in databases.items():
            with database.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            table = f"{database.name}.t"
            folders.append(_deployment(scratch, f"to_{source}", table, topics[source], source))
        runtime = _two_sources(scratch, folders, f"other={theirs.endpoint.dsn}")
        try:
            runtime_api(scratch.tmp_path / "checkpoint")
            for database in databases.values():
                _insert(database, 1)
            for source, topic in topics.items():
                assert kafka_ids(bootstrap, topic, 1, within=FIRST_BATCH) == [1], (
                    f"{source}'s first change"
                )

            stop(other)
            log = scratch.tmp_path / "runtime.log"
            outage = "its changes wait, the other sources go on"
            # A hung server holds the planner's question up to the reader's query
            # timeout (30 s): the next batch comes that much later.
            wait_for(lambda: outage in log.read_text(errors="replace"), 120,
                     "the planner notes that the server does not answer")  # fmt: skip
            _insert(scratch.fresh_database, 2, 3)
            going = _arrived(bootstrap, topics["shop"], {1, 2, 3}, within=120)
            assert going == {1, 2, 3}, "the other source's changes go on meanwhile"
            # Read between batches, the changes wait for the next one's task, however
            # late: nothing is sent again.
            assert kafka_ids(bootstrap, topics["shop"], 4, within=10) == [1, 2, 3]
            assert runtime.poll() is None, "the runtime keeps running"

            start(other)
            _insert(theirs, 2)
            _insert(scratch.fresh_database, 4)
            # At least once: a read carried across batches may send a change again.
            back = _arrived(bootstrap, topics["other"], {1, 2}, within=60)
            assert back == {1, 2}, "the server is back: the change written then arrives"
            assert _arrived(bootstrap, topics["shop"], {1, 2, 3, 4}) == {1, 2, 3, 4}
            text = log.read_text(errors="replace")
            assert "'other'" in text and outage in text
            assert "source 'other' answers again" in text
            assert runtime.poll() is None
        finally:
            start(other)  # whatever failed: the scratch database is dropped on a server
            stop_cli_runtime(scratch, runtime)


def _arrived(bootstrap: str, topic: str, wanted: set[int], within: float = 30.0) -> set[int]:
    """The ids ``topic`` holds once it holds every one ``wanted`` (or ``within`` passed),
    each counted once."""
    found: set[int] = set()

    def complete() -> bool:
        found.update(kafka_ids(bootstrap, topic, 1000, within=2))
        return found >= wanted

    wait_for(complete, within, f"{sorted(wanted)} in {topic}")
    return found


def _relay(bootstrap: str, topic: str, *ids: int) -> None:
    """Write changes of ``shop.t`` to ``topic`` as another dbus would (its CloudEvents)."""
    from datetime import UTC, datetime

    from confluent_kafka import Producer

    from dbus_fn.events import BinlogPosition, Operation, RowChange
    from dbus_fn.kafka_binding import to_kafka_message

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in ids:
        change = RowChange(
            source="dc2", database="shop", table="t", op=Operation.INSERT, before=None,
            after={"id": i}, primary_key=("id",), position=BinlogPosition("bin.000001", 100 * i),
            commit_time=datetime.now(UTC), server_id="7", column_types={"id": "int"},
        )  # fmt: skip
        message = to_kafka_message(change)
        producer.produce(topic, key=message.key, value=message.value, headers=message.headers)
    assert producer.flush(30) == 0, "the relayed changes reach the other cluster"


def test_a_kafka_source_whose_brokers_stop_leaves_the_runtime_and_its_other_sources_running(
    scratch: Scratch, private_services: Any
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    other = private_services("kafka")
    theirs = other.endpoints.kafka.bootstrap_servers
    relayed = f"dc2.shop.{scratch.kafka_topic}"
    topics = {"shop": scratch.kafka_topic, "dc2": f"{scratch.kafka_topic}.dc2"}
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    _relay(theirs, relayed, 1)  # the topic exists before the runtime checks it
    folders = [
        _deployment(scratch, "to_shop", f"{scratch.fresh_database.name}.t", topics["shop"],
                    "shop"),
        _deployment(scratch, "to_dc2", "shop.t", topics["dc2"], "dc2"),
    ]  # fmt: skip
    runtime = _two_sources(scratch, folders, f"dc2=kafka://{theirs}/{relayed}")
    try:
        runtime_api(scratch.tmp_path / "checkpoint")
        _insert(scratch.fresh_database, 1)
        _relay(theirs, relayed, 2)
        first = kafka_ids(bootstrap, topics["shop"], 1, within=FIRST_BATCH)
        assert first == [1], "the binlog source's change"
        assert kafka_ids(bootstrap, topics["dc2"], 1, within=FIRST_BATCH) == [2], (
            "the Kafka source's change"
        )

        down(["kafka"], config=other.config)
        log = scratch.tmp_path / "runtime.log"
        outage = "its changes wait, the other sources go on"
        wait_for(lambda: outage in log.read_text(errors="replace"), 90,
                 "the planner notes that the Kafka source does not answer")  # fmt: skip
        _insert(scratch.fresh_database, 2, 3)
        assert kafka_ids(bootstrap, topics["shop"], 3) == [1, 2, 3], (
            "the binlog source's changes go on while the Kafka source's brokers are stopped"
        )
        assert runtime.poll() is None, "the runtime keeps running"

        up(["kafka"], config=other.config)
        _relay(theirs, relayed, 3)
        _insert(scratch.fresh_database, 4)
        # At least once: a read carried across batches may send a change again.
        back = _arrived(bootstrap, topics["dc2"], {2, 3}, within=90)
        assert back == {2, 3}, "the brokers are back: the change relayed then arrives"
        assert _arrived(bootstrap, topics["shop"], {1, 2, 3, 4}) == {1, 2, 3, 4}
        text = log.read_text(errors="replace")
        assert "source 'dc2': Kafka at" in text and "source 'dc2' answers again" in text
        assert runtime.poll() is None
    finally:
        stop_cli_runtime(scratch, runtime)


def test_a_kafka_read_waits_for_its_brokers_to_come_back(
    private_services: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read task's part of a topic whose brokers stop before it has read it all waits
    for them past the time it gives a partition that answers but gives nothing (made
    15 s here), and then reads the rest, rather than failing the micro-batch, and with
    it the runtime."""
    import threading

    from dbus_spark.config.kafka_source import parse_kafka_source
    from dbus_spark.reads import kafka_read
    from dbus_spark.reads.kafka_read import KafkaRange, read_messages

    monkeypatch.setattr(kafka_read, "QUIET_SECONDS", 15.0)
    other = private_services("kafka")
    theirs = other.endpoints.kafka.bootstrap_servers
    topic = "dc2.shop.t"
    _relay(theirs, topic, 1, 2, 3)
    source = parse_kafka_source("dc2", f"kafka://{theirs}/{topic}")
    down(["kafka"], config=other.config)
    read: list[Any] = []
    failed: list[BaseException] = []

    def reading() -> None:
        try:
            read.extend(read_messages(source, KafkaRange(None, "dc2", topic, 0, 0, 3)))
        except BaseException as exc:  # the test's verdict, below
            failed.append(exc)

    reader = threading.Thread(target=reading, daemon=True)
    reader.start()
    reader.join(20)
    assert reader.is_alive() and not failed, f"the read waits for the brokers ({failed})"
    up(["kafka"], config=other.config)
    reader.join(120)
    assert not reader.is_alive() and not failed, f"the read ended once they were back ({failed})"
    assert [message.offset() for message in read] == [0, 1, 2]
