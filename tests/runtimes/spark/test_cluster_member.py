"""A cluster member while ZooKeeper is away: it keeps reading what it reads, starts nothing.

A private ZooKeeper is stopped under a ``ClusterMember`` and started again. The
member's configuration (what its query reads at the next micro-batch) must keep
its source throughout: while the connection is suspended, and once the same
session is back but the coordinator has not yet read the assignments again.
Dropping the source for that moment stopped work the runtime still owned, and
failed the micro-batch that was reading it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Proxy, wait_until

from dbus_deploy.services import MariaDBEndpoint, ServicesConfig, down, up
from dbus_fn.coordination import SourceReference, SourceRegistry, ZooKeeperSettings, cluster_client
from dbus_spark.cluster.member import ClusterMember
from dbus_spark.interfaces.settings import member_config

pytestmark = pytest.mark.integration


def test_a_member_keeps_its_source_until_the_same_session_confirms_it_again(
    private_zookeeper: tuple[ServicesConfig, str],
    mariadb_service: MariaDBEndpoint,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, hosts = private_zookeeper
    # The member reaches ZooKeeper through a proxy, open again only once the restarted
    # server runs: a connection ZooKeeper accepts between binding its port and loading
    # its database is neither answered nor closed (it fails to close it, a
    # NullPointerException in ZooKeeperServer.removeCnxn, seen in its log), and kazoo
    # waits the whole session timeout for an answer before it tries again.
    proxy = Proxy(hosts)
    # The session outlives the restart: a standalone server restores its sessions.
    settings = ZooKeeperSettings(
        hosts=f"127.0.0.1:{proxy.port}", cluster="member", session_timeout=30
    )
    with cluster_client(settings, create=True) as admin:
        SourceRegistry(admin, settings).add(
            SourceReference("shop", dsn_env="MEMBER_TEST_DSN", tables=("shop.*",))
        )
    monkeypatch.setenv("MEMBER_TEST_DSN", mariadb_service.dsn)
    base = member_config(
        kafka="127.0.0.1:9092",
        elasticsearch="http://127.0.0.1:9200",
        checkpoint=str(tmp_path / "checkpoint"),
    )
    member = ClusterMember(settings, "rt-a", base, tmp_path / "config.json")
    member.start()
    coordinator = member.coordinator
    try:
        wait_until(lambda: member.refresh().sources, 30, "the member reads its source")
        reading = member.refresh().sources

        proxy.cut()
        down(["zookeeper"], config=config)
        wait_until(lambda: coordinator.state == "suspended", 30, "the member notices")
        assert member.refresh().sources == reading, "ZooKeeper away: the work goes on"

        # Fault injection: the coordinator's thread is slow to read the assignments
        # again once the session is back, as on a busy machine; this stretches the
        # moment between reconnecting and being confirmed.
        coordinator._refresh = lambda generation: None  # type: ignore[method-assign]
        up(["zookeeper"], config=config)
        proxy.restore()
        wait_until(lambda: coordinator.state == "connected", 30, "the same session is back")
        assert coordinator.owned_sources() == {}, "not confirmed yet: nothing new may start"
        assert member.refresh().sources == reading, "the same session: the work goes on"

        del coordinator._refresh
        wait_until(lambda: coordinator.owned_sources(), 30, "ownership confirmed again")
        assert member.refresh().sources == reading
    finally:
        member.stop()
        proxy.close()
