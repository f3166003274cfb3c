"""A Spark standalone cluster on loopback: one master and one worker, past local mode.

Both run from the pyspark package's own jars through its ``bin/spark-class``
(the wheel ships no ``sbin/start-master.sh``). Their state, logs and pid files
live under ``<DBUS_HOME>/spark/``; they listen on 127.0.0.1 only, on ports set
by ``DBUS_SPARK_*`` variables. Submit the runtime with
``dbus runtime start --master spark://127.0.0.1:<port>``; executors run the
interpreter named by ``PYSPARK_PYTHON`` (the driver sets it to its own).

    python -m dbus_deploy.spark up|down|status
    python -m dbus_deploy.spark master                              (in a container)
    python -m dbus_deploy.spark worker --master spark://HOST:PORT   (in a container)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import click

from dbus_deploy.services import PortInUseError, ServiceStartError, load_config
from dbus_deploy.services._install import find_java
from dbus_deploy.services._lifecycle import _port_in_use
from dbus_deploy.services._process import Launch, last_log_line, running_pid, spawn, stop
from dbus_fn.errors import ConfigError, DbusError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# (setting, environment variable, default)
_SETTINGS: tuple[tuple[str, str, str], ...] = (
    ("master_port", "DBUS_SPARK_MASTER_PORT", "7077"),
    ("master_webui_port", "DBUS_SPARK_MASTER_WEBUI_PORT", "8180"),
    ("worker_port", "DBUS_SPARK_WORKER_PORT", "7078"),
    ("worker_webui_port", "DBUS_SPARK_WORKER_WEBUI_PORT", "8181"),
    ("worker_cores", "DBUS_SPARK_WORKER_CORES", "2"),
    ("worker_memory", "DBUS_SPARK_WORKER_MEMORY", "2g"),
)

ENV_HELP = "Environment: DBUS_HOME (state under <home>/spark), " + ", ".join(
    f"{env} (default {default})" for _, env, default in _SETTINGS
)


@dataclass(frozen=True, slots=True)
class SparkClusterConfig:
    """Where the cluster keeps its state, its ports, and the worker's size."""

    home: Path
    master_port: int = 7077
    master_webui_port: int = 8180
    worker_port: int = 7078
    worker_webui_port: int = 8181
    worker_cores: int = 2
    worker_memory: str = "2g"
    host: str = "127.0.0.1"
    environ: Mapping[str, str] | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def master_webui(self) -> str:
        return f"http://{self.host}:{self.master_webui_port}"

    def role_dir(self, role: str) -> Path:
        return self.home / role

    def pid_file(self, role: str) -> Path:
        return self.role_dir(role) / f"{role}.pid"

    def log_file(self, role: str) -> Path:
        return self.role_dir(role) / "logs" / f"{role}.log"


def load_spark_config(environ: Mapping[str, str] | None = None) -> SparkClusterConfig:
    """Read the cluster's settings from ``environ`` (default ``os.environ``)."""
    env = dict(os.environ if environ is None else environ)
    values: dict[str, int | str] = {}
    for name, var, default in _SETTINGS:
        raw = env.get(var, "").strip() or default
        if name == "worker_memory":
            if not raw[:-1].isdigit() or raw[-1] not in "mg":
                raise ConfigError(f"{var}={raw!r} is not a size like 512m or 2g", setting=var)
            values[name] = raw
            continue
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise ConfigError(f"{var}={raw!r} is not a positive number below 65536", setting=var)
        values[name] = int(raw)
    ports = [values[n] for n, _, _ in _SETTINGS if n.endswith("port")]
    if len(set(ports)) != len(ports):
        raise ConfigError(
            "the DBUS_SPARK_* ports must all differ", setting="DBUS_SPARK_MASTER_PORT"
        )
    home = load_config(env).home / "spark"
    return SparkClusterConfig(home=home, environ=env, **values)  # type: ignore[arg-type]


