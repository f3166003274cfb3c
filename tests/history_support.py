"""What the history tests share: a products table, a catalog deployment over it, what
its sinks should hold, and a writer that churns the table meanwhile."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from elasticsearch import Elasticsearch
from support import kafka_consumer, wait_for

from dbus_fn.kafka_binding import from_kafka_message

PRODUCTS = """
CREATE TABLE products (
    id INT PRIMARY KEY,
    name VARCHAR(64) NOT NULL,
    price INT NOT NULL,
    note VARCHAR(32)
)
"""

CATALOG = '''
import dbus_fn as fn

@fn.filter(tables="{table}")
def skip_sevens(event: fn.RowChange) -> bool:
    return event.row["id"] % 10 != 7

@fn.projection(tables="{table}")
def public(event: fn.RowChange) -> dict:
    return {{"id": event.row["id"], "name": event.row["name"].upper(),
             "price": event.row["price"]}}

@fn.route(tables="{table}")
def both(event: fn.RowChange) -> list[str]:
    return ["kafka://{topic}", "es://{index}"]
'''


def expected(connection: Any) -> dict[int, dict[str, Any]]:
    """What the catalog functions make of the table as it is now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, name, price FROM products")
        return {
            id_: {"id": id_, "name": name.upper(), "price": price}
            for id_, name, price in cursor.fetchall()
            if id_ % 10 != 7
        }


def index_contents(url: str, index: str) -> dict[int, dict[str, Any]]:
    with Elasticsearch(url) as es:
        if not es.indices.exists(index=index):
            return {}
        es.indices.refresh(index=index)
        docs = {}
        for hit in _scan(es, index):
            docs[int(hit["_id"])] = hit["_source"]
        return docs


def _scan(es: Elasticsearch, index: str) -> Iterator[dict[str, Any]]:
    after: list[Any] | None = None
    while True:
        page = es.search(index=index, size=5000, sort=[{"id": "asc"}], search_after=after,
                         query={"match_all": {}})["hits"]["hits"]  # fmt: skip
        if not page:
            return
        yield from page
        after = page[-1]["sort"]


class TopicState:
    """The last message per key of a topic, and every event type seen, read as it grows."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.last: dict[int, dict[str, Any] | None] = {}
        self.types: dict[str, int] = {}
        self.history: dict[int, list[tuple[int, int, str]]] = {}
        """Per key, every message's (binlog file number, position, type suffix), in order."""
        self.ids: set[str] = set()
        """Every event id seen (a change delivered twice counts once)."""
        self.sources: set[str] = set()
        """Every event source seen (``/mysql/<source>/<database>/<table>``)."""

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(10000, 0.5):
                if msg.error():
                    continue
                event = from_kafka_message(msg.key(), msg.value(), msg.headers())
                suffix = event.get_type().rsplit(".", 1)[-1]
                self.types[suffix] = self.types.get(suffix, 0) + 1
                self.ids.add(event.get_id())
                self.sources.add(event.get_source())
                (key,) = json.loads(msg.key())
                self.last[key] = None if suffix == "deleted" else event.get_data()["after"]
                number = int(event.get_extension("binlogfile").rsplit(".", 1)[-1])
                place = (number, int(event.get_extension("binlogpos")), suffix)
                self.history.setdefault(key, []).append(place)

    def snapshots_twice(self) -> list[int]:
        """Keys whose snapshot row (a history chunk's read of it) came more than once."""
        return sorted(
            key
            for key, places in self.history.items()
            if sum(suffix == "snapshot" for _, _, suffix in places) > 1
        )

    def merge_violations(
        self, since_of: Callable[[int], tuple[int, int]] | None = None
    ) -> list[tuple[int, list[tuple[int, int, str]]]]:
        """Keys whose messages break the merge: a message before the key's first
        snapshot row, a snapshot row older than a message before it, or (given
        ``since_of``, the position each key's chunk was read after) a message after
        the first snapshot row that is older than that position."""
        bad = []
        for key, places in self.history.items():
            kinds = [suffix for _, _, suffix in places]
            if "snapshot" not in kinds:
                continue
            positions = [(number, pos) for number, pos, _ in places]
            broken = kinds[0] != "snapshot" or any(
                kind == "snapshot" and positions[i] < max(positions[:i], default=(0, 0))
                for i, kind in enumerate(kinds)
            )
            if since_of is not None:
                limit = since_of(key)
                broken = broken or any(
                    place <= limit
                    for place, kind in zip(positions[1:], kinds[1:], strict=True)
                    if kind != "snapshot"
                )
            if broken:
                bad.append((key, places))
        return bad

    def contents(self) -> dict[int, dict[str, Any]]:
        return {key: value for key, value in self.last.items() if value is not None}

    def close(self) -> None:
        self.consumer.close()


CHURN_PAUSE = 0.01
"""Seconds a churn waits after each write: about 85 writes a second on MariaDB and on
MySQL, tens to hundreds through each chunk's read. At 0.002 (360 and 260 a second) the
machine spent about a fifth more CPU on the tests that churn: alone on it,
the history kill test took 260 CPU s (171 s) against 212 (157 s), the cluster
bootstrap test 197 CPU s (142 s) against 160 (118 s)."""


