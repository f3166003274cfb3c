"""No secret reaches ZooKeeper, a log or a message; digest ACLs keep others out."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coordination_support import make_function, walk
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from support import wait_until

from dbus_deploy.services import ZooKeeperEndpoint
from dbus_fn.coordination import Coordinator, SourceRegistry, ZooKeeperSettings
from dbus_fn.errors import CoordinationError
from dbus_fn.events import BinlogPosition

pytestmark = pytest.mark.integration

PASSWORD = "Sup3r-S3cret-pw"
DSN = f"mysql://dbus:{PASSWORD}@127.0.0.1:3306"
ZK_PASSWORD = "zk-Pa55-w0rd"


def test_no_password_in_any_znode_log_or_output(
    dbus: Any,
    cluster: ZooKeeperSettings,
    client: KazooClient,
    zookeeper_service: ZooKeeperEndpoint,
    zk_root: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("SHOP_DSN", DSN)
    monkeypatch.setenv("DBUS_SOURCE", DSN)
    outputs = []
    folder = make_function(tmp_path / "fn")
    for args in (
        ("fn", "deploy", str(folder)),
        ("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN", "--table", "shop.*"),
        ("cluster", "source", "add", "other", "--dsn-env", DSN),
        ("cluster", "source", "add", "third", "--dsn-file", DSN),
        ("cluster", "source", "list"),
    ):
        result = dbus(*args)
        outputs.append(result.output)
    assert "--dsn-env expects the NAME of an environment variable" in outputs[2]
    assert "holds an address with a password" in outputs[3]

    coordinator = Coordinator(cluster.hosts, cluster.cluster, "rt-a", session_timeout=5)
    with coordinator:
        wait_until(lambda: "shop" in coordinator.owned_sources(), 10, "shop owned")
        assert coordinator.sources.get("shop").resolve_dsn() == DSN
        epoch = coordinator.owned_sources()["shop"]
        coordinator.commit_position("shop", BinlogPosition("binlog.000001", 4), epoch)
        outputs.append(dbus("cluster", "status").output)
        outputs.append(dbus("cluster", "status", "--json").output)

    monkeypatch.delenv("SHOP_DSN")
    with pytest.raises(Exception, match="SHOP_DSN is not set") as missing:
        SourceRegistry(client, cluster).get("shop").resolve_dsn()
    outputs.append(str(missing.value))

    everything = KazooClient(hosts=zookeeper_service.hosts + zk_root)
    everything.start(timeout=10)
    try:
        nodes = list(walk(everything))
    finally:
        everything.stop()
        everything.close()
    assert len(nodes) > 15
    for path, data in nodes:
        assert PASSWORD not in path
        assert PASSWORD.encode() not in data, path
    assert any(b"SHOP_DSN" in data for _, data in nodes), "the reference is there"
    for text in [*outputs, caplog.text]:
        assert PASSWORD not in text


@pytest.fixture
def secured_cleanup(settings: ZooKeeperSettings) -> Iterator[None]:
    """Remove the ACL-protected tree as its user, before ``zk_root`` removes the chroot."""
    yield
    owner = KazooClient(hosts=settings.hosts, auth_data=[("digest", f"dbus:{ZK_PASSWORD}")])
    owner.start(timeout=10)
    try:
        owner.delete(settings.layout.root, recursive=True)
    finally:
        owner.stop()
        owner.close()


def test_digest_acls_keep_other_clients_out(
    secured_cleanup: None,
    caplog: pytest.LogCaptureFixture,
    dbus: Any,
    settings: ZooKeeperSettings,
    zookeeper_service: ZooKeeperEndpoint,
    zk_root: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("DBUS_ZK_AUTH", f"dbus:{ZK_PASSWORD}")
    created = dbus("cluster", "init")
    assert created.exit_code == 0, created.output
    assert created.output.rstrip().endswith("readable by user 'dbus' only")
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    secured = ZooKeeperSettings(
        hosts=settings.hosts,
        cluster=settings.cluster,
        auth=f"dbus:{ZK_PASSWORD}",
        session_timeout=5,
    )
    with pytest.raises(CoordinationError, match="ZooKeeper refused access without credentials"):
        Coordinator.from_settings(settings, "rt-intruder").start()
    with Coordinator.from_settings(secured, "rt-a") as coordinator:
        wait_until(lambda: "shop" in coordinator.owned_sources(), 10, "owned under ACLs")
        epoch = coordinator.owned_sources()["shop"]
        assert coordinator.commit_position("shop", BinlogPosition("b.000001", 4), epoch) == (
            "committed"
        )
    listed = dbus("fn", "list")
    assert listed.output.startswith("cfn_demo  active=1.0.0")

    root = settings.layout.root
    stranger = KazooClient(hosts=zookeeper_service.hosts + zk_root)
    stranger.start(timeout=10)
    try:
        for read in (
            lambda: stranger.get(root),
            lambda: stranger.get_children(root),
            lambda: stranger.get(f"{root}/functions/cfn_demo/active"),
            lambda: stranger.get(f"{root}/sources/shop"),
            lambda: stranger.get(f"{root}/positions/shop"),
        ):
            with pytest.raises(NoAuthError):
                read()
        for write in (
            lambda: stranger.create(f"{root}/functions/evil", b"x"),
            lambda: stranger.set(f"{root}/functions/cfn_demo/active", b"0.0.1"),
            lambda: stranger.set(f"{root}/positions/shop", b"{}"),
            lambda: stranger.delete(f"{root}/sources/shop"),
        ):
            with pytest.raises(NoAuthError):
                write()
    finally:
        stranger.stop()
        stranger.close()

    for password in ("", "wrong"):
        if password:
            monkeypatch.setenv("DBUS_ZK_AUTH", f"dbus:{password}")
        else:
            monkeypatch.delenv("DBUS_ZK_AUTH")
        refused = dbus("fn", "list")
        assert refused.exit_code == 1
        who = "as user 'dbus'" if password else "without credentials"
        assert refused.output == (
            f"Error: ZooKeeper refused access {who} to cluster 'test' "
            f"({root} on ZooKeeper {settings.hosts}); the cluster has digest ACLs: give its "
            "user:password with --zk-auth or DBUS_ZK_AUTH\n"
        )
        assert ZK_PASSWORD not in refused.output

    malformed = dbus("fn", "list", "--zk-auth", "no-colon-secret")
    assert malformed.exit_code == 2
    assert "no-colon-secret" not in malformed.output
    assert "expected user:password" in malformed.output
    assert "auth='***'" in caplog.text, "kazoo logged its auth request, redacted"
    assert ZK_PASSWORD not in caplog.text
