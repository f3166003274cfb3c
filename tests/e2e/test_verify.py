"""`dbus fn verify` finds drift planted in Elasticsearch and Kafka (missing, extra,
differing), and `--repair` sends exactly those keys again, on MariaDB and on MySQL."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from history_support import CATALOG, TopicState, create_products, expected, index_contents
from support import serving_api, wait_for

from dbus_fn.events import BinlogPosition, Operation, RowChange
from dbus_fn.kafka_binding import to_kafka_message
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.history.verify import DriftError, verify
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

ROWS = 800


class Running:
    def __init__(self, config: RuntimeConfig, topic: str, index: str, table: str) -> None:
        self.config = config
        self.topic = topic
        self.index = index
        self.table = table


@pytest.fixture
def running(spark: Any, scratch: Scratch) -> Iterator[Running]:
    services, database, topic, index, _tmp, function_folder = scratch
    create_products(database.connect(), ROWS)
    table = f"{database.name}.products"
    folder = function_folder(
        "catalog", CATALOG.format(table=table, topic=topic, index=index), [table]
    )
    config = replace(scratch.runtime_config(folder), chunk_rows=300)
    query = start(config, spark=spark)
    try:
        want = expected(database.connect())
        wait_for(lambda: query.exception() or
                 index_contents(services.elasticsearch.url, index) == want, 180,
                 "the bootstrap to fill the index", every=0.5)  # fmt: skip
        assert query.exception() is None
        with serving_api(config.checkpoint_dir):  # what --repair asks
            yield Running(config, topic, index, table)
    finally:
        stop(query, spark)


def _plant_kafka(bootstrap: str, topic: str, table: str, changes: list[tuple[Operation, dict[str,
                 Any]]]) -> None:  # fmt: skip
    database, name = table.split(".")
    producer = Producer({"bootstrap.servers": bootstrap})
    for op, row in changes:
        change = RowChange(
            source="src", database=database, table=name, op=op,
            before=row if op is Operation.DELETE else None,
            after=None if op is Operation.DELETE else row, primary_key=("id",),
            position=BinlogPosition("binlog.000001", 4), commit_time=datetime.now(UTC),
            server_id="1", column_types={"id": "int", "name": "varchar(64)", "price": "int"},
        )  # fmt: skip
        message = to_kafka_message(change)
        producer.produce(topic, message.value, message.key, headers=message.headers)
    assert producer.flush(30) == 0


# On both servers: verify reads the table in chunks as of a position, and a repair writes
# as of the source's position then (Elasticsearch's external versions come from it).
@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_verify_finds_planted_drift_and_repair_fixes_exactly_it(
    running: Running, services: Any, scratch: Scratch
) -> None:
    fresh_database = scratch.fresh_database
    out = io.StringIO()
    report = verify("catalog", checkpoint=running.config.checkpoint_dir, out=out)
    assert report.bad == [] and report.rows == ROWS, out.getvalue()
    assert f"es://{running.index}: {len(expected(fresh_database.connect()))} expected, in sync" \
        in out.getvalue()  # fmt: skip

    with Elasticsearch(services.elasticsearch.url) as es:
        es.delete(index=running.index, id="11", refresh=True)  # missing
        es.index(index=running.index, id="99999", document={"id": 99999, "name": "GHOST",
                 "price": 1}, version=1, version_type="external", refresh=True)  # extra
        # Another writer overwrites a document (its version goes up by one).
        es.index(index=running.index, id="12", document={"id": 12, "name": "WRONG",
                 "price": 36}, refresh=True)  # differs
    _plant_kafka(services.kafka.bootstrap_servers, running.topic, running.table, [
        (Operation.DELETE, {"id": 21, "name": "item-21", "price": 63}),  # missing
        (Operation.INSERT, {"id": 88888, "name": "GHOST", "price": 1}),  # extra
        (Operation.UPDATE, {"id": 22, "name": "WRONG", "price": 66}),  # differs
    ])  # fmt: skip

    topic = TopicState(services.kafka.bootstrap_servers, running.topic)
    try:
        # Read the topic up to the planted messages (the runtime writes nothing meanwhile):
        # what it held before the repair, to tell what the repair sent.
        keys = set(expected(fresh_database.connect()))

        def read_to_the_planted() -> bool:
            topic.poll(1)
            return (
                keys <= set(topic.history) and 88888 in topic.history
                and topic.last.get(21, {}) is None
                and (topic.last.get(22) or {}).get("name") == "WRONG"
            )  # fmt: skip

        wait_for(read_to_the_planted, 60, "the topic read up to the planted messages", every=0.5)
        before = {key: len(places) for key, places in topic.history.items()}
        with pytest.raises(DriftError):
            verify("catalog", checkpoint=running.config.checkpoint_dir, out=out,
                   recheck_after=1)  # fmt: skip
        found = {(b.destination, b.kind, b.key_text) for b in _last_report(out)}
        assert found == {
            (f"es://{running.index}", "missing", "11"),
            (f"es://{running.index}", "extra", "99999"),
            (f"es://{running.index}", "differing", "12"),
            (f"kafka://{running.topic}", "missing", "[21]"),
            (f"kafka://{running.topic}", "extra", "[88888]"),
            (f"kafka://{running.topic}", "differing", "[22]"),
        }, out.getvalue()

        # The source moves on meanwhile (a repair writes as of its current position,
        # which must pass what the other writer left behind).
        with fresh_database.connect().cursor() as cursor:
            cursor.execute("INSERT INTO products VALUES (5000, 'late', 1, NULL)")
        repaired = io.StringIO()
        try:
            report = verify("catalog", checkpoint=running.config.checkpoint_dir, repair=True,
                            out=repaired, recheck_after=1)  # fmt: skip
        except DriftError:
            raise AssertionError(repaired.getvalue()) from None
        assert report.bad == [], repaired.getvalue()
        want = expected(fresh_database.connect())

        def repaired_in_kafka() -> bool:
            topic.poll(1)
            return topic.contents() == want

        wait_for(repaired_in_kafka, 60, "the repair's messages in the topic", every=0.5)
        topic.poll(3)  # and whatever more the repair sent
    finally:
        topic.close()
    assert index_contents(services.elasticsearch.url, running.index) == want
    assert topic.contents() == want
    # Exactly the drifted keys were sent again, one message each (and the late insert);
    # the extra document 99999 lives in the index only, so Kafka hears nothing of it.
    sent = {key: len(places) - before.get(key, 0) for key, places in topic.history.items()}
    assert {key for key, n in sent.items() if n} == {11, 12, 21, 22, 88888, 5000}
    assert all(n == 1 for n in sent.values() if n)


def _last_report(out: io.StringIO) -> list[Any]:
    """The drifted keys the last verify printed, as (destination, kind, key) rows."""
    rows, destination = [], ""
    for line in out.getvalue().splitlines():
        text = line.strip()
        if line.startswith("verify "):
            rows, destination = [], ""
        elif line.startswith("  ") and not line.startswith("    "):
            destination = text.split(":", 2)[0] + ":" + text.split(":", 2)[1]
        elif text.split(":", 1)[0] in ("missing", "extra", "differing"):
            kind, keys = text.split(": ", 1)
            rows += [_Row(destination, kind, key) for key in keys.split(", ")]
    return rows


class _Row:
    def __init__(self, destination: str, kind: str, key_text: str) -> None:
        self.destination, self.kind, self.key_text = destination, kind, key_text


def test_verify_of_an_unknown_deployment_or_table_is_one_line_with_exit_2(
    running: Running,
) -> None:
    dbus = Path(sys.executable).parent / "dbus"
    checkpoint = ["--checkpoint", running.config.checkpoint_dir]
    database = running.table.split(".")[0]
    for args, message in [
        (["nope", *checkpoint], "no deployment 'nope' runs at checkpoint"),
        (["catalog", "--table", f"{database}.other", *checkpoint],
         f"does not subscribe to {database}.other"),
    ]:  # fmt: skip
        result = subprocess.run([str(dbus), "fn", "verify", *args], capture_output=True,
                                text=True, timeout=120)  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().count("\n") == 0 and message in result.stderr


def test_verify_exits_6_on_drift(running: Running, services: Any) -> None:
    with Elasticsearch(services.elasticsearch.url) as es:
        es.delete(index=running.index, id="1", refresh=True)
    dbus = Path(sys.executable).parent / "dbus"
    result = subprocess.run(
        [str(dbus), "fn", "verify", "catalog", "--checkpoint", running.config.checkpoint_dir],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 6, result.stdout + result.stderr
    assert f"es://{running.index}" in result.stdout and "1 missing" in result.stdout
    assert "run again with --repair" in result.stderr
    assert json.dumps  # the report is plain text; nothing else is printed