def spark_home() -> Path:
    """The pyspark package: its ``jars/`` and ``bin/spark-class`` are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _launch(config: SparkClusterConfig, role: str, arguments: list[str]) -> Launch:
    base = dict(os.environ if config.environ is None else config.environ)
    java = find_java(load_config(base), f"spark {role}")
    run = config.role_dir(role) / "run"
    run.mkdir(parents=True, exist_ok=True)
    main = MASTER_CLASS if role == "master" else WORKER_CLASS
    env = {
        **base,
        "JAVA_HOME": str(java.home),
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": config.host,
        "SPARK_LOG_DIR": str(config.log_file(role).parent),
        "SPARK_WORKER_DIR": str(config.role_dir(role) / "work"),
        # The state directory on the JVM's command line marks the process as ours.
        "SPARK_DAEMON_JAVA_OPTS": f"-Ddbus.spark.home={config.role_dir(role)} "
        f"-Djava.io.tmpdir={run}",
        "SPARK_DAEMON_MEMORY": "512m",
        # Executors run the project's interpreter, with the project importable.
        "PYSPARK_PYTHON": base.get("PYSPARK_PYTHON", sys.executable),
    }
    return Launch(
        argv=[str(spark_home() / "bin" / "spark-class"), main, *arguments],
        log_file=config.log_file(role),
        cwd=run,
        env=env,
    )


def worker_arguments(
    config: SparkClusterConfig,
    master_url: str,
    *,
    port: int | None = None,
    webui_port: int | None = None,
) -> list[str]:
    """The Worker's command line: its master, address, size and work folder (port 0:
    any free one)."""
    return [
        master_url,
        "--host", config.host,
        "--port", str(config.worker_port if port is None else port),
        "--webui-port", str(config.worker_webui_port if webui_port is None else webui_port),
        "--cores", str(config.worker_cores),
        "--memory", config.worker_memory,
        "--work-dir", str(config.role_dir("worker") / "work"),
    ]  # fmt: skip


def master_arguments(config: SparkClusterConfig) -> list[str]:
    """The Master's command line: its address and ports."""
    return [
        "--host", config.host, "--port", str(config.master_port),
        "--webui-port", str(config.master_webui_port),
    ]  # fmt: skip


def run_worker(master_url: str, *, port: int = 0, webui_port: int = 0) -> None:
    """Become a worker of ``master_url`` in the foreground, its log on stderr.

    What a worker container runs: the container is the process's lifetime, so
    there is no pid file, and ``docker stop`` ends it.
    """
    config = load_spark_config()
    _become(config, "worker", worker_arguments(config, master_url, port=port,
                                               webui_port=webui_port))  # fmt: skip


def run_master() -> None:
    """Become the master in the foreground (what a master container runs), on the
    ports ``DBUS_SPARK_MASTER_PORT`` and ``DBUS_SPARK_MASTER_WEBUI_PORT`` say."""
    config = load_spark_config()
    _become(config, "master", master_arguments(config))


def _become(config: SparkClusterConfig, role: str, arguments: list[str]) -> None:
    launch = _launch(config, role, arguments)
    os.chdir(launch.cwd)
    os.execve(launch.argv[0], list(launch.argv), dict(launch.env))


def _master_state(config: SparkClusterConfig) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(config.master_webui + "/json/", timeout=5) as response:
            state: dict[str, object] = json.load(response)
            return state
    except (OSError, ValueError):
        return None


def _worker_alive(config: SparkClusterConfig) -> bool:
    state = _master_state(config) or {}
    workers = state.get("workers", [])
    if not isinstance(workers, list):
        return False
    return any(w.get("port") == config.worker_port and w.get("state") == "ALIVE" for w in workers)


