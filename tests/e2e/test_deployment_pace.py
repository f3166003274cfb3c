"""Each deployment at its own pace, all real: one deployment's Elasticsearch cut off
(a proxy in front of it, stopped) or its function slower than the load never holds
the other deployment's Kafka stream; the held one catches up and rejoins."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from elasticsearch import Elasticsearch
from history_support import TopicState, chunk_thresholds
from support import Proxy, kafka_count, page_texts, sample_sum, scrape, serving_api, wait_for

from dbus_spark.interfaces.settings import runtime_config
from dbus_spark.spark.job import start, stop
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore
from dbus_spark.state.progress import ProgressBook

pytestmark = pytest.mark.e2e

# Exclusive (run apart from the parallel pass): bounds a healthy deployment's latency while
# another is slow, and how soon a deployment is detached (2 s).
ALONE = pytest.mark.exclusive


def _deployment(scratch: Scratch, name: str, table: str, route: str, delay: float = 0.0,
                initial: str | None = None, changes_only: bool = False) -> Path:  # fmt: skip
    """A deployment routing every event of ``table`` to ``route``, each in ``delay``
    seconds (with ``changes_only``, each change: its snapshot rows go as fast as read)."""
    slow = f"time.sleep({delay})" if delay else "pass"
    if changes_only:
        slow = f"if event.op is not fn.Operation.SNAPSHOT: {slow}"
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
            initial=initial,
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

    def __init__(self, database: Any, first: int, every: float = 0.1, table: str = "orders"
                 ) -> None:  # fmt: skip
        self.next = first
        self._table = table
        self._database = database
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def write(self, cur: Any) -> None:
        cur.execute(f"INSERT INTO {self._table} VALUES (%s, %s)", (self.next, self.next * 3))
        self.next += 1

    def _run(self) -> None:
        with self._database.connect() as conn, conn.cursor() as cur:
            while not self._stop.is_set():
                self.write(cur)
                self._stop.wait(self._every)

    def stop(self) -> int:
        """Stop; the last id written."""
        self._stop.set()
        self._thread.join()
        return self.next - 1


class Updater(Writer):
    """Adds one to a random one of the rows 1 to ``rows`` every ``every`` seconds."""

    def __init__(self, database: Any, rows: int, every: float = 0.1) -> None:
        self._rows = rows
        self._keys = random.Random(rows)
        super().__init__(database, 1, every)

    def write(self, cur: Any) -> None:
        cur.execute(f"UPDATE {self._table} SET total = total + 1 WHERE id = %s",
                    (self._keys.randint(1, self._rows),))  # fmt: skip


def cut_while_writing(scratch: Scratch, es_proxy: Proxy, index: str) -> int:
    """Insert a row into orders every 0.1 s; once the first ones are in ``index``, cut
    Elasticsearch off for 8 s, and stop writing: the last id written."""
    writer = Writer(scratch.fresh_database, 1)
    wait_for(lambda: len(_documents(scratch.services.elasticsearch.url, index)) >= 5, 120,
             "the first rows in Elasticsearch", every=0.5)  # fmt: skip
    es_proxy.cut()
    cut_at = writer.next
    time.sleep(8)
    during = writer.stop()
    assert during > cut_at + 20
    return during


@pytest.fixture
def orders(scratch: Scratch) -> str:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    return f"{scratch.fresh_database.name}.orders"


def _run(
    scratch: Scratch, folders: list[Path], elasticsearch: str, spark: Any, metrics: Any = None,
    **changes: Any,
) -> Any:
    services = scratch.services
    config = runtime_config(
        sources=(f"src={scratch.fresh_database.endpoint.dsn}",),
        deployments=tuple(str(f) for f in folders),
        kafka=services.kafka.bootstrap_servers,
        elasticsearch=elasticsearch,
        checkpoint=str(scratch.tmp_path / "checkpoint"),
        start="latest",
    )
    config = replace(config, detach_seconds=2.0, **changes)
    query = start(config, spark=spark, metrics=metrics)
    wait_for(lambda: query.exception() or query.lastProgress, 120, "the first batch", every=0.5)
    assert query.exception() is None
    return query, config


@ALONE
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
        during = cut_while_writing(scratch, es_proxy, index)
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
        stop(query, spark)


@ALONE
def test_a_backfill_whose_elasticsearch_is_cut_off_waits_alone_and_ends_once_it_is_back(
    spark: Any, scratch: Scratch, orders: str, es_proxy: Proxy
) -> None:
    """History reads write to their deployment's sinks within the bound too: a chunk
    those sinks refuse is read again after a backoff, and the other deployment's
    stream goes on meanwhile."""
    from dbus_spark.interfaces.history.follow import backfill
    from dbus_spark.state.checkpoint import progress_path
    from dbus_spark.state.history import HistoryStore

    topic, index, es = scratch.kafka_topic, scratch.es_index, scratch.services.elasticsearch.url
    kafka = scratch.services.kafka.bootstrap_servers
    rows = 2000
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, %s)", [(i, i) for i in range(1, rows + 1)])
        cur.execute("CREATE TABLE events (id INT PRIMARY KEY, total INT)")
    # to_es's table is quiet: its stream is never detached, so its chunks try its sinks.
    events = f"{scratch.fresh_database.name}.events"
    folders = [
        _deployment(scratch, "to_kafka", events, f"kafka://{topic}", initial="none"),
        _deployment(scratch, "to_es", orders, f"es://{index}", initial="none"),
    ]
    query, config = _run(scratch, folders, f"http://127.0.0.1:{es_proxy.port}", spark,
                         chunk_rows=200)  # fmt: skip
    store = HistoryStore(progress_path(config.checkpoint_dir))
    writer = Writer(scratch.fresh_database, 1, table="events")
    try:
        assert kafka_count(kafka, topic, expected=5, within=120) >= 5
        es_proxy.cut()
        with serving_api(config.checkpoint_dir):
            backfill("to_es", [orders], None, checkpoint=config.checkpoint_dir, wait=False,
                     out=io.StringIO())  # fmt: skip

        def refused() -> dict[str, Any]:
            store.reload()
            return store.waiting("src").get("to_es", {})

        wait = wait_for(refused, 60, "the backfill's chunk to be refused", every=0.5)
        assert "Elasticsearch" in wait["reason"], wait
        time.sleep(6)
        during = writer.stop()
        # Every row written meanwhile reached the other deployment's Kafka.
        assert kafka_count(kafka, topic, expected=during, within=60) == during
        store.reload()
        task = store.tasks("src")[f"to_es:{orders}"]
        assert not task.finished and task.rows < rows  # a refused chunk is not done
        assert store.waiting("src")["to_es"]["failures"] >= 1

        es_proxy.restore()
        wanted = set(range(1, rows + 1))
        wait_for(lambda: _documents(es, index) == wanted, 120, "the backfill in the index",
                 every=1.0)  # fmt: skip

        def finished() -> bool:  # its last chunk, past the highest key, may come later
            store.reload()
            return store.tasks("src")[f"to_es:{orders}"].finished > 0

        wait_for(finished, 60, "the backfill to end", every=0.5)
        assert store.waiting("src") == {}
        assert query.exception() is None
    finally:
        writer.stop()
        stop(query, spark)


def _shown(browser: Any, name: str) -> tuple[str, str]:
    """A deployment's state on the dashboard, and the text shown for it."""
    cell = f'#deployments .deployment[data-name="{name}"] [data-field="state"]'
    states, texts = page_texts(browser, cell, "data-state"), page_texts(browser, cell)
    return (states[0], texts[0]) if states else ("", "")


