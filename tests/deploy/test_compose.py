"""`deploy/compose/spark-cluster.yml` as a user runs it: a master, two workers and the
runtime, all containers of the runtime image (the function baked in), on the host
network; rows written to MariaDB arrive in Kafka. Compose is Debian's
`docker-compose`, installed here when missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import free_port, kafka_consumer, route_code, wait_for

from dbus_deploy.image import build_image
from dbus_deploy.services import ServicesConfig, apt_install, load_config
from dbus_fn.errors import DbusError

# Builds images on the one Docker engine: in the parallel pass's one lane (tests/timing.py),
# never beside another Docker or chaos test.
pytestmark = [pytest.mark.integration]

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "spark-cluster.yml"


def _compose_command() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        try:
            apt_install(load_config(), {"docker-compose": "compose"})
        except DbusError as exc:
            pytest.fail(f"docker-compose cannot be installed: {exc}", pytrace=False)
        found = shutil.which("docker-compose")
    assert found, "docker-compose is installed by apt_install"
    return found


def test_the_compose_cluster_runs_the_baked_function(
    docker_client: Any, base_image_tag: str, image_snapshot: ServicesConfig, services: Any,
    fresh_database: Any, kafka_topic: str, function_folder: Any,
) -> None:  # fmt: skip
    compose = _compose_command()
    table = f"{fresh_database.name}.orders"
    code = route_code(table, f"kafka://{kafka_topic}", "out")
    folder = function_folder("composed", code, [table])
    with fresh_database.connect().cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    # On the run's base and core images: only the function's layer is built here.
    image = build_image(docker_client, image_snapshot, base=base_image_tag,
                        functions=[folder]).tag  # fmt: skip
    api = free_port()
    project = f"dbus-test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DBUS_IMAGE": image,
        "DBUS_SOURCES": f"shop={services.mariadb.dsn}",
        "DBUS_FUNCTIONS": f"/opt/dbus/functions/{folder.name}",
        "DBUS_KAFKA": services.kafka.bootstrap_servers,
        "DBUS_ELASTICSEARCH": services.elasticsearch.url,
        "DBUS_SPARK_MASTER_PORT": str(free_port()),
        "DBUS_SPARK_MASTER_WEBUI_PORT": str(free_port()),
        "DBUS_API": f"127.0.0.1:{api}",
    }
    base = [compose, "-p", project, "-f", str(COMPOSE_FILE)]

    def run(*args: str) -> str:
        done = subprocess.run([*base, *args], env=env, capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        run("up", "-d", "--scale", "worker=2")

        def started() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{api}/api/v1/state", timeout=5):
                return True

        wait_for(started, 240, "the runtime container's query to start", every=1.0,
                 ignoring=(OSError,))  # fmt: skip
        containers = docker_client.containers.list(
            filters={"label": f"com.docker.compose.project={project}"}
        )
        roles = sorted(c.labels["com.docker.compose.service"] for c in containers)
        assert roles == ["master", "runtime", "worker", "worker"]
        for container in containers:
            mounts = [m["Type"] for m in container.attrs["Mounts"]]
            role = container.labels["com.docker.compose.service"]
            assert mounts == (["volume"] if role == "runtime" else []), (role, mounts)
        with fresh_database.connect().cursor() as cur:
            cur.executemany("INSERT INTO orders VALUES (%s, %s)", [(i, i) for i in range(1, 51)])
        consumer = kafka_consumer(services.kafka.bootstrap_servers,
                                  {"auto.offset.reset": "earliest"})  # fmt: skip
        consumer.subscribe([kafka_topic])
        seen: set[int] = set()

        def arrived() -> bool:
            for msg in consumer.consume(1000, 1.0):
                if not msg.error():
                    seen.add(json.loads(msg.value())["after"]["id"])
            return seen == set(range(1, 51))

        try:
            wait_for(arrived, 120, "the 50 rows in Kafka")
        finally:
            consumer.close()
    finally:
        logs = subprocess.run([*base, "logs", "--tail", "30", "runtime"], env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        print(logs.stdout[-3000:])
        run("down", "-v", "--timeout", "20")
