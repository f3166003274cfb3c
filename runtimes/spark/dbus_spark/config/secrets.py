"""Source DSNs kept in the runtime's memory, never in its configuration file.

The configuration file beside the checkpoint is how the runtime's process hands
its settings to Spark's Python workers on the driver's host (the source's
planner) and to the ``dbus fn`` commands; it holds each source's DSN without its
password. The process that writes the file keeps the full DSNs and answers for
them on a Unix socket in the abstract namespace: no file at all, and only
processes of the same user are answered (the peer's credentials are checked).
Its name is derived from the configuration file's path, which the file records.

A process asking is on the driver's host: the planner, the metrics, ``dbus fn
verify``. Executors get the DSNs inside their tasks (``dbus_spark.stage.shipment``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Mapping
from pathlib import Path

from dbus_fn.errors import ConfigError

ASK_SECONDS = 5.0


def keeper_name(config_path: str | Path) -> str:
    """The abstract socket that answers for the runtime configured at ``config_path``."""
    digest = hashlib.sha256(str(Path(config_path).resolve()).encode()).hexdigest()[:24]
    return f"dbus-secrets-{digest}"


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        credentials = self.request.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
        )
        _, uid, _ = struct.unpack("3i", credentials)
        if uid != os.getuid():
            return  # another user: no answer at all
        name = self.rfile.readline(256).decode(errors="replace").strip()
        dsn = self.server.dsns.get(name, "")
        self.wfile.write(dsn.encode() + b"\n")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, name: str) -> None:
        self.dsns: dict[str, str] = {}
        super().__init__("\0" + name, _Handler)


_servers: dict[str, _Server] = {}
_lock = threading.Lock()


def keep(config_path: str | Path, dsns: Mapping[str, str]) -> str:
    """Answer for ``dsns`` (source name to full DSN) of the runtime configured at
    ``config_path`` from now on, in this process; return the socket's name."""
    name = keeper_name(config_path)
    with _lock:
        server = _servers.get(name)
        if server is None:
            try:
                server = _Server(name)
            except OSError as exc:
                raise ConfigError(
                    f"another running process keeps the runtime configured at {config_path} "
                    f"({exc.strerror}): stop it, or give this runtime its own --checkpoint",
                    setting="checkpoint",
                ) from None
            threading.Thread(target=server.serve_forever, name="dbus-secrets", daemon=True).start()
            _servers[name] = server
        server.dsns = dict(dsns)
    return name


def ask(name: str, source: str, config_path: str | Path) -> str:
    """The full DSN of ``source`` from the process keeping it; ``ConfigError`` naming
    the fix when none answers (the runtime stopped) or it does not know the source."""
    with _lock:
        here = _servers.get(name)
    if here is not None and source in here.dsns:
        return here.dsns[source]
    answer = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(ASK_SECONDS)
            sock.connect("\0" + name)
            sock.sendall(source.encode() + b"\n")
            while not answer.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        answer = b""
    dsn = answer.decode(errors="replace").strip()
    if not dsn:
        raise ConfigError(
            f"the password of source {source} is not kept on disk, and the runtime that "
            f"wrote {config_path} does not answer for it: run this while that runtime runs",
            setting="sources",
        )
    return dsn
