"""A Spark cluster that shares no files with the driver: the master on this host, the
only worker in a container of the runtime image (host network, no volume, no bind
mount). `dbus runtime start --master spark://...` delivers a churning table into
Kafka and Elasticsearch; a changed function folder reaches the containerised
executor while the query runs; the worker container is killed mid-load and a new
one joins; at the end both sinks equal what the functions make of the table. Two
deployments that bring their own packages run there, each with its own.

The module's tests share one such cluster and one runtime (``container_runtime``):
it runs the catalog deployment and the two that bring packages, each test drives and
checks its own, and starting the master, a worker container and a runtime on it once
serves both.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
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
from packages_support import TwoDeployments
from scratch import FreshDatabase, scratch_database, scratch_index, scratch_topic
from support import FIRST_BATCH, free_port, kafka_count, wait_for

from dbus_deploy.image import BuiltImage, WorkerContainer, start_worker, stop_worker
from dbus_deploy.spark import SparkClusterConfig, down, load_spark_config, up
from dbus_fn.errors import ConfigError

# Runs containers on the one Docker engine: in the parallel pass's one lane (tests/timing.py),
# never beside another Docker or chaos test.
pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

ROWS = 3_000


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkClusterConfig]:
    """A Spark master alone on this host (free ports); its workers come from containers."""
    env = {
        **os.environ,
        "DBUS_HOME": str(tmp_path_factory.mktemp("spark") / "spark-home"),
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


@dataclass
class ContainerRuntime:
    """The module's runtime on ``master``, over one scratch database: the catalog
    deployment (``folder``) over ``products`` into ``topic`` and ``index``, and the
    two deployments of ``packages`` over ``people``. ``workers`` are the containers
    started for it, the last one the current."""

    database: FreshDatabase
    topic: str
    index: str
    folder: Path
    packages: TwoDeployments
    master: SparkClusterConfig
    runtime: RuntimeProcess
    workers: list[WorkerContainer] = field(default_factory=list)


@pytest.fixture(scope="module")
def container_runtime(
    mariadb_service: Any,
    kafka_service: Any,
    elasticsearch_service: Any,
    docker_client: Any,
    runtime_image: BuiltImage,
    master: SparkClusterConfig,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ContainerRuntime]:
    """One worker container on the master, then the runtime, waited for until it
    commits its first batch; stopped at the module's end, which it must survive
    cleanly (exit 0)."""
    folder = tmp_path_factory.mktemp("container-runtime")
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(scratch_database(mariadb_service))
        topic = stack.enter_context(scratch_topic(kafka_service))
        index = stack.enter_context(scratch_index(elasticsearch_service))
        create_products(database.connect(), ROWS)
        table = f"{database.name}.products"
        catalog = catalog_folder(folder / "catalog", table, topic, index)
        packages = TwoDeployments(database, kafka_service.bootstrap_servers, topic, folder)
        worker = start_worker(docker_client, runtime_image.tag, master.master_url, cores=2,
                              memory="2g")  # fmt: skip
        runtime = RuntimeProcess.for_runtime(
            source_dsn=database.endpoint.dsn, functions=catalog,
            kafka=kafka_service.bootstrap_servers, elasticsearch=elasticsearch_service.url,
            checkpoint=folder / "checkpoint", logs=folder / "logs",
            master=master.master_url, start="latest",
            options=["--functions", str(packages.old), "--functions", str(packages.new),
                     "--executor-python", "python3", "--chunk-rows", "500"],
        )  # fmt: skip
        shared = ContainerRuntime(database, topic, index, catalog, packages, master, runtime,
                                  [worker])  # fmt: skip

        @stack.callback
        def stop_workers() -> None:
            for started in shared.workers:
                with contextlib.suppress(ConfigError):  # gone already: killed by a test
                    stop_worker(docker_client, started.id, kill=True)

        stack.callback(runtime.stop)
        runtime.start()
        # A hang guard, not a speed bound: FIRST_BATCH says why 300 s.
        runtime.wait_first_commit(FIRST_BATCH)
        yield shared
        assert runtime.stop() == 0, runtime.tail()


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
    kafka_service: Any,
    elasticsearch_service: Any,
    docker_client: Any,
    runtime_image: BuiltImage,
    container_runtime: ContainerRuntime,
) -> None:
    shared = container_runtime
    runtime, master, workers = shared.runtime, shared.master, shared.workers
    connection = shared.database.connect()
    mounts = docker_client.containers.get(workers[0].id).attrs
    assert mounts["Mounts"] == [] and not mounts["HostConfig"]["Binds"], "shares a path"
    churn = Churn(shared.database.connect(), ROWS, 500)
    topic = TopicState(kafka_service.bootstrap_servers, shared.topic)
    shadow = f"{shared.topic}-v2"
    try:
        assert [w["state"] for w in _workers(master)] == ["ALIVE"]  # the container's only
        churn.start()
        # The functions run in the container: the driver's host has no executor.
        wait_for(lambda: churn.writes > 300, 60, "the churn to write", every=0.2)
        _v2(shared.folder, shadow)
        wait_for(lambda: kafka_count(kafka_service.bootstrap_servers, shadow, within=2) > 0, 120,
                 "version 2 to run on the executor", alive=runtime.alive)  # fmt: skip
        logs = docker_client.containers.get(workers[0].id).logs().decode(errors="replace")
        assert "Asked to launch executor" in logs, logs[-2000:]  # in the container
        # The worker goes mid-load; a new one joins; nothing is lost.
        stop_worker(docker_client, workers[0].id, kill=True)
        writes_at_kill = churn.writes
        workers.append(start_worker(docker_client, runtime_image.tag, master.master_url,
                                    cores=2, memory="2g"))  # fmt: skip
        wait_for(lambda: churn.writes > writes_at_kill + 300, 60, "more writes", every=0.2)
        churn.stopped.set()
        churn.join()
        wait_sinks_equal_table(connection, topic, elasticsearch_service.url, shared.index,
                               runtime.alive)  # fmt: skip
        assert runtime.alive(), runtime.tail()  # the worker's loss did not end the runtime
    finally:
        churn.stopped.set()
        topic.close()
    print(json.dumps({"writes": churn.writes, "workers": [w.name for w in workers]}))


def test_each_deployment_brings_its_packages_to_a_containerised_worker(
    docker_client: Any, container_runtime: ContainerRuntime
) -> None:
    """The image has neither ``phonenumbers`` nor either ``six`` the deployments pin:
    the executor in the container gets each set from the driver and runs each
    deployment with its own."""
    two, runtime = container_runtime.packages, container_runtime.runtime
    two.write()
    two.assert_each_saw_its_own()
    worker = container_runtime.workers[-1]
    logs = docker_client.containers.get(worker.id).logs().decode(errors="replace")
    assert "Asked to launch executor" in logs, logs[-2000:]  # in the container
    assert runtime.alive(), runtime.tail()