@ALONE
def test_a_function_slower_than_the_load_is_detached_and_catches_up_once_fast_again(
    spark: Any, scratch: Scratch, orders: str, browser: Any
) -> None:
    from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
    from dbus_spark.observe import RuntimeMetrics

    topic, index = scratch.kafka_topic, scratch.es_index
    kafka = scratch.services.kafka.bootstrap_servers
    es = scratch.services.elasticsearch.url
    slow = _deployment(scratch, "slow", orders, f"es://{index}", delay=0.3)
    folders = [_deployment(scratch, "fast", orders, f"kafka://{topic}"), slow]
    metrics = RuntimeMetrics()
    query, config = _run(scratch, folders, es, spark, metrics)
    server = ApiServer(build_app(metrics), ApiSettings("127.0.0.1", 0))
    url = server.start()
    book = ProgressBook(config.checkpoint_dir)
    writer = Writer(scratch.fresh_database, 1, every=0.1)
    try:
        wait_for(lambda: "slow" in book.load().get("src", {}), 60, "the slow one detached",
                 every=0.5)  # fmt: skip
        browser.get(f"{url}/")
        time.sleep(5)

        def lagging() -> float:
            samples = scrape(url)
            behind = sum(
                sample_sum(samples, "dbus_deployment_state", deployment="slow", state=state)
                for state in ("detached", "catching-up")
            )
            lag = sample_sum(samples, "dbus_deployment_lag_seconds", deployment="slow")
            return lag if behind == 1 else 0.0

        first = wait_for(lagging, 30, "the slow one's lag in /metrics", every=0.5)
        time.sleep(3)
        assert lagging() > first  # it grows: the function is slower than the load
        assert sample_sum(scrape(url), "dbus_deployment_state",
                          deployment="fast", state="with-stream") == 1  # fmt: skip
        state, text = wait_for(lambda: _shown(browser, "slow")[0] != "with-stream"
                               and _shown(browser, "slow"), 30, "the dashboard to show it",
                               every=0.5)  # fmt: skip
        assert state in ("detached", "catching-up") and "behind" in text, (state, text)
        assert _shown(browser, "fast")[0] == "with-stream"
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
        writer.stop()
        stop(query, spark)
        server.stop()
        metrics.close()


