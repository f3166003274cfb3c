"""Through the runtime into Kafka and Elasticsearch, and past `dbus fn verify`:

- zero and partial dates (legacy rows of a permissive sql_mode), bootstrapped and
  streamed, in key and other columns: Kafka carries what SELECT shows (subject and
  key too), Elasticsearch null in their date fields;
- a table without a primary key whose rows hold 300 kB of JSON: Kafka keys are the
  table's name, Elasticsearch documents are named by the row's digest and follow
  inserts, updates and deletes.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from support import kafka_consumer, wait_for
from zero_date_rows import dbus_text, is_real

from dbus_fn.kafka_binding import from_kafka_message
from dbus_spark.interfaces.history.verify import DriftError, verify
from dbus_spark.interfaces.settings import runtime_config
from dbus_spark.spark.job import start, stop

pytestmark = pytest.mark.e2e

Z_TYPES = {"dk": "date", "dn": "date", "dt": "datetime(3)", "ts": "timestamp"}
BOOTSTRAPPED = [
    "(1, '0000-00-00', '0000-00-00', '0000-00-00 00:00:00', NULL)",
    "(1, '2015-05-00', NULL, '0000-00-00 01:00:00', '0000-00-00 00:00:00')",
    "(2, '2015-00-21', NULL, '2015-05-00 10:11:12.5', '0000-00-00 00:00:00')",
    "(3, '2024-01-01', '2024-02-29', '2024-01-01 10:00:00.25', '2024-01-01 00:00:00')",
    "(4, '0000-00-00', '1000-00-00', '0001-00-00 00:00:00', NULL)",
]
STREAMED = [
    "UPDATE z SET dn = '2020-01-01' WHERE id = 1 AND dk = '0000-00-00'",
    "UPDATE z SET dn = '0000-00-00', dt = '0000-00-00 00:00:00.5' "
    "WHERE id = 1 AND dk = '0000-00-00'",
    "DELETE FROM z WHERE id = 2",
    "INSERT INTO z VALUES (5, '0000-00-00', '2015-05-00', '0000-00-00 01:00:00', "
    "'0000-00-00 00:00:00')",
]
BIG = "x" * 300_000
TO_BOTH = """
import dbus_fn as fn

@fn.route(tables="{table}")
def both(event: fn.RowChange) -> list[str]:
    return ["kafka://{topic}", "es://{index}"]
"""


def select_z(connection: Any) -> dict[str, dict[str, Any]]:
    """Each row of z by its key text, its dates as SELECT shows them in dbus's shape."""
    shown = ", ".join(f"CAST(`{c}` AS CHAR)" for c in Z_TYPES)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, {shown} FROM z")
        rows = {}
        for id_, *dates in cursor.fetchall():
            row = {"id": id_} | {
                c: dbus_text(v, t) for (c, t), v in zip(Z_TYPES.items(), dates, strict=True)
            }
            rows[json.dumps([id_, row["dk"]], separators=(",", ":"))] = row
        return rows


def es_document(row: dict[str, Any]) -> dict[str, Any]:
    """A row of z as its Elasticsearch document: zero and partial dates are null."""
    return {c: None if c in Z_TYPES and v is not None and not is_real(v) else v
            for c, v in row.items()}  # fmt: skip


def digest(row: dict[str, Any]) -> str:
    text = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha1(text.encode()).hexdigest()