def _wait(
    config: SparkClusterConfig,
    role: str,
    process: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    timeout: float,
    what: str,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        # spark-class is a shell script until it execs the JVM: watch the process
        # itself, not its command line.
        if process.poll() is not None:
            raise ServiceStartError(
                f"spark {role}",
                f"the process exited with code {process.returncode}",
                log_file=config.log_file(role),
                last_log_line=last_log_line(config.log_file(role)),
            )
        if ready():
            return
        if time.monotonic() > deadline:
            raise ServiceStartError(
                f"spark {role}",
                f"{what} not seen within {timeout:.0f}s",
                log_file=config.log_file(role),
                last_log_line=last_log_line(config.log_file(role)),
            )
        time.sleep(0.5)


def _check_free(config: SparkClusterConfig, role: str, port: int, webui_port: int) -> None:
    for number, var in ((port, "PORT"), (webui_port, "WEBUI_PORT")):
        if _port_in_use(config.host, number):
            raise PortInUseError(f"spark {role}", number, f"DBUS_SPARK_{role.upper()}_{var}")


def up(
    config: SparkClusterConfig | None = None, *, timeout: float = 90.0, worker: bool = True
) -> str:
    """Start the master, then the worker (each unless running); return the master URL.

    ``worker=False`` starts the master alone, for workers that run elsewhere (in
    containers of the runtime image: ``dbus image worker``).
    """
    config = config or load_spark_config()
    started: list[subprocess.Popen[bytes]] = []
    try:
        if running_pid(config.pid_file("master"), config.role_dir("master")) is None:
            _check_free(config, "master", config.master_port, config.master_webui_port)
            process = spawn(
                _launch(config, "master", master_arguments(config)), config.pid_file("master")
            )
            started.append(process)
            _wait(
                config,
                "master",
                process,
                lambda: (_master_state(config) or {}).get("status") == "ALIVE",
                timeout,
                f"an ALIVE master on {config.master_webui}",
            )
        if worker and running_pid(config.pid_file("worker"), config.role_dir("worker")) is None:
            _check_free(config, "worker", config.worker_port, config.worker_webui_port)
            arguments = worker_arguments(config, config.master_url)
            process = spawn(_launch(config, "worker", arguments), config.pid_file("worker"))
            started.append(process)
            _wait(
                config,
                "worker",
                process,
                lambda: _worker_alive(config),
                timeout,
                f"the worker registered ALIVE with {config.master_url}",
            )
    except BaseException:
        # Each was started in its own session: stop its whole group.
        for process in reversed(started):
            stop(process.pid, grace=30.0)
        for role in ("worker", "master"):
            config.pid_file(role).unlink(missing_ok=True)
        raise
    return config.master_url


def _stop(config: SparkClusterConfig, role: str) -> bool:
    pid = running_pid(config.pid_file(role), config.role_dir(role))
    if pid is not None:
        # The worker's group also holds the executors it launched.
        stop(pid, grace=30.0)
    config.pid_file(role).unlink(missing_ok=True)
    return pid is not None


def down(config: SparkClusterConfig | None = None) -> dict[str, bool]:
    """Stop the worker (and its executors), then the master; say which were running."""
    config = config or load_spark_config()
    return {role: _stop(config, role) for role in ("worker", "master")}


def status(config: SparkClusterConfig | None = None) -> dict[str, int | None]:
    """The pid of each running role (``None``: not running)."""
    config = config or load_spark_config()
    return {
        role: running_pid(config.pid_file(role), config.role_dir(role))
        for role in ("master", "worker")
    }


@click.group(epilog=ENV_HELP)
def main() -> None:
    """A Spark standalone master and worker on 127.0.0.1."""


@main.command("up")
@click.option("--no-worker", is_flag=True,
              help="The master alone: its workers run elsewhere (dbus image worker).")
def _up_command(no_worker: bool) -> None:
    """Start the master and the worker; print the master URL."""
    click.echo(up(worker=not no_worker))


@main.command("down")
def _down_command() -> None:
    """Stop the worker and the master."""
    for role, was_running in down().items():
        click.echo(f"{role}: {'stopped' if was_running else 'not running'}")


@main.command("status")
def _status_command() -> None:
    """Show whether the master and the worker run."""
    for role, pid in status().items():
        click.echo(f"{role}: {'running, pid ' + str(pid) if pid else 'not running'}")


@main.command("master")
def _master_command() -> None:
    """Run the master in the foreground (what a master container runs); its ports from
    DBUS_SPARK_MASTER_PORT / DBUS_SPARK_MASTER_WEBUI_PORT."""
    run_master()


@main.command("worker")
@click.option("--master", "master_url", required=True, help="spark://HOST:PORT of the master.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The worker's port (0: any free one).")
@click.option("--webui-port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="The worker's web UI port (0: any free one).")
def _worker_command(master_url: str, port: int, webui_port: int) -> None:
    """Run one worker in the foreground (what a worker container runs); cores and
    memory from DBUS_SPARK_WORKER_CORES / DBUS_SPARK_WORKER_MEMORY."""
    run_worker(master_url, port=port, webui_port=webui_port)


if __name__ == "__main__":
    try:
        main(standalone_mode=False)
    except DbusError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
