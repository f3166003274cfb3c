"""The runtime on a Spark standalone cluster: a master and a worker on loopback, from pyspark.

The module starts one master and worker (free ports, a temp state directory) and
stops them at its end; each test runs its own `dbus runtime start --master
spark://...` process on it, one Spark application each, and checks that its own
application's executors ran on the worker. One delivers rows to Kafka and
Elasticsearch; in the other, two deployments bring their own packages
(``packages_support``): ``old`` sees ``phonenumbers`` and ``six`` 1.15.0, ``new``
sees ``six`` 1.16.0.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from elasticsearch import Elasticsearch
from packages_support import TwoDeployments
from support import free_port, kafka_consumer, runtime_api, wait_for

from dbus_deploy.spark import SparkClusterConfig, down, load_spark_config, status, up
from dbus_fn.kafka_binding import from_kafka_message

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkClusterConfig]:
    """A master and a worker for the module's tests, stopped (and checked gone) at its
    end: the tests run one runtime each on it, so it is started once for them all."""
    env = {
        **os.environ,
        "DBUS_HOME": str(tmp_path_factory.mktemp("spark") / "home"),
        "DBUS_SPARK_MASTER_PORT": str(free_port()),
        "DBUS_SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "DBUS_SPARK_WORKER_PORT": str(free_port()),
        "DBUS_SPARK_WORKER_WEBUI_PORT": str(free_port()),
        "DBUS_SPARK_WORKER_CORES": "2",
        "DBUS_SPARK_WORKER_MEMORY": "2g",
        "PYSPARK_PYTHON": sys.executable,
    }
    config = load_spark_config(env)
    pids: dict[str, int | None] = {}
    try:
        up(config)
        pids = status(config)
        yield config
    finally:
        stopped = down(config)
    assert all(pids.values()) and stopped == {"worker": True, "master": True}
    assert status(config) == {"master": None, "worker": None}
    for pid in pids.values():
        assert pid is not None
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _applications(cluster: SparkClusterConfig) -> dict[str, str]:
    """Every application the master knows, running or completed: its id and state."""
    with urllib.request.urlopen(f"{cluster.master_webui}/json/", timeout=5) as response:
        found = json.load(response)
    apps = [*found.get("activeapps", []), *found.get("completedapps", [])]
    return {app["id"]: app["state"] for app in apps}


def _executor_logs(cluster: SparkClusterConfig, app: str) -> list[Path]:
    """The stderr files of application ``app``'s executors, under the worker's folder
    (each executor gets a directory of its own there)."""
    return list((cluster.role_dir("worker") / "work" / app).glob("*/stderr"))


class _Reader:
    """Reads one topic from the start, keeping what it has seen."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = kafka_consumer(
            bootstrap,
            {"auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 1000},
            group=f"{topic}-check",
        )
        self._consumer.subscribe([topic])
        self.events: list[tuple[Any, str, dict[str, Any]]] = []

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            event = from_kafka_message(msg.key(), msg.value(), msg.headers())
            kind = event.get_type().rsplit(".", 1)[-1]
            self.events.append((json.loads(msg.key()), kind, event.get_data()))

    def close(self) -> None:
        self._consumer.close()


def _wait_for(
    check: Callable[[], Any], timeout: float, what: str, alive: Callable[[], bool]
) -> Any:
    return wait_for(check, timeout, what, alive=alive, every=0.5)


