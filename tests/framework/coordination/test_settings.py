"""ZooKeeper settings: flags over DBUS_* variables over defaults; bad values named."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient

from dbus_fn.coordination import ClusterLayout, ZooKeeperSettings, _client
from dbus_fn.coordination._client import AwayHosts, answer_hosts
from dbus_fn.errors import ConfigError


def test_defaults_then_variables_then_flags() -> None:
    assert ZooKeeperSettings.from_env({}) == ZooKeeperSettings()
    env = {
        "DBUS_ZOOKEEPER": "zk1:2181,zk2:2181/team",
        "DBUS_CLUSTER": "prod",
        "DBUS_ZK_AUTH": "dbus:pw",
        "DBUS_ZK_TIMEOUT": "3",
        "DBUS_ZK_SESSION_TIMEOUT": "4.5",
    }
    from_env = ZooKeeperSettings.from_env(env)
    assert (
        from_env.hosts,
        from_env.cluster,
        from_env.connect_timeout,
        from_env.session_timeout,
    ) == ("zk1:2181,zk2:2181/team", "prod", 3.0, 4.5)
    assert from_env.user == "dbus" and from_env.acl is not None
    assert "pw" not in repr(from_env)
    flagged = ZooKeeperSettings.from_env(env, cluster="staging", auth=None, session_timeout=6)
    assert flagged.cluster == "staging" and flagged.auth == "dbus:pw"
    assert flagged.session_timeout == 6
    assert flagged.layout == ClusterLayout("staging", "/dbus/staging")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"hosts": "zk1"}, "invalid ZooKeeper address 'zk1'"),
        ({"cluster": "a/b"}, "invalid cluster 'a/b'"),
        ({"auth": "justaname"}, "invalid ZooKeeper auth: expected user:password"),
        ({"connect_timeout": 0}, "ZooKeeper timeouts must be positive"),
        ({"root": "relative/root"}, "invalid cluster root 'relative/root'"),
    ],
)
def test_bad_settings_are_named(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ZooKeeperSettings(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize("variable", ["DBUS_ZK_TIMEOUT", "DBUS_ZK_SESSION_TIMEOUT"])
def test_a_bad_timeout_variable(variable: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable}='soon': expected seconds"):
        ZooKeeperSettings.from_env({variable: "soon"})


@pytest.mark.parametrize(
    ("hosts", "session", "given", "waits"),
    [
        # One server: named four times, each attempt waits a quarter of the session.
        ("127.0.0.1:2181", 10.0, "127.0.0.1:2181," * 3 + "127.0.0.1:2181", 2.5),
        ("zk:2181", 30.0, ",".join(["zk:2181"] * 4), 7.5),
        # A short session: never under 2 s an attempt.
        ("zk:2181", 4.0, "zk:2181,zk:2181", 2.0),
        ("zk:2181", 2.0, "zk:2181", 2.0),
        # An ensemble already shares the session out; the chroot stays at the end.
        ("a:1,b:2/team", 10.0, "a:1,b:2,a:1,b:2/team", 2.5),
        ("a:1,b:2,c:3/team", 10.0, "a:1,b:2,c:3/team", 10 / 3),
        ("a:1,b:2,c:3,d:4,e:5", 10.0, "a:1,b:2,c:3,d:4,e:5", 2.0),
    ],
)
def test_each_reconnect_attempt_waits_a_part_of_the_session_for_an_answer(
    hosts: str, session: float, given: str, waits: float
) -> None:
    assert answer_hosts(hosts, session) == given
    client = KazooClient(hosts=given, timeout=session)
    try:
        # kazoo waits the session timeout divided by the names it was given.
        assert session / len(client.hosts) == pytest.approx(waits)
        assert {f"{h}:{p}" for h, p in client.hosts} == set(hosts.partition("/")[0].split(","))
        assert client.chroot == (f"/{hosts.partition('/')[2]}" if "/" in hosts else "")
    finally:
        client.close()


AWAY = 0.3
"""``ANSWER_WAIT`` in the tests below, for short ones."""


def _away_hosts(monkeypatch: pytest.MonkeyPatch) -> tuple[AwayHosts, KazooClient]:
    """An ``AwayHosts`` following a client that never connects (only its names are read)."""
    monkeypatch.setattr(_client, "ANSWER_WAIT", AWAY)
    settings = ZooKeeperSettings(hosts="127.0.0.1:1/team", session_timeout=10.0)
    client = KazooClient(hosts=settings.hosts, timeout=settings.session_timeout)
    hosts = AwayHosts(settings)
    hosts.follow(client)
    return hosts, client


def test_a_connection_away_a_while_reconnects_naming_its_server_often_then_as_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hosts, client = _away_hosts(monkeypatch)
    hosts.away()
    hosts.away()  # suspended, then lost: one timer
    assert len(client.hosts) == 1, "not at once: a dropped connection is not a restart"
    time.sleep(AWAY * 3)
    assert len(client.hosts) == 4, "away a while: each attempt waits a quarter of the session"
    assert client.chroot == "/team"
    hosts.back()
    assert client.hosts == [("127.0.0.1", 1)]


@pytest.mark.parametrize("then", ["back", "another client"])
def test_a_connection_back_soon_is_never_spread(
    monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    hosts, client = _away_hosts(monkeypatch)
    hosts.away()
    if then == "back":
        hosts.back()
    else:
        hosts.follow(None)
    time.sleep(AWAY * 3)
    assert client.hosts == [("127.0.0.1", 1)]
