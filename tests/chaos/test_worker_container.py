"""A Spark cluster that shares no files with the driver: the master on this host, the
only worker in a container of the runtime image (host network, no volume, no bind
mount). `dbus runtime start --master spark://...` delivers a churning table into
Kafka and Elasticsearch; a changed function folder reaches the containerised
executor while the query runs; the worker container is killed mid-load and a new
one joins; at the end both sinks equal what the functions make of the table. Two
deployments that bring their own packages run there, each with its own."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from convergence import RuntimeProcess
from history_support import (
    Churn,
    TopicState,
    catalog_folder,
    create_products,
    wait_sinks_equal_table,
)
from image_support import base_image
from packages_support import TwoDeployments
from support import free_port, kafka_count, wait_for

from dbus_deploy.image import build_image, start_worker, stop_worker
from dbus_deploy.services import load_config
from dbus_deploy.spark import SparkClusterConfig, down, load_spark_config, up
from dbus_fn.errors import ConfigError

# Exclusive (run apart from the parallel integration pass): runs containers on the one Docker
# engine.
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.exclusive]

ROWS = 3_000


@pytest.fixture(scope="module")
def runtime_image(docker_client: Any) -> str:
    """The runtime image of this checkout (built once; cached by content)."""
    built = build_image(docker_client, load_config(), base=base_image(docker_client))
    return built.tag


@pytest.fixture
def master(tmp_path: Path) -> Iterator[SparkClusterConfig]:
    """A Spark master alone on this host (free ports); its workers come from containers."""
    env = {
        **os.environ,
        "DBUS_HOME": str(tmp_path / "spark-home"),
        "DBUS_SPARK_MASTER_PORT": str(free_port()),
        "DBUS_SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "PYSPARK_PYTHON": sys.executable,
    }
    config = load_spark_config(env)
    try:
        up(config, worker=False)
        yield config
    finally:
        down(config)


def _v2(folder: Path, topic: str) -> None:
    """Version 2 of the catalog also routes each row to ``topic``: seen there only
    when the executor runs the new code."""
    module = folder / "catalog.py"
    text = module.read_text()
    module.write_text(text.replace('return ["kafka://', f'return ["kafka://{topic}", "kafka://'))


def _workers(master: SparkClusterConfig) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{master.master_webui}/json/", timeout=10) as answer:
        return list(json.loads(answer.read())["workers"])


def test_a_containerised_worker_runs_the_query_and_its_loss_loses_nothing(
    fresh_database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    kafka_topic: str,
    es_index: str,
    docker_client: Any,
    runtime_image: str,
    master: SparkClusterConfig,
    tmp_path: Path,
) -> None:
    connection = fresh_database.connect()
    create_products(connection, ROWS)
    table = f"{fresh_database.name}.products"
    folder = catalog_folder(tmp_path / "catalog", table, kafka_topic, es_index)
    workers = [start_worker(docker_client, runtime_image, master.master_url, cores=2,
                            memory="2g")]  # fmt: skip
    mounts = docker_client.containers.get(workers[0].id).attrs
    assert mounts["Mounts"] == [] and not mounts["HostConfig"]["Binds"], "shares a path"
    runtime = RuntimeProcess.for_runtime(
        source_dsn=fresh_database.endpoint.dsn, functions=folder,
        kafka=kafka_service.bootstrap_servers, elasticsearch=elasticsearch_service.url,
        checkpoint=tmp_path / "checkpoint", logs=tmp_path / "logs",
        master=master.master_url, start="latest",
        options=["--executor-python", "python3", "--chunk-rows", "500"],
    )  # fmt: skip
    churn = Churn(fresh_database.connect(), ROWS, 500)
    topic = TopicState(kafka_service.bootstrap_servers, kafka_topic)
    shadow = f"{kafka_topic}-v2"
    try:
        assert [w["state"] for w in _workers(master)] == ["ALIVE"]  # the container's only
        runtime.start()
        runtime.wait_first_commit(300)
        churn.start()
        # The functions run in the container: the driver's host has no executor.
        wait_for(lambda: churn.writes > 300, 60, "the churn to write", every=0.2)
        _v2(folder, shadow)
        wait_for(lambda: kafka_count(kafka_service.bootstrap_servers, shadow, within=2) > 0, 120,
                 "version 2 to run on the executor", alive=runtime.alive)  # fmt: skip
        logs = docker_client.containers.get(workers[0].id).logs().decode(errors="replace")
        assert "Asked to launch executor" in logs, logs[-2000:]  # in the container
        # The worker goes mid-load; a new one joins; nothing is lost.
        stop_worker(docker_client, workers[0].id, kill=True)
        writes_at_kill = churn.writes
        workers.append(start_worker(docker_client, runtime_image, master.master_url, cores=2,
                                    memory="2g"))  # fmt: skip
        wait_for(lambda: churn.writes > writes_at_kill + 300, 60, "more writes", every=0.2)
        churn.stopped.set()
        churn.join()
        wait_sinks_equal_table(connection, topic, elasticsearch_service.url, es_index,
                               runtime.alive)  # fmt: skip
        assert runtime.stop() == 0, runtime.tail()
    finally:
        churn.stopped.set()
        topic.close()
        runtime.stop()
        for worker in workers:
            with contextlib.suppress(ConfigError):  # gone already: killed above
                stop_worker(docker_client, worker.id, kill=True)
    print(json.dumps({"writes": churn.writes, "workers": [w.name for w in workers]}))


def test_each_deployment_brings_its_packages_to_a_containerised_worker(
    fresh_database: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    kafka_topic: str,
    docker_client: Any,
    runtime_image: str,
    master: SparkClusterConfig,
    tmp_path: Path,
) -> None:
    """The image has neither ``phonenumbers`` nor either ``six`` the deployments pin:
    the executor in the container gets each set from the driver and runs each
    deployment with its own."""
    two = TwoDeployments(fresh_database, kafka_service.bootstrap_servers, kafka_topic, tmp_path)
    worker = start_worker(docker_client, runtime_image, master.master_url, cores=2, memory="2g")
    runtime = RuntimeProcess.for_runtime(
        source_dsn=fresh_database.endpoint.dsn, functions=two.old,
        kafka=kafka_service.bootstrap_servers, elasticsearch=elasticsearch_service.url,
        checkpoint=tmp_path / "checkpoint", logs=tmp_path / "logs",
        master=master.master_url, start="latest",
        options=["--functions", str(two.new), "--executor-python", "python3"],
    )  # fmt: skip
    try:
        runtime.start()
        runtime.wait_first_commit(300)
        two.write()
        two.assert_each_saw_its_own()
        logs = docker_client.containers.get(worker.id).logs().decode(errors="replace")
        assert "Asked to launch executor" in logs, logs[-2000:]  # in the container
        assert runtime.stop() == 0, runtime.tail()
    finally:
        runtime.stop()
        with contextlib.suppress(ConfigError):
            stop_worker(docker_client, worker.id, kill=True)
