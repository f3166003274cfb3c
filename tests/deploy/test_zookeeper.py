"""The ZooKeeper that `dbus services up zookeeper` runs answers kazoo and 4lw."""

from __future__ import annotations

import socket

import psutil
import pytest
from kazoo.client import KazooClient
from scratch import scratch_zk_root

from dbus_deploy.services import ZooKeeperEndpoint, status

pytestmark = pytest.mark.integration


def test_zk_root_is_a_fresh_chroot_for_kazoo(zookeeper_service, zk_root) -> None:
    client = KazooClient(hosts=zookeeper_service.hosts + zk_root)
    client.start(timeout=30)
    try:
        assert client.get_children("/") == []
        client.create("/member", b"x", ephemeral=True)
        assert client.get_children("/") == ["member"]
    finally:
        client.stop()
        client.close()


def test_four_letter_words_work_and_admin_server_is_off(zookeeper_service) -> None:
    host, port = zookeeper_service.hosts.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(b"srvr")
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    assert b"Mode: standalone" in answer
    (zookeeper,) = status(["zookeeper"])
    listening = {
        conn.laddr.port
        for conn in psutil.Process(zookeeper.pid).net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN
    }
    assert listening == {int(port)}, "only the client port; the admin server (8080) is off"


def test_zk_root_is_made_for_one_test_and_deleted_after_it(
    zookeeper_service: ZooKeeperEndpoint,
) -> None:
    client = KazooClient(hosts=zookeeper_service.hosts)
    client.start(timeout=30)
    try:
        with scratch_zk_root(zookeeper_service) as root:
            client.create(f"{root}/child", b"x")
            assert client.exists(root) is not None
        assert client.exists(root) is None
    finally:
        client.stop()
        client.close()
