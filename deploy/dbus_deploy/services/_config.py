"""Configuration of the local services, read in one place.

Everything `dbus services` needs to know that a user may change comes from the
environment (with defaults) through :func:`load_config`, so the CLI, the Python
API and the pytest fixtures always agree on where state lives and which ports
are used. Precedence: explicit argument, then environment, then default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dbus_fn.errors import ConfigError
from dbus_fn.home import HOME_ENV, dbus_home

SERVICE_NAMES: tuple[str, ...] = ("mariadb", "zookeeper", "kafka", "elasticsearch", "prometheus")
"""Every service, in start order (stop order is the reverse)."""
DEFAULT_SERVICES: tuple[str, ...] = SERVICE_NAMES[:4]
"""What ``up`` starts when no service is named: what dbus itself reads and writes.
Prometheus, which watches dbus, starts only when named."""

# (setting, environment variable, default)
_PORTS: tuple[tuple[str, str, int], ...] = (
    ("mariadb", "DBUS_MARIADB_PORT", 3306),
    ("zookeeper", "DBUS_ZOOKEEPER_PORT", 2181),
    ("kafka", "DBUS_KAFKA_PORT", 9092),
    ("kafka_controller", "DBUS_KAFKA_CONTROLLER_PORT", 9093),
    ("elasticsearch", "DBUS_ELASTICSEARCH_PORT", 9200),
    ("prometheus", "DBUS_PROMETHEUS_PORT", 9090),
)
PORT_VARIABLES = tuple(variable for _, variable, _ in _PORTS)
"""The environment variables that move a service to another port."""

# JVM heaps sized for a small shared machine (2 cores, a few GiB to spare).
_HEAPS: tuple[tuple[str, str, str], ...] = (
    ("zookeeper", "DBUS_ZOOKEEPER_HEAP", "256m"),
    ("kafka", "DBUS_KAFKA_HEAP", "1g"),
    ("elasticsearch", "DBUS_ELASTICSEARCH_HEAP", "1g"),
)

_HEAP_PATTERN = re.compile(r"^[1-9][0-9]*[mg]$")

PORT_ENV: dict[str, str] = {name: env for name, env, _ in _PORTS}
"""The environment variable that sets each port, for error messages and --help."""


def _repo_root() -> Path:
    """The checkout this package runs from: deploy/dbus_deploy/services -> repo."""
    return Path(__file__).resolve().parents[3]


ENV_HELP = (
    f"Environment: {HOME_ENV} (state directory, default <repo>/.dbus, or "
    "/var/tmp/dbus-<id> for a checkout in a folder other users cannot enter; for this "
    f"checkout {dbus_home({})}), "
    + ", ".join(f"{env} (default {default})" for _, env, default in _PORTS)
    + ", "
    + ", ".join(f"{env} (default {default})" for _, env, default in _HEAPS)
    + ", JAVA_HOME (the Java 17+ to run the JVM services)."
)


@dataclass(frozen=True, slots=True)
class ServicesConfig:
    """Where the services keep their state and which loopback ports they use."""

    home: Path
    ports: Mapping[str, int]
    heaps: Mapping[str, str]
    repo: Path = field(default_factory=_repo_root)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    host: str = "127.0.0.1"

    def service_dir(self, name: str) -> Path:
        """The directory that holds one service's data, logs, config and pid file."""
        return self.home / "services" / name

    @property
    def lib_dir(self) -> Path:
        """Downloaded jars and distributions (Maven Central artefacts)."""
        return self.home / "lib"

    @property
    def endpoints_file(self) -> Path:
        return self.home / "endpoints.json"

    @property
    def lock_file(self) -> Path:
        return self.home / "services.lock"


def _parse_port(env: str, raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ConfigError(
            f"{env}={raw!r} is not a TCP port; set it to a number from 1 to 65535 or unset it",
            setting=env,
        )
    return port


def load_config(environ: Mapping[str, str] | None = None) -> ServicesConfig:
    """Read the services' configuration from ``environ`` (default ``os.environ``)."""
    env = dict(os.environ if environ is None else environ)
    home = dbus_home(env)

    ports: dict[str, int] = {}
    owners: dict[int, str] = {}
    for name, var, default_port in _PORTS:
        raw = env.get(var, "").strip()
        port = _parse_port(var, raw) if raw else default_port
        if port in owners:
            raise ConfigError(
                f"{var} and {owners[port]} are both {port}; every service needs its own port, "
                f"change one of them",
                setting=var,
            )
        owners[port] = var
        ports[name] = port

    heaps: dict[str, str] = {}
    for name, var, default_heap in _HEAPS:
        heap = env.get(var, "").strip() or default_heap
        if not _HEAP_PATTERN.match(heap):
            raise ConfigError(
                f"{var}={heap!r} is not a JVM heap size; use a size like 512m or 1g, or unset it",
                setting=var,
            )
        heaps[name] = heap

    return ServicesConfig(home=home, ports=ports, heaps=heaps, environ=env)
