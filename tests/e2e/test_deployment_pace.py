"""Each deployment at its own pace, all real: one deployment's Elasticsearch cut off
(a proxy in front of it, stopped) or its function slower than the load never holds
the other deployment's Kafka stream; the held one catches up and rejoins."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from support import free_port, kafka_count, wait_for

from dbus_spark.job import start
from dbus_spark.progress import ProgressBook
from dbus_spark.settings import runtime_config

pytestmark = pytest.mark.e2e


class Proxy:
    """A TCP forwarder (socat) to a real service that can be cut off and brought back
    on the same port: cut, its clients find nothing listening."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.restore()

    def restore(self) -> None:
        self._process = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{self.port},bind=127.0.0.1,fork,reuseaddr",
             f"TCP:{self._upstream}"],
            start_new_session=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip

        def listening() -> bool:
            with contextlib.suppress(OSError), __import__("socket").create_connection(
                ("127.0.0.1", self.port), timeout=0.5
            ):
                return True
            return False

        wait_for(listening, 10, f"socat listening on {self.port}")

    def cut(self) -> None:
        """Stop the forwarder and every connection it holds."""
        assert self._process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def close(self) -> None:
        if self._process is not None:
            self.cut()


def _deployment(scratch: Scratch, name: str, table: str, route: str, delay: float = 0.0) -> Path:
    slow = f"time.sleep({delay})" if delay else "pass"
    return Path(
        scratch.function_folder(
            name,
            f'''
            import time

            import dbus_fn as fn

            @fn.route(tables="{table}")
            def there(event: fn.RowChange) -> str:
                {slow}
                return "{route}"
            ''',
            [table],
        )
    )


def _documents(url: str, index: str) -> set[int]:
    with Elasticsearch(url) as es:
        if not es.indices.exists(index=index):
            return set()
        es.indices.refresh(index=index)
        hits = es.search(index=index, query={"match_all": {}}, size=10_000)["hits"]["hits"]
        return {int(hit["_id"]) for hit in hits}


class Writer:
    """Inserts one row every ``every`` seconds in the background."""

    def __init__(self, database: Any, first: int, every: float = 0.1) -> None:
        self.next = first
        self._database = database
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._database.connect() as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                cur.execute("INSERT INTO orders VALUES (%s, %s)", (self.next, self.next * 3))
                self.next += 1
                self._stop.wait(self._every)

    def stop(self) -> int:
        """Stop; the last id written."""
        self._stop.set()
        self._thread.join()
        return self.next - 1


@pytest.fixture
def orders(scratch: Scratch) -> str:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    return f"{scratch.fresh_database.name}.orders"


@pytest.fixture
def es_proxy(scratch: Scratch) -> Iterator[Proxy]:
    proxy = Proxy(scratch.services.elasticsearch.url.split("://", 1)[1].rstrip("/"))
    try:
        yield proxy
    finally:
        proxy.close()


def _run(scratch: Scratch, folders: list[Path], elasticsearch: str, spark: Any) -> Any:
    services = scratch.services
    config = runtime_config(
        sources=(f"src={services.mariadb.dsn}",),
        deployments=tuple(str(f) for f in folders),
        kafka=services.kafka.bootstrap_servers,
        elasticsearch=elasticsearch,
        checkpoint=str(scratch.tmp_path / "checkpoint"),
        start="latest",
    )
    config = replace(config, detach_seconds=2.0)
    query = start(config, spark=spark)
    wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch", every=0.5)
    assert query.exception() is None
    return query, config


def test_a_cut_off_elasticsearch_detaches_its_deployment_alone_and_it_catches_up(
    spark: Any, scratch: Scratch, orders: str, es_proxy: Proxy
) -> None:
    topic, index = scratch.kafka_topic, scratch.es_index
    kafka = scratch.services.kafka.bootstrap_servers
    folders = [
        _deployment(scratch, "to_kafka", orders, f"kafka://{topic}"),
        _deployment(scratch, "to_es", orders, f"es://{index}"),
    ]
    query, config = _run(scratch, folders, f"http://127.0.0.1:{es_proxy.port}", spark)
    book = ProgressBook(config.checkpoint_dir)
    try:
        writer = Writer(scratch.fresh_database, 1)
        wait_for(lambda: len(_documents(scratch.services.elasticsearch.url, index)) >= 5, 120,
                 "the first rows in Elasticsearch", every=0.5)  # fmt: skip
        es_proxy.cut()
        cut_at = writer.next
        time.sleep(8)
        during = writer.stop()
        assert during > cut_at + 20
        # Every row reached Kafka while the other deployment's Elasticsearch was away.
        assert kafka_count(kafka, topic, expected=during, within=60) == during
        behind = book.load().get("src", {})
        assert set(behind) == {"to_es"}, behind
        assert "Elasticsearch" in behind["to_es"].reason

        es_proxy.restore()
        wanted = set(range(1, during + 1))
        wait_for(lambda: _documents(scratch.services.elasticsearch.url, index) == wanted, 120,
                 "the index to hold every row again", every=1.0)  # fmt: skip
        # Back with the stream: the next rows reach both sinks through the shared read.
        wait_for(lambda: not book.load().get("src"), 60, "to_es to rejoin", every=0.5)
        with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO orders VALUES (%s, %s)",
                            [(i, i) for i in range(during + 1, during + 11)])  # fmt: skip
        wanted |= set(range(during + 1, during + 11))
        wait_for(lambda: _documents(scratch.services.elasticsearch.url, index) == wanted, 60,
                 "the rows after the rejoin in Elasticsearch", every=0.5)  # fmt: skip
        assert kafka_count(kafka, topic, expected=during + 10, within=60) == during + 10
        assert query.exception() is None
    finally:
        query.stop()


def test_a_function_slower_than_the_load_is_detached_and_catches_up_once_fast_again(
    spark: Any, scratch: Scratch, orders: str
) -> None:
    topic, index = scratch.kafka_topic, scratch.es_index
    kafka = scratch.services.kafka.bootstrap_servers
    es = scratch.services.elasticsearch.url
    slow = _deployment(scratch, "slow", orders, f"es://{index}", delay=0.3)
    folders = [_deployment(scratch, "fast", orders, f"kafka://{topic}"), slow]
    query, config = _run(scratch, folders, es, spark)
    book = ProgressBook(config.checkpoint_dir)
    try:
        writer = Writer(scratch.fresh_database, 1, every=0.1)
        wait_for(lambda: "slow" in book.load().get("src", {}), 60, "the slow one detached",
                 every=0.5)  # fmt: skip
        time.sleep(5)
        written = writer.stop()
        assert kafka_count(kafka, topic, expected=written, within=30) == written
        assert len(_documents(es, index)) < written  # still behind: 0.3 s a row
        assert "functions took" in book.load()["src"]["slow"].reason
        # Made fast again (the same folder, redeployed): it catches up and rejoins.
        module = slow / "slow.py"
        module.write_text(module.read_text().replace("time.sleep(0.3)", "pass"))
        wanted = set(range(1, written + 1))
        wait_for(lambda: _documents(es, index) == wanted, 180, "the slow one caught up",
                 every=1.0)  # fmt: skip
        wait_for(lambda: not book.load().get("src"), 60, "slow to rejoin", every=0.5)
        assert query.exception() is None
    finally:
        query.stop()
