"""``up``, ``down``, ``status`` and ``restart`` of the local services.

``up`` is idempotent: what runs is left alone (and checked), what does not is
installed if needed, started, and waited on with a real health check. It also
removes the homes of deleted checkouts (``_homes``). If any
service fails, every service this call started is stopped again, so a failed
``up`` leaves nothing behind. A file lock serialises concurrent calls (two test
sessions starting at once must not both start MariaDB).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from dbus_deploy.services._config import (
    DEFAULT_SERVICES,
    SERVICE_NAMES,
    ServicesConfig,
    load_config,
)
from dbus_deploy.services._elasticsearch import Elasticsearch
from dbus_deploy.services._endpoints import write_endpoints
from dbus_deploy.services._errors import PortInUseError, ServiceStartError
from dbus_deploy.services._homes import tidy_homes
from dbus_deploy.services._install import apt_install
from dbus_deploy.services._kafka import Kafka
from dbus_deploy.services._mariadb import MariaDB, MariaDBReplica
from dbus_deploy.services._mysql import MySQL, MySQLReplica
from dbus_deploy.services._process import (
    last_log_line,
    log_sizes,
    running_pid,
    service_pid,
    spawn,
    stop,
)
from dbus_deploy.services._prometheus import Prometheus
from dbus_deploy.services._service import Service
from dbus_deploy.services._zookeeper import ZooKeeper
from dbus_fn.errors import ConfigError

Progress = Callable[[str], None]

_UNHEALTHY_GRACE = 5.0
"""Seconds a service that never became healthy gets to stop before KILL."""

_SERVICES: dict[str, type[Service]] = {
    "mariadb": MariaDB,
    "mariadb-replica": MariaDBReplica,
    "mysql": MySQL,
    "mysql-replica": MySQLReplica,
    "zookeeper": ZooKeeper,
    "kafka": Kafka,
    "elasticsearch": Elasticsearch,
    "prometheus": Prometheus,
}


@dataclass(frozen=True, slots=True)
class ServiceStatus:
    """One service as ``status`` (and ``up``/``down``) see it."""

    name: str
    running: bool
    pid: int | None
    ports: tuple[int, ...]
    log_file: str
    action: str = ""
    """What this call did: started, already running, stopped, not running."""
    seconds: float | None = None


def _select(
    names: Iterable[str] | None, config: ServicesConfig, default: Iterable[str] = SERVICE_NAMES
) -> list[Service]:
    wanted = list(names or default)
    unknown = [name for name in wanted if name not in SERVICE_NAMES]
    if unknown:
        raise ConfigError(
            f"unknown service {', '.join(unknown)}; choose from {', '.join(SERVICE_NAMES)}",
            setting="NAME",
        )
    # Keep start order whatever order the names came in.
    return [_SERVICES[name](config) for name in SERVICE_NAMES if name in wanted]


@contextlib.contextmanager
def _locked(config: ServicesConfig) -> Iterator[None]:
    config.home.mkdir(parents=True, exist_ok=True)
    with config.lock_file.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """Turn SIGTERM into ``SystemExit`` while ``up`` runs, so its clean-up still happens.

    Without this, ``timeout dbus services up`` or a CI job being cancelled would
    leave half-started services behind. Only the main thread may set handlers.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR: a port in TIME_WAIT is free to listen on; a listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def _status(service: Service, action: str = "", seconds: float | None = None) -> ServiceStatus:
    pid = running_pid(service.pid_file, service.root)
    return ServiceStatus(
        name=service.name,
        running=pid is not None,
        pid=pid,
        ports=tuple(port for port, _ in service.ports()),
        log_file=str(service.log_file),
        action=action,
        seconds=seconds,
    )


def _start_failure(service: Service, reason: str, since: dict[Path, int]) -> ServiceStartError:
    return ServiceStartError(
        service.name,
        reason,
        log_file=service.log_file,
        last_log_line=last_log_line(*service.diagnostic_logs(), since=since),
    )


def _wait_healthy(
    pending: dict[str, tuple[Service, subprocess.Popen[bytes] | None]],
    started_at: float,
    progress: Progress,
    ready: dict[str, float],
    log_starts: dict[str, dict[Path, int]],
) -> None:
    """Poll every pending service until healthy (recorded in ``ready``); fail on
    exit or timeout, quoting the service's log from ``log_starts`` on."""
    while pending:
        for name, (service, process) in list(pending.items()):
            since = log_starts.get(name, {})
            if process is not None and process.poll() is not None:
                raise _start_failure(
                    service, f"the process exited with code {process.returncode}", since
                )
            reason = service.check_health()
            if reason is None:
                ready[name] = time.monotonic() - started_at
                if process is not None:  # one already running is reported by the caller
                    progress(f"{name}: healthy after {ready[name]:.1f}s")
                del pending[name]
                continue
            if time.monotonic() - started_at > service.start_timeout:
                raise _start_failure(
                    service, f"not healthy after {service.start_timeout:.0f}s ({reason})", since
                )
        if pending:
            time.sleep(0.5)


