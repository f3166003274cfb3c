"""Where the local services (`dbus services up`) listen, as typed values and ``endpoints.json``.

The ports come from ``DBUS_*_PORT`` (with defaults); ``dbus services up`` records
the endpoints it used in ``<home>/endpoints.json`` (home: ``dbus_fn.home``), so
that other processes (a runtime, tests, the demo, a shell) connect to the ports
that were actually used even when the environment that chose them is gone. The
services themselves are started by ``dbus_deploy.services``, which writes the
file; a runtime only reads it (``local_endpoints``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from dbus_fn.errors import ConfigError
from dbus_fn.home import dbus_home

HOST: Final = "127.0.0.1"
"""The services listen on loopback only."""

MARIADB_USER: Final = "dbus"
MARIADB_PASSWORD: Final = "dbus"
"""The account ``dbus services up`` creates in the local MariaDB."""

PORTS: tuple[tuple[str, str, int], ...] = (
    ("mariadb", "DBUS_MARIADB_PORT", 3306),
    ("mariadb_replica", "DBUS_MARIADB_REPLICA_PORT", 3406),
    ("mysql", "DBUS_MYSQL_PORT", 3316),
    ("mysql_replica", "DBUS_MYSQL_REPLICA_PORT", 3416),
    ("zookeeper", "DBUS_ZOOKEEPER_PORT", 2181),
    ("kafka", "DBUS_KAFKA_PORT", 9092),
    ("kafka_controller", "DBUS_KAFKA_CONTROLLER_PORT", 9093),
    ("elasticsearch", "DBUS_ELASTICSEARCH_PORT", 9200),
    ("prometheus", "DBUS_PROMETHEUS_PORT", 9090),
)
"""Each port: (setting, environment variable, default)."""

PORT_VARIABLES = tuple(variable for _, variable, _ in PORTS)
"""The environment variables that move a service to another port."""

PORT_ENV: dict[str, str] = {name: env for name, env, _ in PORTS}
"""The environment variable that sets each port, for error messages and --help."""


def service_ports(environ: Mapping[str, str]) -> dict[str, int]:
    """Every service's port from ``environ``; ``ConfigError`` naming the variable for a
    value that is not a port, or two services on one port."""
    ports: dict[str, int] = {}
    owners: dict[int, str] = {}
    for name, var, default_port in PORTS:
        raw = environ.get(var, "").strip()
        port = _parse_port(var, raw) if raw else default_port
        if port in owners:
            raise ConfigError(
                f"{var} and {owners[port]} are both {port}; every service needs its own port, "
                f"change one of them",
                setting=var,
            )
        owners[port] = var
        ports[name] = port
    return ports


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


def service_dir(home: Path, name: str) -> Path:
    """The folder that holds one service's data, logs, config and pid file."""
    return home / "services" / name


def prometheus_targets(home: Path) -> Path:
    """Where a file ``<name>.json`` adds scrape targets (file service discovery)."""
    return service_dir(home, "prometheus") / "config" / "targets"


def endpoints_file(home: Path) -> Path:
    """The endpoints the last ``dbus services up`` used."""
    return home / "endpoints.json"


class ServicesLayout(Protocol):
    """What the endpoints follow from: the home, the ports and the host."""

    @property
    def home(self) -> Path: ...
    @property
    def ports(self) -> Mapping[str, int]: ...
    @property
    def host(self) -> str: ...


@dataclass(frozen=True, slots=True)
class _Layout:
    home: Path
    ports: Mapping[str, int]
    host: str = HOST


@dataclass(frozen=True, slots=True)
class MariaDBEndpoint:
    host: str
    port: int
    user: str
    password: str

    @property
    def dsn(self) -> str:
        """``mysql://user:password@host:port``, the form sources are configured with."""
        return f"mysql://{self.user}:{self.password}@{self.host}:{self.port}"

    def connect(self, database: str | None = None, **options: Any) -> Any:
        """A PyMySQL connection as this endpoint's user: utf8mb4, autocommit unless
        ``options`` say otherwise."""
        import pymysql

        settings: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "autocommit": True,
            "charset": "utf8mb4",
        }
        if database is not None:
            settings["database"] = database
        settings.update(options)
        return pymysql.connect(**settings)


@dataclass(frozen=True, slots=True)
class ZooKeeperEndpoint:
    hosts: str
    """``host:port`` connection string for kazoo."""


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    bootstrap_servers: str


@dataclass(frozen=True, slots=True)
class ElasticsearchEndpoint:
    url: str