def test_runtime_on_a_standalone_cluster_delivers_to_kafka_and_elasticsearch(
    cluster: SparkClusterConfig, scratch: Scratch
) -> None:
    services, fresh_database, kafka_topic, es_index, tmp_path, function_folder = scratch
    began = time.monotonic()
    conn = fresh_database.connect()
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(32), qty INT)")
        cur.execute("CREATE TABLE probe (id INT AUTO_INCREMENT PRIMARY KEY)")
    folder = function_folder(
        "catalog",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{fresh_database.name}.*")
        def everywhere(event: fn.RowChange) -> list[str]:
            if event.table == "probe":
                return ["kafka://{kafka_topic}.probe"]
            return ["kafka://{kafka_topic}", "es://{es_index}"]
        ''',
        [f"{fresh_database.name}.items", f"{fresh_database.name}.probe"],
        dead_letter=f"kafka://{kafka_topic}.dead",
    )
    dbus = Path(sys.executable).parent / "dbus"
    log = tmp_path / "runtime.log"
    # The module's cluster may have run others' applications: this runtime's is new.
    earlier = set(_applications(cluster))
    argv = [
        str(dbus), "runtime", "start",
        "--source", f"src={services.mariadb.dsn}",
        "--functions", str(folder),
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", str(tmp_path / "checkpoint"),
        "--from", "latest",
        "--master", cluster.master_url,
    ]  # fmt: skip
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    probes = _Reader(services.kafka.bootstrap_servers, f"{kafka_topic}.probe")
    items = _Reader(services.kafka.bootstrap_servers, kafka_topic)
    with log.open("wb") as out:
        runtime = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    alive = lambda: runtime.poll() is None  # noqa: E731
    try:
        # "latest" is where the stream starts: probe until a probe row comes through,
        # then every row written after it must arrive.
        def probe_seen() -> bool:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO probe VALUES ()")
            probes.poll(2.0)
            return bool(probes.events)

        _wait_for(probe_seen, 240, "a probe row in Kafka", alive)
        started = time.monotonic() - began

        def executors_on_the_worker() -> str | None:
            running = [app for app, state in _applications(cluster).items()
                       if app not in earlier and state == "RUNNING"]  # fmt: skip
            return running[0] if running else None

        app = _wait_for(executors_on_the_worker, 30, "the runtime as a RUNNING application",
                        alive)  # fmt: skip
        # The worker launched executors for it (each gets a directory with its logs).
        assert _executor_logs(cluster, app), f"no executor of {app} ran on the worker"

        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO items VALUES (%s, %s, %s)",
                [(1, "lamp", 3), (2, "desk", 1), (3, "chair", 4)],
            )
            cur.execute("UPDATE items SET qty = 9 WHERE id = 1")
            cur.execute("DELETE FROM items WHERE id = 3")

        def all_changes() -> bool:
            items.poll(1.0)
            return len(items.events) >= 5

        _wait_for(all_changes, 120, "five changes of items in Kafka", alive)
        kinds = sorted((key, kind) for key, kind, _ in items.events)
        assert kinds == [
            ([1], "inserted"),
            ([1], "updated"),
            ([2], "inserted"),
            ([3], "deleted"),
            ([3], "inserted"),
        ]
        with Elasticsearch(services.elasticsearch.url) as es:

            def indexed() -> dict[str, Any] | None:
                if not es.indices.exists(index=es_index):
                    return None
                es.indices.refresh(index=es_index)
                hits = es.search(index=es_index, query={"match_all": {}})["hits"]["hits"]
                docs = {hit["_id"]: hit["_source"] for hit in hits}
                return docs if set(docs) == {"1", "2"} and docs["1"]["qty"] == 9 else None

            docs = _wait_for(indexed, 60, "the index to hold rows 1 and 2", alive)
        assert docs == {
            "1": {"id": 1, "name": "lamp", "qty": 9},
            "2": {"id": 2, "name": "desk", "qty": 1},
        }
    finally:
        probes.close()
        items.close()
        if runtime.poll() is None:
            # The CLI alone, as `docker stop` would: it stops its query and exits.
            runtime.send_signal(signal.SIGTERM)
            try:
                runtime.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(runtime.pid, signal.SIGKILL)
                runtime.wait(timeout=30)
    assert runtime.returncode == 0, log.read_text()[-3000:]
    print(
        f"standalone cluster: first probe through {started:.1f}s after start; "
        f"total {time.monotonic() - began:.1f}s"
    )


def test_each_deployment_brings_its_packages_to_a_standalone_cluster(
    scratch: Scratch, cluster: SparkClusterConfig
) -> None:
    two = TwoDeployments.of(scratch)
    checkpoint = scratch.tmp_path / "checkpoint"
    earlier = set(_applications(cluster))
    runtime = spawn_cli_runtime(scratch, two.old, str(checkpoint), "--functions", str(two.new),
                                "--master", cluster.master_url)  # fmt: skip
    try:
        runtime_api(checkpoint)
        two.write()
        two.assert_each_saw_its_own()
        # The executors ran on the worker, which unpacked each set in its own folder.
        started = set(_applications(cluster)) - earlier
        assert len(started) == 1, f"one application for one runtime, found {started}"
        assert _executor_logs(cluster, started.pop())
    finally:
        stop_cli_runtime(scratch, runtime)
