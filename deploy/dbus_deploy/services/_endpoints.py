"""Where the running services can be reached, as typed values and ``endpoints.json``.

``dbus services up`` writes ``<home>/endpoints.json`` so that other processes
(tests, the demo, a shell) connect to the ports that were actually used even
when the environment that chose them is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from dbus_deploy.services._config import ServicesConfig, load_config
from dbus_deploy.services._mariadb import PASSWORD, USER
from dbus_deploy.services._prometheus import targets_dir


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["mariadb"]["dsn"] = self.mariadb.dsn
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Endpoints:
        mariadb = {k: v for k, v in data["mariadb"].items() if k != "dsn"}
        return cls(
            mariadb=MariaDBEndpoint(**mariadb),
            zookeeper=ZooKeeperEndpoint(**data["zookeeper"]),
            kafka=KafkaEndpoint(**data["kafka"]),
            elasticsearch=ElasticsearchEndpoint(**data["elasticsearch"]),
            # Written before Prometheus was a service: where it would listen now.
            prometheus=PrometheusEndpoint(**data["prometheus"])
            if "prometheus" in data
            else Endpoints.from_config(load_config()).prometheus,
        )

    @classmethod
    def from_config(cls, config: ServicesConfig) -> Endpoints:
        host, ports = config.host, config.ports
        return cls(
            mariadb=MariaDBEndpoint(host=host, port=ports["mariadb"], user=USER, password=PASSWORD),
            zookeeper=ZooKeeperEndpoint(hosts=f"{host}:{ports['zookeeper']}"),
            kafka=KafkaEndpoint(bootstrap_servers=f"{host}:{ports['kafka']}"),
            elasticsearch=ElasticsearchEndpoint(url=f"http://{host}:{ports['elasticsearch']}"),
            prometheus=PrometheusEndpoint(
                url=f"http://{host}:{ports['prometheus']}", targets_dir=str(targets_dir(config))
            ),
        )


def write_endpoints(config: ServicesConfig, names: Iterable[str]) -> Endpoints:
    """Record the endpoints of ``names``; other services keep what the file said."""
    current = Endpoints.from_config(config)
    previous = endpoints(config)
    found = replace(previous, **{name: getattr(current, name) for name in names})
    config.home.mkdir(parents=True, exist_ok=True)
    partial = config.endpoints_file.with_suffix(".json.partial")
    partial.write_text(json.dumps(found.to_json(), indent=2) + "\n")
    partial.replace(config.endpoints_file)
    return found


def endpoints(config: ServicesConfig | None = None) -> Endpoints:
    """The endpoints written by the last ``up``, else those the configuration names."""
    config = config or load_config()
    try:
        return Endpoints.from_json(json.loads(config.endpoints_file.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return Endpoints.from_config(config)
