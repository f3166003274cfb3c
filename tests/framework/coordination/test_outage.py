"""ZooKeeper down mid-run: commits are held, newest per source, and flushed after,
and the session outlives the restart, even a reconnect the starting server never answers;
a worker's hold check gives such a reconnect up as soon.

These tests start a private ZooKeeper (``private_zookeeper``: their own DBUS_HOME
and a free port, as tests/deploy does), so stopping and restarting it disturbs
no other test.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest
from coordination_support import register_sources
from support import Proxy, wait_until

from dbus_deploy.services import ServicesConfig, down, up
from dbus_fn.coordination import (
    Coordinator,
    HoldCheck,
    ZooKeeperSettings,
    close,
    connect,
    ensure_cluster,
)
from dbus_fn.errors import ZooKeeperUnavailableError
from dbus_fn.events import BinlogPosition

pytestmark = pytest.mark.integration


def _cluster_through(
    proxy: Proxy, cluster: str, *, session: float, sources: int
) -> ZooKeeperSettings:
    """A new cluster with ``sources`` sources, reached through ``proxy``."""
    settings = ZooKeeperSettings(
        hosts=f"127.0.0.1:{proxy.port}", cluster=cluster, session_timeout=session
    )
    admin = connect(settings)
    try:
        ensure_cluster(admin, settings)
        register_sources(admin, settings, sources)
    finally:
        close(admin)
    return settings


def test_commits_are_held_while_zookeeper_is_down_and_flushed_after(
    private_zookeeper: tuple[ServicesConfig, str],
) -> None:
    config, hosts = private_zookeeper
    # The runtime reaches ZooKeeper through a proxy, open again only once the restarted
    # server serves: a connection ZooKeeper accepts between binding its port and loading
    # its database is neither answered nor closed (a NullPointerException in its
    # ZooKeeperServer.removeCnxn, ZOOKEEPER-5051), and the runtime waits a quarter of
    # its session timeout for an answer before it tries again (7.5 s of this test's 30;
    # it waited the whole session once, and a run failed so: "Connection time-out:
    # socket time-out during read", the commits flushed past this test's 5 s). The next
    # test makes that hang on purpose.
    proxy = Proxy(hosts)
    try:
        # The session outlives the restart: a standalone server restores its sessions.
        settings = _cluster_through(proxy, "outage", session=30, sources=2)

        with Coordinator.from_settings(settings, "rt-a") as runtime:
            wait_until(lambda: len(runtime.owned_sources()) == 2, 10, "both sources owned")
            owned = runtime.owned_sources()
            for source, epoch in owned.items():
                committed_now = runtime.commit_position(
                    source, BinlogPosition("b.000001", 100), epoch
                )
                assert committed_now == "committed"

            proxy.cut()
            down(["zookeeper"], config=config)
            wait_until(lambda: runtime.state == "suspended", 10, "the runtime notices")
            assert runtime.owned_sources() == {}, "no new work while ZooKeeper is away"
            assert runtime.kept_sources() == owned, "but the work it has goes on"
            first, second = sorted(owned)
            for pos in (200, 300):
                outcome = runtime.commit_position(
                    first, BinlogPosition("b.000001", pos), owned[first]
                )
                assert outcome == "held"
            outcome = runtime.commit_position(second, BinlogPosition("b.000002", 7), owned[second])
            assert outcome == "held"
            assert runtime.held_commits == {
                first: (BinlogPosition("b.000001", 300), owned[first]),
                second: (BinlogPosition("b.000002", 7), owned[second]),
            }

            # Long enough for kazoo's default backoff to reach minutes between attempts.
            time.sleep(8)
            restarted = time.monotonic()
            up(["zookeeper"], config=config)
            proxy.restore()
            flushed = wait_until(
                lambda: runtime.held_commits == {}, 5, "held commits flushed"
            )
            assert runtime.owned_sources() == owned, "same session, same ownership"
            print(
                f"\nZooKeeper restart: held commits flushed {flushed:.2f} s after `up` "
                f"returned ({time.monotonic() - restarted:.2f} s in all)"
            )
            for source, expected in ((first, 300), (second, 7)):
                committed = runtime.committed_position(source)
                assert committed is not None
                assert committed.position.pos == expected
                assert committed.runtime == "rt-a"
    finally:
        proxy.close()


class SilentServer:
    """What a ZooKeeper server is between binding its port and loading its data: it
    accepts a connection and reads it, and never answers nor closes it (its close
    fails while it has no database yet, ZOOKEEPER-5051). A fault the real server
    shows only at that instant of its start, so it is made here, on the port the
    runtime dials. ``waits()``: how long the client has held each connection."""

    def __init__(self, port: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", port))
        self._held: list[socket.socket] = []
        self.accepted = 0
        self._opened: dict[int, float] = {}
        self._closed: dict[int, float] = {}
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # stopped listening
            self._opened[self.accepted] = time.monotonic()
            self._held.append(conn)
            threading.Thread(target=self._read, args=(conn, self.accepted), daemon=True).start()
            self.accepted += 1

    def _read(self, conn: socket.socket, number: int) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(4096):
                pass
        self._closed[number] = time.monotonic()

    def waits(self) -> list[float]:
        """Per connection, until the client closed it (or until now, if it has not)."""
        now = time.monotonic()
        return [self._closed.get(n, now) - opened for n, opened in sorted(self._opened.items())]

    def stop_listening(self) -> None:
        """Free the port; the connections taken stay open and unanswered.

        Shut down before it is closed: a listener closed while its thread waits in
        ``accept()`` stays bound until a connection ends that wait, and the proxy
        started next found the port taken whenever it bound first (socat: "bind …
        Address already in use"), which a loaded machine made happen by chance."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def close(self) -> None:
        self.stop_listening()
        for conn in self._held:
            conn.close()


SESSION = 8.0
"""The session timeout of the tests of a starting server that never answers."""


@dataclass
class Hang:
    """A cluster of one source reached through ``proxy`` (sessions of ``SESSION``), and
    the starting server a test puts on the proxy's port while the proxy is cut."""

    proxy: Proxy
    settings: ZooKeeperSettings
    silent: SilentServer | None = None

    def starting_server(self) -> SilentServer:
        self.silent = SilentServer(self.proxy.port)
        return self.silent

    def given_up_in_time(self, who: str, what: str, back: float) -> None:
        """Each attempt the starting server took was given up within half the session
        (kazoo's own wait was the whole of it); ``what`` came ``back`` s after the server."""
        assert self.silent is not None
        waits = self.silent.waits()
        assert max(waits) < SESSION / 2, (
            f"{who} waited {waits} s for answers from the starting server"
        )
        print(
            f"\nattempts the starting server never answered, given up after "
            f"{', '.join(f'{w:.2f}' for w in waits)} s; {what} {back:.2f} s "
            "after the server was back"
        )


@contextlib.contextmanager
def _hang(hosts: str, cluster: str) -> Iterator[Hang]:
    proxy = Proxy(hosts)
    hang: Hang | None = None
    try:
        hang = Hang(proxy, _cluster_through(proxy, cluster, session=SESSION, sources=1))
        yield hang
    finally:
        if hang is not None and hang.silent is not None:
            hang.silent.close()
        proxy.close()


def test_a_reconnect_the_restarting_server_never_answers_is_given_up_in_time_to_keep_the_session(
    private_zookeeper: tuple[ServicesConfig, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dbus_fn.coordination")
    config, hosts = private_zookeeper
    with (
        _hang(hosts, "silent") as hang,
        Coordinator.from_settings(hang.settings, "rt-a") as runtime,
    ):
        wait_until(lambda: len(runtime.owned_sources()) == 1, 10, "the source owned")
        owned = runtime.owned_sources()
        session_id = runtime.client.client_id[0]

        hang.proxy.cut()
        down(["zookeeper"], config=config)
        wait_until(lambda: runtime.state == "suspended", 10, "the runtime notices")
        # Away 2 s: a server restarting, not a connection dropped; each attempt now
        # waits a quarter of the session for an answer.
        wait_until(lambda: len(runtime.client.hosts) == 4, 10, "the server named often")
        # The runtime's next attempt lands on a server that is starting.
        silent = hang.starting_server()
        wait_until(lambda: silent.accepted, 10, "the runtime tries the starting server")
        up(["zookeeper"], config=config)  # it loads the session: its clock starts again
        silent.stop_listening()
        hang.proxy.restore()
        back = wait_until(
            lambda: runtime.state == "connected" and runtime.owned_sources() == owned,
            SESSION,
            "the runtime back with its source",
        )
        assert runtime.client.client_id[0] == session_id, "the same session goes on"
        # Connected, kazoo has the server once again: after a drop, one attempt at once,
        # the next round after its backoff.
        assert len(runtime.client.hosts) == 1
        hang.given_up_in_time("the runtime", "back", back)
        assert "ZooKeeper connection back after" in caplog.text
        assert "same session" in caplog.text
        assert "ZooKeeper session lost" not in caplog.text


def test_a_hold_check_whose_reconnect_the_starting_server_never_answers_confirms_again_soon(
    private_zookeeper: tuple[ServicesConfig, str],
) -> None:
    """A worker's ``HoldCheck`` reaches ZooKeeper through a proxy that is cut; its next
    attempt lands on a server that is starting (``SilentServer``). It gives that attempt
    up after a quarter of the session, and confirms the hold soon after the server
    serves again, where it waited the whole session before."""
    _, hosts = private_zookeeper
    with _hang(hosts, "hold") as hang:
        direct = replace(hang.settings, hosts=hosts)
        with (
            Coordinator.from_settings(direct, "rt-a") as runtime,
            HoldCheck(hang.settings, "rt-a") as hold,
        ):
            wait_until(lambda: len(runtime.owned_sources()) == 1, 10, "the source owned")
            [(source, epoch)] = runtime.owned_sources().items()
            assert hold.confirm(source, epoch) is not None

            hang.proxy.cut()
            # Away 2 s: a server restarting; each attempt now waits a quarter of the
            # session for an answer.
            wait_until(lambda: len(hold._client.hosts) == 4, 10, "the server named often")
            silent = hang.starting_server()
            wait_until(lambda: silent.accepted, 10, "the hold check tries the starting server")
            silent.stop_listening()
            hang.proxy.restore()
            restored = time.monotonic()

            def confirmed() -> bool:
                with contextlib.suppress(ZooKeeperUnavailableError):
                    return hold.confirm(source, epoch) is not None
                return False

            wait_until(confirmed, SESSION, "the hold confirmed again")
            back = time.monotonic() - restored
            assert len(hold._client.hosts) == 1, "connected, the server named once again"
            hang.given_up_in_time("the hold check", "confirmed", back)
