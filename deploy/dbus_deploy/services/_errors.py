"""Failures of `dbus services`: each names the service, the cause and the fix.

They are leaves of :class:`dbus_fn.errors.ServiceError`, so the ``dbus`` CLI
prints them as one line and exits non-zero, and they carry the facts (port,
environment variable, log file) as fields for callers and tests.
"""

from __future__ import annotations

from pathlib import Path

from dbus_fn.errors import ServiceError


class PortInUseError(ServiceError):
    """Another process already listens on a port a service needs."""

    def __init__(self, service: str, port: int, env_var: str) -> None:
        super().__init__(
            f"{service} cannot start: port {port} on 127.0.0.1 is already in use by another "
            f"process; stop that process or choose another port with {env_var}=<port>",
            service=service,
        )
        self.port = port
        self.env_var = env_var


class ToolMissingError(ServiceError):
    """A program the services need (java, mvn, apt-get) is not installed."""

    def __init__(self, tool: str, needed_by: str, fix: str) -> None:
        super().__init__(
            f"{tool} is needed by {needed_by} but was not found; {fix}", service=needed_by
        )
        self.tool = tool


class _LoggedFailure(ServiceError):
    """A failure whose explanation is in a log file: name it and quote it."""

    def __init__(
        self, service: str, summary: str, *, log_file: Path, last_log_line: str | None
    ) -> None:
        detail = f"; last log line: {last_log_line}" if last_log_line else ""
        super().__init__(f"{summary}; see {log_file}{detail}", service=service)
        self.log_file = log_file
        self.last_log_line = last_log_line


class ServiceStartError(_LoggedFailure):
    """A service process exited or did not become healthy in time."""

    def __init__(
        self, service: str, reason: str, *, log_file: Path, last_log_line: str | None
    ) -> None:
        super().__init__(
            service,
            f"{service} did not start: {reason}",
            log_file=log_file,
            last_log_line=last_log_line,
        )
        self.reason = reason


class InstallError(_LoggedFailure):
    """Installing a service's software (apt, Maven) failed."""

    def __init__(
        self, service: str, step: str, *, log_file: Path, last_log_line: str | None
    ) -> None:
        super().__init__(
            service,
            f"installing {service} failed at `{step}`",
            log_file=log_file,
            last_log_line=last_log_line,
        )
        self.step = step
