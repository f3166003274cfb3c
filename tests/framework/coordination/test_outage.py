"""ZooKeeper down mid-run: commits are held, newest per source, and flushed after.

These tests start a private ZooKeeper (``private_zookeeper``: their own DBUS_HOME
and a free port, as tests/deploy does), so stopping and restarting it disturbs
no other test.
"""

from __future__ import annotations

import time

import pytest
from coordination_support import register_sources
from support import Proxy, wait_until

from dbus_deploy.services import ServicesConfig, down, up
from dbus_fn.coordination import (
    Coordinator,
    ZooKeeperSettings,
    close,
    connect,
    ensure_cluster,
)
from dbus_fn.events import BinlogPosition

pytestmark = pytest.mark.integration


def test_commits_are_held_while_zookeeper_is_down_and_flushed_after(
    private_zookeeper: tuple[ServicesConfig, str],
) -> None:
    config, hosts = private_zookeeper
    # The runtime reaches ZooKeeper through a proxy, open again only once the restarted
    # server serves: a connection ZooKeeper accepts between binding its port and loading
    # its database is neither answered nor closed (a NullPointerException in its
    # ZooKeeperServer.removeCnxn), and kazoo waits for an answer as long as the session
    # timeout allows before it tries again (a run failed so: "Connection time-out:
    # socket time-out during read", the commits flushed past this test's 5 s).
    proxy = Proxy(hosts)
    try:
        # The session outlives the restart: a standalone server restores its sessions.
        settings = ZooKeeperSettings(
            hosts=f"127.0.0.1:{proxy.port}", cluster="outage", session_timeout=30
        )
        admin = connect(settings)
        try:
            ensure_cluster(admin, settings)
            register_sources(admin, settings, 2)
        finally:
            close(admin)

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
