"""Helpers shared by the capture tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dbus_fn import BinlogPosition, RowChange, SchemaChange, TransactionCommit
from dbus_fn.capture import BinlogReader

TablesAt = Callable[..., tuple[Any, BinlogPosition]]
"""``tables_at(*statements)``: a connection to the test's database after running the
statements (tables to capture), and the source's position right after them."""


def execute(connection: Any, *statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


IDLE_GUARD = 10.0
"""Seconds without a change to the test's tables that end a read short of its ``stop``:
the server says so with heartbeats only once the read is at its end, so a slow read is
never cut short; a read that got everything returns at ``stop``, not after this."""


def read_all(
    reader: BinlogReader, start: str | BinlogPosition, stop: BinlogPosition | None = None
) -> list[Any]:
    """Every item from ``start`` up to the source's current end (or ``stop``); one
    that stalls short of it ends after ``IDLE_GUARD`` instead of hanging."""
    end = stop or reader.master_position()
    return list(reader.read(start, stop=end, idle_timeout=IDLE_GUARD))


def rows(items: list[Any]) -> list[RowChange]:
    return [item for item in items if isinstance(item, RowChange)]


def commits(items: list[Any]) -> list[TransactionCommit]:
    return [item for item in items if isinstance(item, TransactionCommit)]


def schema_changes(items: list[Any]) -> list[SchemaChange]:
    return [item for item in items if isinstance(item, SchemaChange)]


def row_ids(items: list[Any], column: str = "id") -> list[tuple[str, Any]]:
    return [(change.op.value, change.row[column]) for change in rows(items)]


class StallingProxy:
    """A TCP forwarder to the real server whose open connections can be frozen.

    A network stall (packets stop, nothing is closed) is a fault no real server
    gives on demand; new connections after ``stall()`` are forwarded normally.
    """

    def __init__(
        self, host: str, port: int, greeting: Callable[[bytes], bytes] | None = None
    ) -> None:
        """``greeting``: rewrites what the server sends first on each connection (its
        handshake packet), to make it look like a server it is not."""
        import socket
        import threading

        self._upstream = (host, port)
        self._greeting = greeting
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[dict[str, Any]] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            pair = {"sockets": (client, server), "stalled": False}
            self._pairs.append(pair)
            if self._greeting is not None:
                client.sendall(self._greeting(server.recv(65536)))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, a, b), daemon=True).start()

    def _pump(self, pair: dict[str, Any], source: Any, target: Any) -> None:
        import select

        while not self._closed.is_set():
            if pair["stalled"]:
                self._closed.wait(0.1)
                continue
            try:
                ready, _, _ = select.select([source], [], [], 0.1)
                if not ready:
                    continue
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
            except (OSError, ValueError):  # ValueError: select() on a socket closed meanwhile
                break
        if not pair["stalled"]:
            for sock in pair["sockets"]:
                sock.close()

    def stall(self) -> None:
        for pair in self._pairs:
            pair["stalled"] = True

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for pair in self._pairs:
            for sock in pair["sockets"]:
                sock.close()


CLIENT_SSL = 0x0800
"""The TLS bit of the capability flags in a MySQL server's handshake."""


def without_tls(handshake: bytes) -> bytes:
    """A MySQL server's handshake packet with its TLS capability cleared: the client
    sees a server that cannot speak TLS and logs in over the plain connection."""
    version_end = handshake.index(b"\0", 5)
    flags = version_end + 1 + 4 + 8 + 1  # after the connection id, the salt and a filler
    low = int.from_bytes(handshake[flags : flags + 2], "little") & ~CLIENT_SSL
    return handshake[:flags] + low.to_bytes(2, "little") + handshake[flags + 2 :]
