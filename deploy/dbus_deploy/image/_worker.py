"""Spark workers in containers of the runtime image, for a master on this machine's network.

A worker container runs ``python -m dbus_deploy.spark worker`` (pyspark's own
Worker class, as the local cluster does) on the host network, so it reaches a
master on loopback and its executors are reachable by the driver. It has no
volumes: its work folder lives inside the container and goes with it. The image
is checked first, so a wrong image is refused with what it lacks instead of a
container that dies at start.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dbus_deploy.image._check import check_image
from dbus_deploy.image._errors import WorkerStartError
from dbus_deploy.image._recipe import LABEL
from dbus_fn.errors import ConfigError

if TYPE_CHECKING:
    import docker

REGISTERED = "Successfully registered with master"
_MEMORY_UNITS = ("m", "g")


@dataclass(frozen=True, slots=True)
class WorkerContainer:
    """A started worker: its container's id and name, and the master it joined."""

    id: str
    name: str
    master: str


def check_worker_arguments(image: str, master: str, cores: int, memory: str) -> None:
    """Refuse what a worker cannot use before the engine is asked anything."""
    from dbus_deploy.image._build import check_image_reference
    from dbus_spark.spark.preflight import master_addresses

    check_image_reference(image, "--image")

    if not master.startswith("spark://"):
        raise ConfigError(
            f"--master {master!r} is not a standalone master; use spark://HOST:PORT",
            setting="--master",
        )
    master_addresses(master)
    if cores < 1:
        raise ConfigError(f"--cores {cores} is not a positive number", setting="--cores")
    if not (memory[:-1].isdigit() and memory[-1:] in _MEMORY_UNITS):
        raise ConfigError(f"--memory {memory!r} is not a size like 512m or 2g", setting="--memory")


def start_worker(
    client: docker.DockerClient,
    image: str,
    master: str,
    *,
    cores: int = 2,
    memory: str = "2g",
    host: str = "127.0.0.1",
    name: str | None = None,
    timeout: float = 120.0,
) -> WorkerContainer:
    """Start a worker container and wait until the master accepted it."""
    from dbus_spark.spark.preflight import check_master

    check_worker_arguments(image, master, cores, memory)
    check_image(client, image)
    check_master(master)
    name = name or f"dbus-worker-{uuid.uuid4().hex[:8]}"
    container = client.containers.run(
        image,
        ["python3", "-m", "dbus_deploy.spark", "worker", "--master", master],
        detach=True,
        name=name,
        network_mode="host",
        entrypoint=[],
        labels={LABEL: "worker"},
        environment={
            "SPARK_LOCAL_IP": host,
            "DBUS_SPARK_WORKER_CORES": str(cores),
            "DBUS_SPARK_WORKER_MEMORY": memory,
        },
    )
    deadline = time.monotonic() + timeout
    while True:
        container.reload()
        logs = container.logs().decode("utf-8", errors="replace")
        if REGISTERED in logs:
            return WorkerContainer(str(container.id), name, master)
        if container.status in ("exited", "dead") or time.monotonic() > deadline:
            reason = (
                f"its container exited with code {container.attrs['State']['ExitCode']}"
                if container.status in ("exited", "dead")
                else f"the master {master} did not accept it within {timeout:.0f}s"
            )
            last = _last_line(logs)
            container.remove(force=True)
            raise WorkerStartError(image, reason, last)
        time.sleep(0.5)


def _last_line(logs: str) -> str | None:
    """The last error-looking line of a worker's log, else its last line."""
    lines = [line.strip() for line in logs.splitlines() if line.strip()]
    telling = [line for line in lines if "ERROR" in line or "Exception" in line]
    chosen = (telling or lines)[-1:]
    return chosen[0][:300] if chosen else None


def stop_worker(client: docker.DockerClient, container_id: str, *, kill: bool = False) -> None:
    """Stop (or kill) a worker container and remove it; only dbus worker containers."""
    import docker.errors

    try:
        container = client.containers.get(container_id)
    except docker.errors.NotFound as exc:
        raise ConfigError(
            f"no container {container_id}; `docker ps --filter label={LABEL}=worker` lists "
            "the workers",
            setting="CONTAINER",
        ) from exc
    if container.labels.get(LABEL) != "worker":
        raise ConfigError(
            f"container {container_id} is not a dbus worker; stop it with docker itself",
            setting="CONTAINER",
        )
    # A worker that exited on its own (or is exiting right now) needs no signal;
    # the removal below is what must not fail.
    with contextlib.suppress(docker.errors.APIError):
        if kill:
            container.kill()
        else:
            container.stop(timeout=30)
    container.remove(force=True)