BOOTSTRAP_ROWS = 3_000
"""30 chunks of 100 rows: a bootstrap of about 15 micro-batches. The updates, 10 a
second, are of keys across the table; those of the keys read so far reach the slow
function (0.2 s a change), so it is detached a quarter of the way in, at most (its
function busy half of a read), and the rest is read while it is behind."""


def test_a_bootstrap_that_ends_while_its_deployment_is_behind_keeps_its_merge(
    spark: Any, scratch: Scratch
) -> None:
    """A deployment detached by its slow function reads behind the shared stream: the
    bootstrap's gate holds back its changes of a read chunk's keys until its own read is
    past that chunk's batch too, so none older than a key's snapshot row follows it."""
    database, topic = scratch.fresh_database, scratch.kafka_topic
    with database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
        cur.executemany("INSERT INTO orders VALUES (%s, %s)",
                        [(i, i) for i in range(1, BOOTSTRAP_ROWS + 1)])  # fmt: skip
    table = f"{database.name}.orders"
    folder = _deployment(scratch, "behind", table, f"kafka://{topic}", delay=0.2,
                         initial="snapshot", changes_only=True)  # fmt: skip
    writer = Updater(database, BOOTSTRAP_ROWS, every=0.1)
    # A deployment is detached so that it holds back no other: one that keeps up.
    fast = _deployment(scratch, "fast", table, f"es://{scratch.es_index}")
    query, config = _run(scratch, [folder, fast], scratch.services.elasticsearch.url, spark,
                         chunk_rows=100)  # fmt: skip
    book, store = ProgressBook(config.checkpoint_dir), progress_path(config.checkpoint_dir)
    task = f"behind:{table}"
    state = TopicState(scratch.services.kafka.bootstrap_servers, topic)
    try:
        finished = wait_for(lambda: (t := HistoryStore(store).tasks("src").get(task))
                            and t.finished, 180, "the bootstrap to end", every=0.5)  # fmt: skip
        detached = book.load().get("src", {}).get("behind")
        assert detached is not None and detached.since < finished, (
            "the deployment was not behind when its bootstrap ended", detached
        )
        writer.stop()
        wait_for(lambda: not book.load().get("src"), 300, "the deployment to catch up and rejoin",
                 every=1.0)  # fmt: skip
        wanted = set(range(1, BOOTSTRAP_ROWS + 1))
        wait_for(lambda: state.poll(1.0) or set(state.contents()) >= wanted, 60,
                 "every row in Kafka")  # fmt: skip
        violations = state.merge_violations(chunk_thresholds(store, "src", task))
        assert violations[:5] == [], f"{len(violations)} keys out of merge order"
        assert query.exception() is None
    finally:
        writer.stop()
        state.close()
        stop(query, spark)


def _kafka_keys(bootstrap: str, topic: str, count: int) -> list[tuple[int, str]]:
    """The first ``count`` events of ``topic`` as (id, kind), in the topic's order per
    partition (a key's events share one)."""
    from support import kafka_events

    events = kafka_events(bootstrap, topic, count, 120)
    return [(json.loads(key)[0], event.get_type().rsplit(".", 1)[-1]) for key, event in events]


# Pause and resume bound nothing: they run in the parallel pass, on both servers (what a
# paused deployment holds, and reads again from, is a position of the server's kind).
@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_paused_deployment_gets_nothing_and_after_resume_everything_in_key_order(
    spark: Any, scratch: Scratch, orders: str
) -> None:
    from dbus_spark.interfaces.pace import ask

    topic = scratch.kafka_topic
    kafka = scratch.services.kafka.bootstrap_servers
    folders = [
        _deployment(scratch, "steady", orders, f"kafka://{topic}"),
        _deployment(scratch, "paused", orders, f"kafka://{topic}.paused"),
    ]
    query, config = _run(scratch, folders, scratch.services.elasticsearch.url, spark)
    try:
        with serving_api(config.checkpoint_dir):  # what the commands ask
            said = ask("paused", pause=True, checkpoint=config.checkpoint_dir)
            assert said.startswith("paused paused at src ")
            with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
                for i in range(1, 21):
                    cur.execute("INSERT INTO orders VALUES (%s, %s)", (i, i))
                for i in range(1, 21, 2):
                    cur.execute("UPDATE orders SET total = total + 1 WHERE id = %s", (i,))
            assert kafka_count(kafka, topic, expected=30, within=60) == 30
            time.sleep(3)  # a few more batches: still nothing for the paused one
            assert kafka_count(kafka, f"{topic}.paused", expected=1, within=2) == 0
            book = ProgressBook(config.checkpoint_dir)
            assert book.load()["src"]["paused"].state == "paused"

            assert "resumed" in ask("paused", pause=False, checkpoint=config.checkpoint_dir)
            got = _kafka_keys(kafka, f"{topic}.paused", 30)
            assert len(got) == 30
            for key in range(1, 21):
                kinds = [kind for k, kind in got if k == key]
                want = ["inserted", "updated"] if key % 2 else ["inserted"]
                assert kinds == want, (key, kinds)
            wait_for(lambda: not ProgressBook(config.checkpoint_dir).load().get("src"), 60,
                     "the resumed one to rejoin", every=0.5)  # fmt: skip
            assert ask("paused", pause=False, checkpoint=config.checkpoint_dir) == (
                "paused was not paused"
            )
            assert query.exception() is None
    finally:
        stop(query, spark)


