"""The real local services dbus develops and tests against, on 127.0.0.1 only.

MariaDB (ROW binlog), ZooKeeper, an Apache Kafka broker (KRaft) and
Elasticsearch 8, installed from Debian packages and Maven Central and run from
one state directory (``$DBUS_HOME``, else ``<repo>/.dbus``, or ``/var/tmp/dbus-<id>``
for a checkout other users cannot enter); and, when named,
Prometheus, which scrapes the runtimes' metrics.
"""

from __future__ import annotations

from dbus_deploy.services._config import (
    DEFAULT_SERVICES,
    ENV_HELP,
    SERVICE_NAMES,
    ServicesConfig,
    load_config,
)
from dbus_deploy.services._errors import (
    InstallError,
    PortInUseError,
    ServiceStartError,
    ToolMissingError,
)
from dbus_deploy.services._install import apt_install
from dbus_deploy.services._lifecycle import ServiceStatus, down, restart, status, stopped, up
from dbus_fn.local_services import (
    PORT_VARIABLES,
    ElasticsearchEndpoint,
    Endpoints,
    KafkaEndpoint,
    MariaDBEndpoint,
    PrometheusEndpoint,
    ZooKeeperEndpoint,
)
from dbus_fn.local_services import local_endpoints as endpoints

__all__ = [
    "DEFAULT_SERVICES",
    "ENV_HELP",
    "PORT_VARIABLES",
    "SERVICE_NAMES",
    "ElasticsearchEndpoint",
    "Endpoints",
    "InstallError",
    "KafkaEndpoint",
    "MariaDBEndpoint",
    "PortInUseError",
    "PrometheusEndpoint",
    "ServiceStartError",
    "ServiceStatus",
    "ServicesConfig",
    "ToolMissingError",
    "ZooKeeperEndpoint",
    "apt_install",
    "down",
    "endpoints",
    "load_config",
    "restart",
    "status",
    "stopped",
    "up",
]
