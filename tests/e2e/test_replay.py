"""`dbus fn replay` against a running runtime: one deployment's current version over a
range of retained binlog, to a shadow topic, with every other output untouched."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from history_support import catalog_and_other, create_products
from support import kafka_consumer, serving_api, wait_for

from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.history.follow import replay
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

class Running:
    def __init__(self, config: RuntimeConfig, topic: str, table: str, dsn: str) -> None:
        self.config = config
        self.topic = topic
        self.table = table
        self.dsn = dsn

    def position(self) -> str:
        reader = BinlogReader(SourceSpec("src", self.dsn), replica_id=replica_id_for("t/pos"))
        try:
            found = reader.master_position()
        finally:
            reader.close()
        return f"{found.file}:{found.pos}"


@pytest.fixture
def running(spark: Any, scratch: Scratch) -> Iterator[Running]:
    yield from _running(spark, scratch, None)


@pytest.fixture
def running_once(spark: Any, scratch: Scratch) -> Iterator[Running]:
    """``running``, its catalog deployment written exactly once."""
    yield from _running(spark, scratch, "exactly-once")


def _running(spark: Any, scratch: Scratch, delivery: str | None) -> Iterator[Running]:
    _services, database, topic, _index, _tmp, _ff = scratch
    create_products(database.connect(), 300)
    table = f"{database.name}.products"
    config = catalog_and_other(scratch, table, delivery)
    query = start(config, spark=spark)
    try:
        assert query.exception() is None
        with serving_api(config.checkpoint_dir):  # what the commands ask
            yield Running(config, topic, table, database.endpoint.dsn)
    finally:
        stop(query, spark)


def messages(bootstrap: str, topic: str, count: int, timeout: float = 120) -> list[Any]:
    """(key, value, event id) of a topic's messages, at least ``count`` of them."""
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[Any] = []
    try:
        wait_for(lambda: found.extend(
            (m.key(), m.value(), dict(m.headers())["ce_id"])
            for m in consumer.consume(1000, 0.5) if not m.error()
        ) or len(found) >= count, timeout, f"{count} messages on {topic}", every=0.1)  # fmt: skip
        found += [(m.key(), m.value(), dict(m.headers())["ce_id"])
                  for m in consumer.consume(1000, 2) if not m.error()]  # fmt: skip
    finally:
        consumer.close()
    return found


# On MySQL too: a range of its binlog by file and offset, the GTID sets found from there.
@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_replay_to_a_shadow_topic_reproduces_the_range_and_touches_nothing_else(
    running: Running, scratch: Scratch
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    connection = scratch.fresh_database.connect()
    begin = running.position()
    with connection.cursor() as cursor:
        for key in range(1, 51):
            cursor.execute("UPDATE products SET price = price + 5 WHERE id = %s", (key,))
    end = running.position()
    with connection.cursor() as cursor:
        for key in range(51, 61):
            cursor.execute("UPDATE products SET price = price + 5 WHERE id = %s", (key,))
    live = messages(bootstrap, running.topic, 54)  # 60 updates, ids 7, 17, ... filtered
    assert len(live) == 54
    assert len(messages(bootstrap, f"{running.topic}.other", 60)) == 60

    out = io.StringIO()
    replay("catalog", begin, end, route=f"kafka://{running.topic}.shadow",
           checkpoint=running.config.checkpoint_dir, out=out)  # fmt: skip
    assert "catalog:replay: done, 50 rows" in out.getvalue(), out.getvalue()
    shadow = messages(bootstrap, f"{running.topic}.shadow", 45)
    # The first 50 updates, as the deployment made them: same keys, values and ids.
    assert sorted(shadow) == sorted(m for m in live if int(m[0][1:-1]) <= 50)
    # Nobody else heard of it.
    assert len(messages(bootstrap, running.topic, 54)) == 54
    assert len(messages(bootstrap, f"{running.topic}.other", 60)) == 60


def test_an_exactly_once_replay_asked_again_is_a_replay_of_its_own(
    running_once: Running, scratch: Scratch
) -> None:
    """Each replay of an exactly-once deployment is a lane of its own: the range asked
    again is delivered again, each of its changes once per replay."""
    bootstrap = scratch.services.kafka.bootstrap_servers
    running = running_once
    begin = running.position()
    with scratch.fresh_database.connect().cursor() as cursor:
        for key in range(1, 21):
            cursor.execute("UPDATE products SET price = price + 5 WHERE id = %s", (key,))
    end = running.position()
    live = messages(bootstrap, running.topic, 18)  # ids 7 and 17 filtered
    assert len(live) == 18
    shadow = f"kafka://{running.topic}.shadow"
    for asked in (1, 2):
        out = io.StringIO()
        replay("catalog", begin, end, route=shadow, checkpoint=running.config.checkpoint_dir,
               out=out)  # fmt: skip
        assert "catalog:replay: done, 20 rows" in out.getvalue(), out.getvalue()
        found = messages(bootstrap, f"{running.topic}.shadow", 18 * asked)
        assert sorted(found) == sorted(live * asked)
    assert len(messages(bootstrap, running.topic, 18)) == 18


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    dbus = Path(sys.executable).parent / "dbus"
    return subprocess.run([str(dbus), "fn", "replay", *args], capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_bad_replays_are_one_line_with_their_exit_code(running: Running) -> None:
    checkpoint = ["--checkpoint", running.config.checkpoint_dir]
    file, pos = running.position().split(":")
    purged = f"{file.rsplit('.', 1)[0]}.000000:4"  # older than the oldest file there is
    cases = [
        (["catalog", "--from", purged, *checkpoint], 4, "was purged"),
        # Past the largest binlog file there can be (max_binlog_size is at most 1 GiB),
        # however much other tests write meanwhile.
        (["catalog", "--from", f"{file}:{int(pos) + 2**31}", *checkpoint], 4,
         "is outside"),
        (["catalog", "--from", f"{file}:{pos}", "--route", "ftp://x", *checkpoint], 2,
         "ftp://x"),
        (["nope", "--from", f"{file}:{pos}", *checkpoint], 2, "no deployment 'nope' runs"),
    ]  # fmt: skip
    for args, code, message in cases:
        result = _cli(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == code, (args, result.stderr)
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
    assert "dbus fn backfill catalog" in _cli(*cases[0][0]).stderr