def up(
    names: Sequence[str] | None = None,
    *,
    config: ServicesConfig | None = None,
    progress: Progress | None = None,
) -> list[ServiceStatus]:
    """Make sure the named services (default: ``DEFAULT_SERVICES``) run and are healthy."""
    config = config or load_config()
    say = progress or (lambda _message: None)
    services = _select(names, config, DEFAULT_SERVICES)
    with _locked(config), _terminate_raises():
        tidy_homes(config.home, say)
        running = {s.name: running_pid(s.pid_file, s.root) for s in services}
        to_start = [s for s in services if running[s.name] is None]
        for service in to_start:
            service.pid_file.unlink(missing_ok=True)  # stale, if any
            for port, env_var in service.ports():
                if _port_in_use(config.host, port):
                    raise PortInUseError(service.name, port, env_var)
        packages: dict[str, str] = {}
        for service in to_start:
            packages.update(service.apt_packages())
        if packages:
            say(f"installing Debian packages: {' '.join(packages)}")
        apt_install(config, packages)
        for service in to_start:
            service.install()

        started: list[tuple[Service, subprocess.Popen[bytes]]] = []
        ready: dict[str, float] = {}
        log_starts: dict[str, dict[Path, int]] = {}
        began = time.monotonic()
        try:
            pending: dict[str, tuple[Service, subprocess.Popen[bytes] | None]] = {}
            for service in services:
                if running[service.name] is None:
                    say(f"{service.name}: starting (log: {service.log_file})")
                    log_starts[service.name] = log_sizes(service.diagnostic_logs())
                    process = spawn(service.prepare(), service.pid_file)
                    pending[service.name] = (service, process)
                    started.append((service, process))
                else:
                    pending[service.name] = (service, None)
            _wait_healthy(pending, began, say, ready, log_starts)
        except BaseException:
            for service, process in reversed(started):
                # A server interrupted mid start-up may ignore TERM for good
                # (MariaDB does while it runs its init file): do not wait long.
                grace = None if service.name in ready else _UNHEALTHY_GRACE
                _stop(service, grace, started=process)
            raise
        write_endpoints(config, [s.name for s in services])
    return [
        _status(
            s,
            "already running" if running[s.name] is not None else "started",
            ready.get(s.name),
        )
        for s in services
    ]


def _stop(
    service: Service, grace: float | None = None, *, started: subprocess.Popen[bytes] | None = None
) -> bool:
    """Stop ``service`` (``started``: the process this ``up`` started for it); whether it ran."""
    pid = service_pid(service.pid_file, service.root, started)
    if pid is not None:
        stop(pid, grace=service.stop_grace if grace is None else grace)
    service.pid_file.unlink(missing_ok=True)
    return pid is not None


def down(
    names: Sequence[str] | None = None, *, config: ServicesConfig | None = None
) -> list[ServiceStatus]:
    """Stop the named services (default: all) that this state directory started."""
    config = config or load_config()
    services = _select(names, config)
    with _locked(config):
        stopped = {s.name: _stop(s) for s in reversed(services)}
    return [_status(s, "stopped" if stopped[s.name] else "not running") for s in services]


def status(
    names: Sequence[str] | None = None, *, config: ServicesConfig | None = None
) -> list[ServiceStatus]:
    """Each service, whether it runs, its pid and ports."""
    config = config or load_config()
    return [_status(s) for s in _select(names, config)]


def stopped(names: Iterable[str], *, config: ServicesConfig | None = None) -> list[str]:
    """One line for each named service that no longer runs: its name, its log's most
    telling line and where that log is (a test run asks before each test, so a broker
    that died, say on a full disk, ends the tests at once instead of in timeouts)."""
    config = config or load_config()
    lines = []
    for service in _select(names, config):
        if running_pid(service.pid_file, service.root) is None:
            said = last_log_line(*service.diagnostic_logs()) or "its log says nothing"
            lines.append(f"{service.name} is not running: {said} (log: {service.log_file})")
    return lines


def restart(
    names: Sequence[str] | None = None,
    *,
    config: ServicesConfig | None = None,
    progress: Progress | None = None,
) -> list[ServiceStatus]:
    """Stop then start the named services (for fault tests)."""
    config = config or load_config()
    names = list(names or DEFAULT_SERVICES)
    down(names, config=config)
    return up(names, config=config, progress=progress)