@dataclass(frozen=True, slots=True)
class PrometheusEndpoint:
    url: str
    targets_dir: str
    """A JSON file here (``[{"targets": ["host:port"], "labels": {...}}]``) adds
    runtimes to scrape."""


@dataclass(frozen=True, slots=True)
class Endpoints:
    """How to reach each local service."""

    mariadb: MariaDBEndpoint
    zookeeper: ZooKeeperEndpoint
    kafka: KafkaEndpoint
    elasticsearch: ElasticsearchEndpoint
    prometheus: PrometheusEndpoint
    mariadb_replica: MariaDBEndpoint
    """A replica of ``mariadb`` (GTID replication), started only when named: a
    primary and a server to fail over to."""
    mysql: MariaDBEndpoint
    """MySQL (9.x), started only when named: the same account as MariaDB's."""
    mysql_replica: MariaDBEndpoint
    """A replica of ``mysql`` (GTID auto-position), started only when named."""

    @property
    def failover_dsn(self) -> str:
        """The DSN of the primary and its replica, in that order (a source that
        follows a failover)."""
        return f"{self.mariadb.dsn},{self.mariadb_replica.host}:{self.mariadb_replica.port}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["mariadb"]["dsn"] = self.mariadb.dsn
        for name in ("mariadb_replica", "mysql", "mysql_replica"):
            data[name]["dsn"] = getattr(self, name).dsn
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoints:
        mariadb = {k: v for k, v in data["mariadb"].items() if k != "dsn"}
        replica = {k: v for k, v in data.get("mariadb_replica", {}).items() if k != "dsn"}
        # Written before Prometheus, the replica or MySQL were services: where they would
        # be now.
        later = ("prometheus", "mariadb_replica", "mysql", "mysql_replica")
        configured = (
            None if all(name in data for name in later) else Endpoints.from_config(_configured())
        )

        def database(name: str) -> MariaDBEndpoint:
            if name in data:
                return MariaDBEndpoint(**{k: v for k, v in data[name].items() if k != "dsn"})
            assert configured is not None
            found: MariaDBEndpoint = getattr(configured, name)
            return found

        return cls(
            mariadb=MariaDBEndpoint(**mariadb),
            zookeeper=ZooKeeperEndpoint(**data["zookeeper"]),
            kafka=KafkaEndpoint(**data["kafka"]),
            elasticsearch=ElasticsearchEndpoint(**data["elasticsearch"]),
            prometheus=PrometheusEndpoint(**data["prometheus"])
            if configured is None or "prometheus" in data
            else configured.prometheus,
            mariadb_replica=MariaDBEndpoint(**replica)
            if configured is None or replica
            else configured.mariadb_replica,
            mysql=database("mysql"),
            mysql_replica=database("mysql_replica"),
        )

    @classmethod
    def from_config(cls, config: ServicesLayout) -> Endpoints:
        host, ports = config.host, config.ports
        return cls(
            mariadb=MariaDBEndpoint(
                host=host, port=ports["mariadb"], user=MARIADB_USER, password=MARIADB_PASSWORD
            ),
            mariadb_replica=MariaDBEndpoint(
                host=host,
                port=ports["mariadb_replica"],
                user=MARIADB_USER,
                password=MARIADB_PASSWORD,
            ),
            mysql=MariaDBEndpoint(
                host=host, port=ports["mysql"], user=MARIADB_USER, password=MARIADB_PASSWORD
            ),
            mysql_replica=MariaDBEndpoint(
                host=host, port=ports["mysql_replica"], user=MARIADB_USER, password=MARIADB_PASSWORD
            ),
            zookeeper=ZooKeeperEndpoint(hosts=f"{host}:{ports['zookeeper']}"),
            kafka=KafkaEndpoint(bootstrap_servers=f"{host}:{ports['kafka']}"),
            elasticsearch=ElasticsearchEndpoint(url=f"http://{host}:{ports['elasticsearch']}"),
            prometheus=PrometheusEndpoint(
                url=f"http://{host}:{ports['prometheus']}",
                targets_dir=str(prometheus_targets(config.home)),
            ),
        )


def _configured() -> _Layout:
    """The home and ports the environment names."""
    return _Layout(home=dbus_home(), ports=service_ports(os.environ))


def local_endpoints(config: ServicesLayout | None = None) -> Endpoints:
    """The endpoints written by the last ``up``, else those the configuration names
    (``config``, default: the environment's). A malformed ``DBUS_*_PORT`` is the user's
    to fix, so its ``ConfigError`` surfaces."""
    layout = config or _configured()
    try:
        return Endpoints.from_json(json.loads(endpoints_file(layout.home).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return Endpoints.from_config(layout)
