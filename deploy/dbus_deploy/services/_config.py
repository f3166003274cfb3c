"""Configuration of the local services, read in one place.

Everything `dbus services` needs to know that a user may change comes from the
environment (with defaults) through :func:`load_config`, so the CLI, the Python
API and the pytest fixtures always agree on where state lives and which ports
are used. Precedence: explicit argument, then environment, then default. The home
and the ports are decided by the SDK (``dbus_fn.home``, ``dbus_fn.local_services``),
where a runtime reads them too; the heaps and the JVM options are the services' alone.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dbus_fn.errors import ConfigError
from dbus_fn.home import HOME_ENV, dbus_home
from dbus_fn.local_services import (
    HOST,
    PORTS,
    endpoints_file,
    service_dir,
    service_ports,
)

SERVICE_NAMES: tuple[str, ...] = (
    "mariadb",
    "mariadb-replica",
    "mysql",
    "mysql-replica",
    "zookeeper",
    "kafka",
    "elasticsearch",
    "prometheus",
)
"""Every service, in start order (stop order is the reverse)."""
DEFAULT_SERVICES: tuple[str, ...] = ("mariadb", "zookeeper", "kafka", "elasticsearch")
"""What ``up`` starts when no service is named: what dbus itself reads and writes.
Prometheus, which watches dbus, the MariaDB replica a failover moves to, and MySQL
and its replica start only when named."""

# JVM heaps sized for a small shared machine (2 cores, a few GiB to spare).
_HEAPS: tuple[tuple[str, str, str], ...] = (
    ("zookeeper", "DBUS_ZOOKEEPER_HEAP", "256m"),
    ("kafka", "DBUS_KAFKA_HEAP", "1g"),
    ("elasticsearch", "DBUS_ELASTICSEARCH_HEAP", "1g"),
)

_HEAP_PATTERN = re.compile(r"^[1-9][0-9]*[mg]$")

JAVA_OPTIONS_ENV = "DBUS_SERVICES_JAVA_OPTIONS"
"""JVM options of the user's, added to every JVM the services start (ZooKeeper, Kafka
and its storage tool, Elasticsearch), after dbus's own: a GC log, an agent, or, as the
test suite sets it, ``-XX:TieredStopAtLevel=1`` (its services live minutes; without
the optimising compiler a Kafka broker starts on about 40% less CPU)."""


def _repo_root() -> Path:
    """The checkout this package runs from: deploy/dbus_deploy/services -> repo."""
    return Path(__file__).resolve().parents[3]


ENV_HELP = (
    f"Environment: {HOME_ENV} (state directory, default <repo>/.dbus, or "
    "/var/tmp/dbus-<id> for a checkout in a folder other users cannot enter; for this "
    f"checkout {dbus_home({})}), "
    + ", ".join(f"{env} (default {default})" for _, env, default in PORTS)
    + ", "
    + ", ".join(f"{env} (default {default})" for _, env, default in _HEAPS)
    + f", {JAVA_OPTIONS_ENV} (options added to their JVMs, none by default)"
    + ", JAVA_HOME (the Java 17+ to run the JVM services)."
)


@dataclass(frozen=True, slots=True)
class ServicesConfig:
    """Where the services keep their state and which loopback ports they use."""

    home: Path
    ports: Mapping[str, int]
    heaps: Mapping[str, str]
    java_options: tuple[str, ...] = ()
    repo: Path = field(default_factory=_repo_root)
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    host: str = HOST

    def service_dir(self, name: str) -> Path:
        """The directory that holds one service's data, logs, config and pid file."""
        return service_dir(self.home, name)

    @property
    def lib_dir(self) -> Path:
        """Downloaded jars and distributions (Maven Central artefacts)."""
        return self.home / "lib"

    @property
    def endpoints_file(self) -> Path:
        return endpoints_file(self.home)

    @property
    def lock_file(self) -> Path:
        return self.home / "services.lock"


def load_config(environ: Mapping[str, str] | None = None) -> ServicesConfig:
    """Read the services' configuration from ``environ`` (default ``os.environ``)."""
    env = dict(os.environ if environ is None else environ)
    home = dbus_home(env)

    ports = service_ports(env)

    heaps: dict[str, str] = {}
    for name, var, default_heap in _HEAPS:
        heap = env.get(var, "").strip() or default_heap
        if not _HEAP_PATTERN.match(heap):
            raise ConfigError(
                f"{var}={heap!r} is not a JVM heap size; use a size like 512m or 1g, or unset it",
                setting=var,
            )
        heaps[name] = heap

    return ServicesConfig(
        home=home, ports=ports, heaps=heaps, java_options=_java_options(env), environ=env
    )


def _java_options(env: Mapping[str, str]) -> tuple[str, ...]:
    """The JVM options of ``DBUS_SERVICES_JAVA_OPTIONS``, split as a shell would."""
    value = env.get(JAVA_OPTIONS_ENV, "")
    try:
        options = tuple(shlex.split(value))
    except ValueError as exc:
        raise ConfigError(
            f"{JAVA_OPTIONS_ENV}={value!r} cannot be split into options ({exc}); "
            "close its quotes, or unset it",
            setting=JAVA_OPTIONS_ENV,
        ) from None
    stray = [option for option in options if not option.startswith("-")]
    if stray:
        raise ConfigError(
            f"{JAVA_OPTIONS_ENV}={value!r} holds {stray[0]!r}, which is no JVM option; "
            "give options that start with '-' (like -XX:TieredStopAtLevel=1), or unset it",
            setting=JAVA_OPTIONS_ENV,
        )
    return options