def test_pausing_a_deployment_the_runtime_does_not_run_is_one_line_and_exit_2(
    spark: Any, scratch: Scratch, orders: str
) -> None:
    folders = [_deployment(scratch, "steady", orders, f"kafka://{scratch.kafka_topic}")]
    query, config = _run(scratch, folders, scratch.services.elasticsearch.url, spark)
    try:
        with serving_api(config.checkpoint_dir):  # what the commands ask
            result = subprocess.run(
                [str(Path(sys.executable).parent / "dbus"), "fn", "pause", "nobody",
                 "--checkpoint", config.checkpoint_dir],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            assert result.returncode == 2, result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "'nobody'" in lines[0] and "steady" in lines[0], lines
    finally:
        stop(query, spark)


def _fn_status(checkpoint: str) -> dict[str, str]:
    """`dbus fn status` of the runtime at ``checkpoint``: its line per deployment."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dbus"), "fn", "status", "--checkpoint", checkpoint],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {line.split()[0]: line for line in result.stdout.splitlines()}


@ALONE
def test_a_runtime_killed_while_a_deployment_is_detached_converges_after_restart(
    scratch: Scratch, orders: str, es_proxy: Proxy
) -> None:
    from e2e_support import spawn_cli_runtime, stop_cli_runtime

    topic, index = scratch.kafka_topic, scratch.es_index
    kafka, es = scratch.services.kafka.bootstrap_servers, scratch.services.elasticsearch.url
    folders = [
        _deployment(scratch, "to_kafka", orders, f"kafka://{topic}"),
        _deployment(scratch, "to_es", orders, f"es://{index}"),
    ]
    checkpoint = str(scratch.tmp_path / "killed")
    options = ["--functions", str(folders[1]), "--detach-after", "2",
               "--elasticsearch", f"http://127.0.0.1:{es_proxy.port}"]  # fmt: skip
    runtime = spawn_cli_runtime(scratch, folders[0], checkpoint, *options)
    book = ProgressBook(checkpoint)
    try:
        from support import runtime_api

        runtime_api(Path(checkpoint))
        writer = Writer(scratch.fresh_database, 1)
        wait_for(lambda: len(_documents(es, index)) >= 3, 120, "the first rows indexed",
                 every=0.5)  # fmt: skip
        es_proxy.cut()
        wait_for(lambda: "to_es" in book.load().get("shop", {}), 60, "to_es detached",
                 every=0.5, alive=lambda: runtime.poll() is None)  # fmt: skip
        # `dbus fn status` asks the runtime's API where each deployment stands.
        lines = wait_for(lambda: (found := _fn_status(checkpoint)) and "to_es" in found
                         and "with-stream" not in found["to_es"] and found, 30,
                         "`dbus fn status` to show to_es behind", every=1.0)  # fmt: skip
        assert lines["to_kafka"].startswith("to_kafka  1.0.0  with-stream"), lines
        assert "[shop: " in lines["to_es"] and "Elasticsearch" in lines["to_es"], lines
        time.sleep(2)
        runtime.kill()  # SIGKILL while to_es is detached
        runtime.wait()
        written = writer.stop()
        es_proxy.restore()
        runtime = spawn_cli_runtime(scratch, folders[0], checkpoint, *options)
        wanted = set(range(1, written + 1))
        wait_for(lambda: _documents(es, index) == wanted, 180, "the index to equal the table",
                 every=1.0, alive=lambda: runtime.poll() is None)  # fmt: skip
        assert kafka_count(kafka, topic, expected=written, within=120) >= written
        wait_for(lambda: not book.load().get("shop"), 60, "to_es to rejoin", every=0.5)
    finally:
        stop_cli_runtime(scratch, runtime)