class Churn(threading.Thread):
    """Inserts, updates and deletes across the whole key range, chunk edges included."""

    def __init__(self, connection: Any, rows: int, chunk_rows: int) -> None:
        super().__init__(daemon=True)
        self.connection = connection
        self.rows = rows
        self.chunk_rows = chunk_rows
        self.stopped = threading.Event()
        self.writes = 0

    def run(self) -> None:
        rng = random.Random(7)
        edges = [
            n * self.chunk_rows + d
            for n in range(1, self.rows // self.chunk_rows)
            for d in (0, 1)
        ]
        with self.connection.cursor() as cursor:
            while not self.stopped.is_set():
                key = rng.choice(edges) if rng.random() < 0.3 else rng.randint(1, self.rows * 2)
                action = rng.random()
                if action < 0.4:
                    cursor.execute(
                        "INSERT INTO products VALUES (%s, %s, %s, NULL) "
                        "ON DUPLICATE KEY UPDATE price = price + 1",
                        (key, f"new-{key}", key),
                    )
                elif action < 0.75:
                    cursor.execute(
                        "UPDATE products SET name = CONCAT('u', name), price = price + 1 "
                        "WHERE id = %s",
                        (key,),
                    )
                else:
                    cursor.execute("DELETE FROM products WHERE id = %s", (key,))
                self.writes += 1
                time.sleep(CHURN_PAUSE)


def create_products(connection: Any, rows: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(PRODUCTS)
        for begin in range(1, rows + 1, 1000):
            cursor.executemany(
                "INSERT INTO products VALUES (%s, %s, %s, 'seed')",
                [(i, f"item-{i}", i * 3) for i in range(begin, min(begin + 1000, rows + 1))],
            )


OTHER = '''
import dbus_fn as fn

@fn.route(tables="{table}")
def audit(event: fn.RowChange) -> str:
    return "kafka://{topic}"
'''


def catalog_and_other(
    scratch: Any, table: str, delivery: str | None = None, **changes: Any
) -> Any:
    """A runtime config running two deployments over ``table``, changes only: catalog
    (CATALOG, to the scratch topic and index, with its manifest's ``delivery``) and
    other (every change to ``<topic>.other``)."""
    from dataclasses import replace

    from dbus_spark.config.runtime import deployment_folders

    _services, _db, topic, index, _tmp, function_folder = scratch
    catalog = function_folder(
        "catalog", CATALOG.format(table=table, topic=topic, index=index), [table],
        initial="none", delivery=delivery,
    )  # fmt: skip
    other = function_folder(
        "other", OTHER.format(table=table, topic=f"{topic}.other"), [table], initial="none"
    )
    config = scratch.runtime_config(catalog)
    others = deployment_folders((str(other),))
    return replace(config, deployments=(*config.deployments, *others), **changes)


def chunk_thresholds(store_file: Any, source: str, task: str) -> Callable[[int], tuple[int, int]]:
    """For a key, the (binlog file number, position) its chunk's micro-batch ended at."""
    import bisect

    from dbus_spark.state.history import HistoryStore

    done = HistoryStore(store_file).tasks(source)[task].done
    uppers = [upper[0][1] for upper, _, _ in done if upper is not None]
    sinces = [(int(s["file"].rsplit(".", 1)[1]), int(s["pos"])) for _, _, s in done]

    def since_of(key: int) -> tuple[int, int]:
        return sinces[bisect.bisect_left(uppers, key)]

    return since_of


def chunk_reads(runtime: Any, deployment: str = "") -> int:
    """How many chunk reads the runs of a ``RuntimeProcess`` logged (``deployment``'s
    alone, when given)."""
    line = re.compile(rf"history: read chunk .* for {re.escape(deployment)}:" if deployment
                      else r"history: read chunk ")  # fmt: skip
    return sum(len(line.findall(run.log.read_text(errors="replace")))
               for run in runtime.runs)  # fmt: skip


def wait_sinks_equal_table(
    connection: Any, topic: TopicState, elasticsearch: str, index: str, alive: Callable[[], bool]
) -> None:
    """Once the writes stopped: wait until the index and the topic's last value per key
    equal what the catalog functions make of the table."""
    want = expected(connection)

    def converged() -> bool:
        topic.poll(1)
        # The topic's contents are at hand; the index is refreshed and read whole, so it
        # is asked only once the topic holds the table.
        return topic.contents() == want and index_contents(elasticsearch, index) == want

    try:
        wait_for(converged, 180, "Kafka and Elasticsearch to equal the table", every=0.5,
                 alive=alive)  # fmt: skip
    except AssertionError as exc:
        found = {"Elasticsearch": index_contents(elasticsearch, index), "Kafka": topic.contents()}
        raise AssertionError(f"{exc}; " + "; ".join(
            f"{sink}: missing {sorted(set(want) - set(held))[:10]}, extra "
            f"{sorted(set(held) - set(want))[:10]}, differing "
            f"{sorted(k for k in set(want) & set(held) if want[k] != held[k])[:10]}"
            for sink, held in found.items()
        ) + "; Kafka's last messages of the first extra keys: " + "; ".join(
            f"{k}: {topic.history.get(k, [])[-6:]}"
            for k in sorted(set(found["Kafka"]) - set(want))[:3]
        )) from None  # fmt: skip


def catalog_folder(
    folder: Any,
    table: str,
    topic: str,
    index: str,
    delivery: str = "at-least-once",
    *,
    name: str = "catalog",
    source: str | None = None,
) -> Any:
    """The catalog deployment (``CATALOG``) over ``table`` as an author writes it, named
    ``name``, with its manifest's ``delivery``; of ``source`` alone when given."""
    folder.mkdir()
    (folder / "catalog.py").write_text(CATALOG.format(table=table, topic=topic, index=index))
    sources = f'sources = ["{source}"]\n' if source else ""
    (folder / "dbus.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\nmodule = "catalog.py"\ntables = ["{table}"]\n'
        f'delivery = "{delivery}"\n{sources}'
    )
    return folder
