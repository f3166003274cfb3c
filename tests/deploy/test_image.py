"""`dbus image` against a real Docker engine: build, cache, check, and a worker container.

The engine is Debian's dockerd (started here when it is not running) and the
base is made from Debian packages, since no registry can be reached; a test
fails with the reason when either cannot be had. Builds use a frozen copy of
dbus's sources (``image_snapshot``); the base and the runtime image with
functions/orders are the run's own (``tests/conftest.py``), made once for every test
that uses them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from image_support import shell_only_image
from support import free_port, wait_for

from dbus_deploy.image import BuiltImage, build_image, check_image, start_worker, stop_worker
from dbus_deploy.services import ServicesConfig
from dbus_fn.cli import cli

# Builds and prunes images on the one Docker engine: in the parallel pass's one lane
# (tests/timing.py), never beside another Docker or chaos test.
pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _run(docker_client: Any, image: str, *command: str) -> str:
    output = docker_client.containers.run(
        image, list(command), network_mode="none", remove=True, stdout=True, stderr=True
    )
    return str(output.decode())


def _dbus(*arguments: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["image", *arguments], env=env)


def test_the_image_runs_dbus_pyspark_and_java(
    docker_client: Any, runtime_image: BuiltImage
) -> None:
    assert runtime_image.tag.startswith("dbus-runtime:")
    assert (
        _run(docker_client, runtime_image.tag, "dbus", "--version")
        .strip()
        .endswith(metadata.version("dbus-fn"))
    )
    assert 'openjdk version "17.' in _run(docker_client, runtime_image.tag, "java", "-version")
    found = check_image(docker_client, runtime_image.tag)
    # Pinned to what runs here: a driver on this machine and workers in the image agree.
    assert found.pyspark == metadata.version("pyspark")
    assert found.python.startswith("3.11.")
    # Its Spark workers import pyspark from byte code (``dbus_spark.spark.bytecode``).
    probe = ("from dbus_spark.spark.bytecode import compiled, worker_zip; "
             "print(compiled(worker_zip()))")
    assert _run(docker_client, runtime_image.tag, "python", "-c", probe).strip() == "True"
    listed = _run(docker_client, runtime_image.tag, "ls", "/opt/dbus/functions/orders")
    assert "dbus.toml" in listed.split()


def test_nothing_changed_builds_nothing(
    docker_client: Any,
    base_image_tag: str,
    image_snapshot: ServicesConfig,
    image_orders: Path,
    runtime_image: BuiltImage,
) -> None:
    again = build_image(docker_client, image_snapshot, base=base_image_tag,
                        functions=[image_orders])  # fmt: skip
    assert (again.tag, again.image_id, again.built) == (
        runtime_image.tag, runtime_image.image_id, False,
    )  # fmt: skip
    assert again.seconds < 10


def test_a_function_change_rebuilds_only_the_last_layer(
    docker_client: Any,
    base_image_tag: str,
    image_snapshot: ServicesConfig,
    image_orders: Path,
    runtime_image: BuiltImage,
) -> None:
    module = image_orders / "orders.py"
    original = module.read_text()
    module.write_text(original + f"\n# a change of the function's code: {uuid.uuid4()}\n")
    try:
        changed = build_image(docker_client, image_snapshot, base=base_image_tag,
                              functions=[image_orders])  # fmt: skip
    finally:
        module.write_text(original)
    assert changed.built and changed.tag != runtime_image.tag
    before = docker_client.images.get(runtime_image.tag).attrs["RootFS"]["Layers"]
    after = docker_client.images.get(changed.tag).attrs["RootFS"]["Layers"]
    assert len(after) == len(before)
    assert after[:-1] == before[:-1]
    assert after[-1] != before[-1]
    assert changed.seconds < 60
    docker_client.images.remove(changed.tag)


def test_a_base_that_does_not_exist_is_exit_2(docker_client: Any) -> None:
    result = _dbus("build", "-q", "--base", "dbus-no-such-base:0")
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("Error: base image dbus-no-such-base:0 is not in the local engine")
    assert "--base IMAGE" in last and "dbus image base" in last


def test_a_failing_step_is_named_with_its_output_and_exit_1(docker_client: Any) -> None:
    image = shell_only_image(docker_client, "dbus-test-no-python:1")
    try:
        result = _dbus("build", "-q", "--base", image)
    finally:
        docker_client.images.remove(image, force=True)
    assert result.exit_code == 1, result.output
    *shown, last = result.output.strip().splitlines()
    assert "RUN python3 -c" in last and "exit code 127" in last
    assert last.startswith("Error: building dbus-deps:")
    assert "last output: /bin/sh: 1: python3: not found" in last
    assert any("python3: not found" in line for line in shown)


def test_function_requirements_that_cannot_install_are_exit_1(
    docker_client: Any, base_image_tag: str, tmp_path: Path
) -> None:
    folder = tmp_path / "broken"
    shutil.copytree(REPO / "functions" / "orders", folder)
    (folder / "requirements.txt").write_text("dbus-no-such-distribution==0.0.1\n")
    result = _dbus("build", "-q", "--base", base_image_tag, "--functions", str(folder))
    assert result.exit_code == 1, result.output
    last = result.output.strip().splitlines()[-1]
    assert "pip wheel of broken/requirements.txt (on the host)" in last
    assert "dbus-no-such-distribution" in last


def test_an_image_without_dbus_is_refused_by_check_and_worker(
    docker_client: Any, base_image_tag: str
) -> None:
    result = _dbus("check", base_image_tag)
    assert result.exit_code == 2, result.output
    assert f"Error: image {base_image_tag} cannot run dbus: dbus is not importable" in result.output
    master = f"spark://127.0.0.1:{free_port()}"
    result = _dbus("worker", "--image", base_image_tag, "--master", master)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "dbus is not importable" in result.output
    started = docker_client.containers.list(all=True, filters={"label": "org.dbus.image=worker"})
    assert not [c for c in started if c.attrs["Config"]["Image"] == base_image_tag]


def _alive_workers(webui: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{webui}/json/", timeout=5) as answer:
        workers = json.load(answer).get("workers", [])
    return [worker for worker in workers if worker.get("state") == "ALIVE"]


def test_a_worker_container_joins_a_master_and_stops(
    docker_client: Any, runtime_image: BuiltImage, tmp_path: Path
) -> None:
    from dbus_deploy.spark import down, load_spark_config, up

    env = {**os.environ, "DBUS_HOME": str(tmp_path / "home")}
    for name in ("MASTER_PORT", "MASTER_WEBUI_PORT"):
        env[f"DBUS_SPARK_{name}"] = str(free_port())
    cluster = load_spark_config(env)
    up(cluster, worker=False)  # the master alone: its only worker is the container
    try:
        began = time.monotonic()
        worker = start_worker(
            docker_client, runtime_image.tag, cluster.master_url, cores=1, memory="512m"
        )
        try:
            container = docker_client.containers.get(worker.id)
            assert container.attrs["HostConfig"]["NetworkMode"] == "host"
            assert not container.attrs["Mounts"] and not container.attrs["HostConfig"]["Binds"]
            alive = wait_for(
                lambda: _alive_workers(cluster.master_webui), 60, "the container's worker ALIVE"
            )
            assert [(w["cores"], w["memory"]) for w in alive] == [(1, 512)]
            print(f"worker container registered in {time.monotonic() - began:.1f}s")
        finally:
            stop_worker(docker_client, worker.id)
        wait_for(lambda: not _alive_workers(cluster.master_webui), 90, "the stopped worker gone")
        assert not docker_client.containers.list(all=True, filters={"id": worker.id})
    finally:
        down(cluster)
