"""What every local service provides to the lifecycle: install, launch, health.

Each service lives in ``<home>/services/<name>/`` with ``data/``, ``logs/``,
``config/``, ``run/`` and ``<name>.pid``; subclasses add what is particular to
their software.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from dbus_deploy.services._config import ServicesConfig
from dbus_deploy.services._process import Launch
from dbus_fn.local_services import PORT_ENV


class Service(ABC):
    """One local service: how to install it, start it and tell that it is healthy."""

    name: ClassVar[str]
    log_name: ClassVar[str]
    """The log in ``logs/`` that explains a failed start."""
    other_logs: ClassVar[tuple[str, ...]] = ()
    """More logs in ``logs/`` that may explain it, after ``log_name``."""
    start_timeout: ClassVar[float] = 90.0
    stop_grace: ClassVar[float] = 30.0

    def __init__(self, config: ServicesConfig) -> None:
        self.config = config
        self.root = config.service_dir(self.name)
        self.data = self.root / "data"
        self.logs = self.root / "logs"
        self.conf = self.root / "config"
        self.run = self.root / "run"
        self.pid_file = self.root / f"{self.name}.pid"

    @property
    def port(self) -> int:
        return self.config.ports[self.name]

    @property
    def pom_dir(self) -> Path:
        """The service's recipe in the checkout, ``deploy/services/<name>/`` (a Maven pom)."""
        return self.config.repo / "deploy" / "services" / self.name

    def ports(self) -> list[tuple[int, str]]:
        """``(port, environment variable)`` for every port the service listens on."""
        return [(self.port, PORT_ENV[self.name])]

    def apt_packages(self) -> dict[str, str]:
        """Debian packages this service still needs, as ``{package: service}``."""
        return {}

    def install(self) -> None:  # noqa: B027 - most services have nothing beyond apt
        """Fetch what apt does not provide (Maven artefacts); idempotent."""

    @abstractmethod
    def prepare(self) -> Launch:
        """Write configuration, initialise storage once, and say how to start."""

    @abstractmethod
    def check_health(self) -> str | None:
        """``None`` when the service answers as it should, else why not (yet)."""

    @property
    def log_file(self) -> Path:
        """The log that explains a failed start."""
        return self.logs / self.log_name

    def diagnostic_logs(self) -> list[Path]:
        """Logs to search for the last meaningful line, most telling first."""
        return [self.log_file, *(self.logs / name for name in self.other_logs)]

    def _make_dirs(self) -> None:
        for directory in (self.data, self.logs, self.conf, self.run):
            directory.mkdir(parents=True, exist_ok=True)
