"""A Kafka source's message that is not a change goes to the dead letters of the
deployments subscribed to the source, with its topic, partition and offset; the
changes around it are delivered. ``dbus fn replay`` reads the topic again from a
time, or from one partition's offset, into a shadow topic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from support import delete_topics, kafka_messages

from dbus_fn.kafka_binding import to_kafka_message
from dbus_fn.testing import insert

pytestmark = pytest.mark.e2e


def _folder(folder: Path, out: str) -> Path:
    folder.mkdir()
    (folder / "paid_copy.py").write_text(textwrap.dedent('''
        import dbus_fn as fn

        @fn.filter(tables="shop.orders")
        def paid(event: fn.RowChange) -> bool:
            return event.row["status"] == "paid"
    '''))  # fmt: skip
    (folder / "dbus.toml").write_text(textwrap.dedent(f"""
        name = "copy"
        version = "1.0.0"
        module = "paid_copy.py"
        sources = ["dc2"]
        tables = ["shop.orders"]
        default_route = "kafka://{out}"
        dead_letter_route = "kafka://{out}.dead"
    """))  # fmt: skip
    return folder


def test_a_message_that_is_no_change_is_a_dead_letter_and_the_rest_goes_on(
    kafka_service: Any, elasticsearch_service: Any, kafka_topic: str, tmp_path: Path
) -> None:
    bootstrap = kafka_service.bootstrap_servers
    out = f"{kafka_topic}-out"
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, change in ((0, insert("shop.orders", id=1, status="paid")), (0, None),
                              (1, insert("shop.orders", id=2, status="paid")),
                              (1, insert("shop.orders", id=3, status="open"))):  # fmt: skip
        if change is None:
            producer.produce(kafka_topic, key=b"k", value=b"not a CloudEvent", partition=0)
            continue
        message = to_kafka_message(change)
        producer.produce(kafka_topic, key=message.key, value=message.value,
                         headers=list(message.headers), partition=partition)  # fmt: skip
    producer.flush(30)
    log = (tmp_path / "runtime.log").open("wb")
    runtime = subprocess.Popen(
        [str(Path(sys.executable).parent / "dbus"), "runtime", "start",
         "--source", f"dc2=kafka://{bootstrap}/{kafka_topic}",
         "--functions", str(_folder(tmp_path / "copy", out)),
         "--kafka", bootstrap, "--elasticsearch", elasticsearch_service.url,
         "--checkpoint", str(tmp_path / "checkpoint"), "--from", "earliest",
         "--master", "local[2]", "--api", "127.0.0.1:0"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    checkpoint = ["--checkpoint", str(tmp_path / "checkpoint")]
    try:
        delivered = kafka_messages(bootstrap, out, 2, 120)
        dead = kafka_messages(bootstrap, f"{out}.dead", 1, 30)
        # Everything the topic keeps, from a time before it, through the function again.
        replayed = _replay("copy", "--from", "2020-01-01T00:00:00Z",
                           "--route", f"kafka://{out}.shadow", *checkpoint)  # fmt: skip
        shadow = kafka_messages(bootstrap, f"{out}.shadow", 2, 120)
        # One partition from an offset: partition 1 from its second message (id 3, open).
        _replay("copy", "--from", f"{kafka_topic}:1:1", "--route", f"kafka://{out}.shadow2",
                *checkpoint)  # fmt: skip
        time.sleep(15)  # the part runs in the next micro-batch; nothing may come
        shadow2 = kafka_messages(bootstrap, f"{out}.shadow2", 1, 5)
        _replay("copy", "--from", f"{kafka_topic}:0:0", "--route", f"kafka://{out}.shadow2",
                *checkpoint)  # fmt: skip
        shadow2 += kafka_messages(bootstrap, f"{out}.shadow2", 1, 120)
        refused = _replay("copy", "--from", f"{kafka_topic}:7:0", *checkpoint, code=2)
    finally:
        runtime.send_signal(signal.SIGTERM)
        runtime.wait(60)
        log.close()
        delete_topics(bootstrap, [out, f"{out}.dead", f"{out}.shadow", f"{out}.shadow2"])
    text = (tmp_path / "runtime.log").read_text(errors="replace")
    assert sorted(json.loads(m.key()) for m in delivered) == [[1], [2]], text[-3000:]
    [letter] = dead
    data = json.loads(letter.value())["data"]
    assert data["stage"] == "input" and data["function"] == f"kafka://dc2/{kafka_topic}"
    assert data["position"] == {"topic": kafka_topic, "partition": 0, "offset": 1}
    assert data["message"] == {"key": "k", "value": "not a CloudEvent"}
    assert "is not a CloudEvent" in data["error"]["message"]
    assert "started replaying 1 source(s)" in replayed, replayed
    assert sorted(json.loads(m.key()) for m in shadow) == [[1], [2]], text[-3000:]
    assert [json.loads(m.key()) for m in shadow2] == [[1]], text[-3000:]
    assert f"reads no partition 7 of a topic {kafka_topic!r}" in refused
    assert len(refused.strip().splitlines()) == 1, refused


def _replay(*args: str, code: int = 0) -> str:
    done = subprocess.run([str(Path(sys.executable).parent / "dbus"), "fn", "replay", *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout + done.stderr

