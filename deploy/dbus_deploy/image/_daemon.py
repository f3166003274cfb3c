"""The Docker engine the image commands talk to: find it, or start a local one.

The client looks where the docker CLI does (``DOCKER_HOST``, else the default
socket) and negotiates the API version, since Debian's ``docker.io`` engine
speaks an older API than the SDK's default. On a machine of our own (root, no
engine yet) :func:`start_daemon` installs ``docker.io`` and runs ``dockerd`` the
way containers here need it: no bridge and no iptables (containers use the host
network on loopback), its log and pid under ``<DBUS_HOME>/docker``.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dbus_deploy.image._errors import DockerUnreachableError, one_line
from dbus_deploy.services import ServicesConfig, ServiceStartError, ToolMissingError, apt_install
from dbus_deploy.services._process import (
    Launch,
    last_log_line,
    running_pid,
    service_pid,
    spawn,
)

if TYPE_CHECKING:
    import docker

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
DOCKERD_FLAGS = ("--bridge=none", "--iptables=false", "--ip6tables=false")
"""No bridge, no NAT rules: the machine's firewall stays as it is; containers run
with ``--network host``."""

START_HINT = (
    "start one with `dbus image daemon` (as root), or point DOCKER_HOST at a running engine"
)


def docker_host(environ: Mapping[str, str]) -> str:
    """Where the client looks for the engine."""
    return environ.get("DOCKER_HOST", "").strip() or DEFAULT_SOCKET


def docker_client(
    environ: Mapping[str, str] | None = None, *, timeout: int = 600
) -> docker.DockerClient:
    """A client of a running engine; :class:`DockerUnreachableError` when none answers."""
    import docker
    import requests

    env = dict(os.environ if environ is None else environ)
    _probe_unix_socket(docker_host(env))
    try:
        # A fixed old API version needs no round trip to set up, so a probe that
        # fails leaves no half-made client (and no open socket) behind.
        probe = docker.APIClient(
            version=docker.constants.MINIMUM_DOCKER_API_VERSION,
            timeout=10,
            **docker.utils.kwargs_from_env(environment=env),
        )
    except docker.errors.DockerException as exc:
        raise DockerUnreachableError(docker_host(env), _reason(exc), START_HINT) from exc
    try:
        probe.ping()
        return docker.DockerClient.from_env(version="auto", timeout=timeout, environment=env)
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise DockerUnreachableError(docker_host(env), _reason(exc), START_HINT) from exc
    finally:
        probe.close()


def _probe_unix_socket(host: str) -> None:
    """Fail early, and with every socket closed, when a unix socket has no listener
    (the SDK's own attempt leaves its socket open)."""
    if not host.startswith("unix://"):
        return
    path = host.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(10)
        try:
            probe.connect(path)
        except OSError as exc:
            raise DockerUnreachableError(host, exc.strerror or str(exc), START_HINT) from None


def _reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, on one short line."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = str(exc) or type(exc).__name__
    for known in ("No such file or directory", "Connection refused", "Permission denied"):
        if known in text:
            return known
    return one_line(text, 160)


def daemon_dir(config: ServicesConfig) -> Path:
    return config.home / "docker"


def start_daemon(
    config: ServicesConfig,
    *,
    progress: Callable[[str], None] = lambda _: None,
    timeout: float = 90.0,
) -> docker.DockerClient:
    """A client of the engine, starting ``dockerd`` (installed if missing) when none answers.

    Only the default socket is ours to start: an unreachable ``DOCKER_HOST`` names
    someone else's engine, and stays an error.
    """
    env = config.environ
    try:
        return docker_client(env)
    except DockerUnreachableError:
        if docker_host(env) != DEFAULT_SOCKET:
            raise
    path = env.get("PATH", os.defpath)
    if shutil.which("dockerd", path=path) is None:
        progress("installing docker.io (Debian's Docker engine)")
        apt_install(config, {"docker.io": "docker"})
    dockerd = shutil.which("dockerd", path=path)
    if dockerd is None:
        raise ToolMissingError("dockerd", "docker", "install it with: apt-get install docker.io")
    if os.geteuid() != 0:
        raise ToolMissingError("root", "docker", "run `dbus image daemon` as root to start dockerd")
    home = daemon_dir(config)
    log_file = home / "dockerd.log"
    pid_file = home / "dockerd.pid"
    started = None
    if running_pid(pid_file, home) is None:
        progress(f"starting dockerd (log: {log_file})")
        # dockerd's own pid file inside our folder also marks the process as ours.
        argv = [dockerd, *DOCKERD_FLAGS, f"--pidfile={home / 'docker.pid'}"]
        # Left by a dockerd of ours that was killed: it would refuse to start.
        (home / "docker.pid").unlink(missing_ok=True)
        started = spawn(Launch(argv=argv, log_file=log_file, cwd=home, env=dict(env)), pid_file)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return docker_client(env)
        except DockerUnreachableError as exc:
            if service_pid(pid_file, home, started) is None:
                raise ServiceStartError(
                    "dockerd",
                    "the process exited",
                    log_file=log_file,
                    last_log_line=last_log_line(log_file),
                ) from exc
            if time.monotonic() > deadline:
                raise ServiceStartError(
                    "dockerd",
                    f"no answer on {DEFAULT_SOCKET} within {timeout:.0f}s",
                    log_file=log_file,
                    last_log_line=last_log_line(log_file),
                ) from exc
        time.sleep(0.5)


def stop_daemon(config: ServicesConfig, *, grace: float = 30.0) -> bool:
    """Stop the dockerd :func:`start_daemon` started (none other); whether one ran.

    Its containers stop with it; its images stay in its data root for the next start.
    """
    from dbus_deploy.services._process import stop

    home = daemon_dir(config)
    pid = running_pid(home / "dockerd.pid", home)
    if pid is None:
        return False
    stop(pid, grace=grace)
    (home / "dockerd.pid").unlink(missing_ok=True)
    return True