def select_nk(connection: Any) -> dict[str, dict[str, Any]]:
    """Each row of nk by the digest of its JSON image, as docs/events.md names it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT a, doc FROM nk")
        rows = [{"a": a, "doc": json.loads(doc)} for a, doc in cursor.fetchall()]
    return {digest(row): row for row in rows}


def documents(url: str, index: str) -> dict[str, Any]:
    with Elasticsearch(url) as es:
        if not es.indices.exists(index=index):
            return {}
        es.indices.refresh(index=index)
        hits = es.search(index=index, size=100, query={"match_all": {}})["hits"]["hits"]
        return {hit["_id"]: hit["_source"] for hit in hits}


def messages(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[Any] = []
    try:
        wait_for(
            lambda: (
                found.extend(m for m in consumer.consume(100, 0.5) if not m.error())
                or len(found) >= count
            ),
            60,
            f"{count} messages on {topic}",
        )
    finally:
        consumer.close()
    return found


def test_zero_dates_and_a_keyless_table_reach_kafka_and_elasticsearch_as_select_shows_them(
    spark: Any, scratch: Scratch
) -> None:
    services, database, topic, index, tmp_path, function_folder = scratch
    nk_index, nk_topic = f"{index}-nk", f"{topic}.nk"
    connection = database.connect()
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION sql_mode = ''")
        cursor.execute("SET SESSION time_zone = '+00:00'")
        cursor.execute(
            "CREATE TABLE z (id INT, dk DATE NOT NULL, dn DATE NULL, dt DATETIME(3) NOT NULL, "
            "ts TIMESTAMP NULL, PRIMARY KEY (id, dk))"
        )
        cursor.execute(f"INSERT INTO z VALUES {', '.join(BOOTSTRAPPED)}")
        cursor.execute("CREATE TABLE nk (a INT, doc JSON)")
    z, nk = f"{database.name}.z", f"{database.name}.nk"
    legacy = function_folder("legacy", TO_BOTH.format(table=z, topic=topic, index=index), [z])
    logs = function_folder(
        "logs", TO_BOTH.format(table=nk, topic=nk_topic, index=nk_index), [nk],
        initial="none",  # a table without a key cannot be read in chunks
    )  # fmt: skip
    config = runtime_config(
        sources=(f"src={services.mariadb.dsn}",),
        deployments=(str(legacy), str(logs)),
        kafka=services.kafka.bootstrap_servers,
        elasticsearch=services.elasticsearch.url,
        checkpoint=str(tmp_path / "checkpoint"),
        start="latest",
    )
    es_url = services.elasticsearch.url
    query = start(config, spark=spark)
    try:
        want_docs = {key: es_document(row) for key, row in select_z(connection).items()}
        wait_for(lambda: query.exception() or documents(es_url, index) == want_docs, 180,
                 "the bootstrap of z in Elasticsearch", every=0.5)  # fmt: skip
        assert query.exception() is None

        with connection.cursor() as cursor:
            for statement in STREAMED:
                cursor.execute(statement)
            cursor.executemany(
                "INSERT INTO nk VALUES (%s, %s)",
                [(1, json.dumps({"text": BIG, "n": 1})), (2, json.dumps({"text": BIG, "n": 2})),
                 (3, json.dumps([]))],
            )  # fmt: skip
            cursor.execute("UPDATE nk SET a = 20 WHERE a = 2")
            cursor.execute("DELETE FROM nk WHERE a = 3")
        now = select_z(connection)
        want_docs = {key: es_document(row) for key, row in now.items()}
        want_nk = select_nk(connection)
        assert len(want_nk) == 2
        wait_for(lambda: query.exception() or (documents(es_url, index) == want_docs
                 and documents(es_url, nk_index) == want_nk), 120,
                 "the streamed changes in Elasticsearch", every=0.5)  # fmt: skip
        assert query.exception() is None

        # Kafka: the last message of each key is the row as SELECT shows it, and the
        # subject and key are that row's key text, zero dates and all.
        last: dict[str, Any] = {}
        for msg in messages(services.kafka.bootstrap_servers, topic, len(BOOTSTRAPPED) + 4):
            event = from_kafka_message(msg.key(), msg.value(), msg.headers())
            assert event.get_subject() == msg.key().decode()
            deleted = event.get_type().endswith(".deleted")
            last[event.get_subject()] = None if deleted else event.get_data()["after"]
        assert {k: v for k, v in last.items() if v is not None} == now
        assert '[1,"0000-00-00"]' in now and '[1,"2015-05-00"]' in now and "[1,null]" not in last
        assert now['[1,"0000-00-00"]']["dt"] == "0000-00-00T00:00:00.500000"

        # The keyless table: every key is the table's name, whatever the row holds.
        logged = messages(services.kafka.bootstrap_servers, nk_topic, 5)
        assert {msg.key() for msg in logged} == {nk.encode()}
        assert max(len(msg.value()) for msg in logged) > 600_000  # the update: both images
        events = [from_kafka_message(m.key(), m.value(), m.headers()) for m in logged]
        assert [e.get_type().rsplit(".", 1)[-1] for e in events] == [
            "inserted", "inserted", "inserted", "updated", "deleted",
        ]  # fmt: skip
        assert all(e.get_subject() is None and e.get_data()["key"] == [] for e in events)

        for name in ("legacy", "logs"):
            out = io.StringIO()
            try:
                report = verify(name, checkpoint=config.checkpoint_dir, out=out, recheck_after=1)
            except DriftError:
                raise AssertionError(out.getvalue()) from None
            assert report.bad == [] and report.rows == (len(now) if name == "legacy" else 2)
    finally:
        stop(query, spark)
        with Elasticsearch(es_url) as es:
            es.options(ignore_status=404).indices.delete(index=nk_index)
