"""Connecting to ZooKeeper: settings, digest ACLs, the server names a client reconnects
with (``AwayHosts``), and kazoo errors as ``DbusError``s.

Settings are read in one place (``ZooKeeperSettings.from_env``): a flag wins over
``DBUS_ZOOKEEPER``, ``DBUS_CLUSTER``, ``DBUS_ZK_AUTH``, ``DBUS_ZK_TIMEOUT`` and
``DBUS_ZK_SESSION_TIMEOUT``, which win over the defaults. With ``auth``
(``user:password``) the client authenticates with the digest scheme and every
node it creates under the cluster root is readable and writable by that user
only; the password is never printed (only the user is).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from dbus_fn.coordination._layout import (
    DEFAULT_CLUSTER,
    DEFAULT_ZOOKEEPER,
    LAYOUT_VERSION,
    ClusterLayout,
)
from dbus_fn.errors import (
    ClusterNotFoundError,
    ConfigError,
    CoordinationError,
    ZooKeeperUnavailableError,
)

_HOSTS = re.compile(
    r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}(,[A-Za-z0-9.\-\[\]:]+:\d{1,5})*(/[A-Za-z0-9_.\-/]*)?$"
)


class _RedactAuth(logging.Filter):
    """kazoo logs its requests at DEBUG, the digest ``user:password`` included."""

    _AUTH = re.compile(r"auth='[^']*'")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "auth=" in message:
            record.msg, record.args = self._AUTH.sub("auth='***'", message), ()
        return True


# kazoo logs every failed connection attempt; it logs to this logger, which
# stays quiet unless the application configures logging (then it propagates).
KAZOO_LOGGER = logging.getLogger("dbus_fn.coordination.kazoo")
KAZOO_LOGGER.addHandler(logging.NullHandler())
KAZOO_LOGGER.addFilter(_RedactAuth())

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_SESSION_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class ZooKeeperSettings:
    """How to reach one cluster's tree in ZooKeeper."""

    hosts: str = DEFAULT_ZOOKEEPER
    cluster: str = DEFAULT_CLUSTER
    auth: str | None = field(default=None, repr=False)
    """``user:password`` for digest authentication and ACLs; never shown."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    session_timeout: float = DEFAULT_SESSION_TIMEOUT
    """How long ZooKeeper keeps a silent session (and with it a runtime's sources).

    The server bounds it to 2-20 of its ticks (4-40 s with the 2 s tick here)."""
    root: str | None = None
    """The cluster root; ``/dbus/<cluster>`` unless given."""

    def __post_init__(self) -> None:
        if not _HOSTS.match(self.hosts):
            raise ConfigError(
                f"invalid ZooKeeper address {self.hosts!r}: expected host:port[,host:port]"
                "[/chroot], e.g. 127.0.0.1:2181; set --zookeeper or DBUS_ZOOKEEPER",
                setting="zookeeper",
            )
        if self.auth is not None:
            user, sep, password = self.auth.partition(":")
            if not sep or not user or not password:
                # Never echo the value: it is meant to hold a password.
                raise ConfigError(
                    "invalid ZooKeeper auth: expected user:password (digest scheme); "
                    "set --zk-auth or DBUS_ZK_AUTH",
                    setting="zk-auth",
                )
        if not self.connect_timeout > 0 or not self.session_timeout > 0:
            raise ConfigError("ZooKeeper timeouts must be positive seconds", setting="zk-timeout")
        ClusterLayout.for_cluster(self.cluster, self.root)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **flags: Any) -> ZooKeeperSettings:
        """Flags (those not None) over ``DBUS_*`` variables over defaults."""
        values: dict[str, Any] = {
            "hosts": env.get("DBUS_ZOOKEEPER") or DEFAULT_ZOOKEEPER,
            "cluster": env.get("DBUS_CLUSTER") or DEFAULT_CLUSTER,
            "auth": env.get("DBUS_ZK_AUTH") or None,
            "root": env.get("DBUS_ZK_ROOT") or None,
        }
        for variable, key, setting in (
            ("DBUS_ZK_TIMEOUT", "connect_timeout", "zk-timeout"),
            ("DBUS_ZK_SESSION_TIMEOUT", "session_timeout", "zk-session-timeout"),
        ):
            if env.get(variable):
                try:
                    values[key] = float(env[variable])
                except ValueError:
                    raise ConfigError(
                        f"{variable}={env[variable]!r}: expected seconds", setting=setting
                    ) from None
        values.update({key: value for key, value in flags.items() if value is not None})
        return cls(**values)

    @property
    def layout(self) -> ClusterLayout:
        return ClusterLayout.for_cluster(self.cluster, self.root)

    @property
    def user(self) -> str | None:
        return None if self.auth is None else self.auth.partition(":")[0]

    @property
    def acl(self) -> list[Any] | None:
        """The ACL every node under the cluster root is created with (None: open)."""
        if self.auth is None:
            return None
        user, _, password = self.auth.partition(":")
        return [make_digest_acl(user, password, all=True)]

    def where(self) -> str:
        return f"cluster {self.cluster!r} ({self.layout.root} on ZooKeeper {self.hosts})"


def make_client(settings: ZooKeeperSettings, **options: Any) -> KazooClient:
    """A kazoo client for ``settings``, not yet started."""
    extra: dict[str, Any] = {}
    if settings.auth is not None:
        extra["auth_data"] = [("digest", settings.auth)]
        extra["default_acl"] = settings.acl
    options.setdefault("logger", KAZOO_LOGGER)
    # kazoo's default reconnect backoff grows to an hour between attempts; a
    # runtime must be back well within its session timeout once ZooKeeper is.
    options.setdefault(
        "connection_retry",
        KazooRetry(
            max_tries=-1,
            delay=0.1,
            backoff=2,
            max_delay=max(0.5, min(2.0, settings.session_timeout / 4)),
        ),
    )
    return KazooClient(hosts=settings.hosts, timeout=settings.session_timeout, **extra, **options)


ANSWER_WAIT = 2.0
"""Seconds a connection attempt waits at least for the server's answer."""


def answer_hosts(hosts: str, session_timeout: float) -> str:
    """``hosts`` for a client reconnecting to keep its session: each server named as
    many times as there are quarters of the session in its share of it, so that one
    connection attempt waits about a quarter of the session for the server's answer
    (``ANSWER_WAIT`` at least), where kazoo waits the whole session divided by the
    number of names (``KazooClient.set_hosts`` takes them for its next round of
    attempts).

    A ZooKeeper server that accepts a connection between binding its port and loading
    its data neither answers nor closes it (its close fails while it has no database
    yet: ZOOKEEPER-5051). With one server named once, a runtime reconnecting at that
    instant of a restart waited its whole session timeout, and the session the
    restarted server had kept for it expired meanwhile; with the shorter wait, the
    next attempt reaches the server while the session is still there. The coordinator
    gives them only while its connection has been away a while (``Coordinator``):
    kazoo tries the names of a round one after the other without a pause.
    """
    servers, slash, chroot = hosts.partition("/")
    names = [name for name in servers.split(",") if name]
    wait = max(ANSWER_WAIT, session_timeout / 4)
    times = max(1, math.floor(session_timeout / (len(names) * wait)))
    return ",".join(names * times) + slash + chroot


class AwayHosts:
    """The server names a kazoo client reconnects with: as given while connected, and
    ``answer_hosts`` once its connection has been away ``ANSWER_WAIT`` seconds (a
    server restarting, not a connection dropped), until it is back.

    Not sooner: kazoo tries the names of a round one after the other without a pause,
    and a runtime told at once that its session ended would be back with a new one
    before the leader saw it go. The ``Coordinator`` and a worker's ``HoldCheck`` each
    keep one for their client and tell it, from kazoo's state listener, when the
    connection goes (``away``) and comes back (``back``); a timer spreads the names.
    Its own lock serialises the listener's calls and the timer's.
    """

    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: KazooClient | None = None
        self._pid = 0
        self._timer: threading.Timer | None = None
        self._spread = False

    def follow(self, client: KazooClient | None) -> None:
        """The client whose names these are, from now on (None: none)."""
        with self._lock:
            self._cancel()
            self._client, self._pid, self._spread = client, os.getpid(), False

    def away(self) -> None:
        """The connection went (suspended or lost): spread the names if it stays away."""
        with self._lock:
            if self._timer is None and not self._spread and self._client is not None:
                timer = threading.Timer(ANSWER_WAIT, lambda: self._spread_now(timer))
                timer.daemon = True
                self._timer = timer
                timer.start()

    def back(self) -> None:
        """The connection is back: the names as given again."""
        with self._lock:
            self._cancel()
            if self._spread:
                self._spread = False
                self._set(self.settings.hosts)

    def _spread_now(self, timer: threading.Timer) -> None:
        with self._lock:
            if self._timer is not timer:
                return  # back, or followed another client, as it fired
            self._timer = None
            self._spread = True
            self._set(answer_hosts(self.settings.hosts, self.settings.session_timeout))

    def _cancel(self) -> None:
        """(lock held)"""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _set(self, hosts: str) -> None:
        """(lock held) A client inherited through fork() is left be: its threads are
        not in this process."""
        if self._client is not None and self._pid == os.getpid():
            self._client.set_hosts(hosts)


def connect(settings: ZooKeeperSettings, **options: Any) -> KazooClient:
    """A started kazoo client; ``ZooKeeperUnavailableError`` if none answers in time."""
    client = make_client(settings, **options)
    try:
        with warnings.catch_warnings():
            # kazoo warns of a chroot that does not exist yet: `dbus cluster init`
            # makes it, and every other command names the missing cluster instead.
            warnings.filterwarnings("ignore", "No chroot path exists", UserWarning)
            client.start(timeout=settings.connect_timeout)
    except KazooTimeoutError:
        client.close()
        raise unavailable(settings) from None
    return client


def close(client: KazooClient) -> None:
    """Stop and close, whatever state the client is in."""
    try:
        client.stop()
    finally:
        client.close()


def unavailable(
    settings: ZooKeeperSettings, within: float | None = None
) -> ZooKeeperUnavailableError:
    """No answer from ZooKeeper in ``within`` seconds (default: the connect timeout)."""
    seconds = settings.connect_timeout if within is None else within
    return ZooKeeperUnavailableError(
        f"cannot reach ZooKeeper at {settings.hosts} within {seconds:g} s; "
        "start it (`dbus services up zookeeper`) or give its address with --zookeeper "
        "or DBUS_ZOOKEEPER",
        hosts=settings.hosts,
    )


@contextmanager
def zk_errors(settings: ZooKeeperSettings) -> Iterator[None]:
    """kazoo's connection and permission errors as one-line ``DbusError``s."""
    try:
        yield
    except NoAuthError:
        who = f"as user {settings.user!r}" if settings.user else "without credentials"
        raise CoordinationError(
            f"ZooKeeper refused access {who} to {settings.where()}; the cluster has digest "
            "ACLs: give its user:password with --zk-auth or DBUS_ZK_AUTH",
            cluster=settings.cluster,
        ) from None
    except (ConnectionLoss, SessionExpiredError, OperationTimeoutError, KazooTimeoutError):
        raise unavailable(settings) from None


def dump(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def load(raw: bytes | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw.decode())
    except (UnicodeDecodeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def ensure_cluster(client: KazooClient, settings: ZooKeeperSettings) -> bool:
    """Create the cluster root and its folders if missing; True if it was created.

    Folders above the root are created open (they hold nothing), the root and
    everything below it with the settings' ACL.
    """
    layout = settings.layout
    acl = settings.acl
    created = False
    with zk_errors(settings):
        if client.chroot and client.exists("/") is None:
            _create_chroot(settings, client.chroot)
        parts = [p for p in layout.root.split("/") if p]
        for depth in range(1, len(parts)):
            path = "/" + "/".join(parts[:depth])
            if client.exists(path) is None:
                with suppress(NodeExistsError):
                    client.create(path, b"", acl=OPEN_ACL_UNSAFE)
        if client.exists(layout.root) is None:
            stamp = utc_timestamp()
            # Which making of the cluster this is (``cluster_incarnation``): a cluster made
            # again under the same name is another one.
            data = dump({"cluster": settings.cluster, "layout": LAYOUT_VERSION,
                         "created": stamp, "id": uuid.uuid4().hex})  # fmt: skip
            try:
                client.create(layout.root, data, acl=acl)
                created = True
            except NodeExistsError:
                pass
        for path in layout.containers:
            if client.exists(path) is None:
                with suppress(NodeExistsError):
                    client.create(path, b"", acl=acl)
    return created


def cluster_incarnation(client: KazooClient, settings: ZooKeeperSettings) -> str:
    """Which making of the cluster this is: the id ``ensure_cluster`` gave its root, the
    same for every member, another when the cluster is made again under its name (its
    tree deleted, or a new ZooKeeper); "" for a root made before roots had one."""
    with zk_errors(settings):
        raw, _ = client.get(settings.layout.root)
    return str(load(raw).get("id", ""))


def _create_chroot(settings: ZooKeeperSettings, chroot: str) -> None:
    """Create the chroot ``--zookeeper`` names (``host:port/chroot``), open as the folders
    above a cluster root are: a client inside a chroot cannot create it itself."""
    outside = connect(replace(settings, hosts=settings.hosts.partition("/")[0]))
    try:
        outside.ensure_path(chroot, acl=OPEN_ACL_UNSAFE)
    finally:
        close(outside)


def require_cluster(client: KazooClient, settings: ZooKeeperSettings) -> None:
    """Refuse a cluster whose root does not exist (most often a typo)."""
    with zk_errors(settings):
        exists = client.exists(settings.layout.root) is not None
        if exists:
            # A root without read access is the ACL case, not a missing cluster.
            client.get(settings.layout.root)
    if not exists:
        raise ClusterNotFoundError(
            f"no {settings.where()}; check --cluster / DBUS_CLUSTER, or create it with "
            f"`dbus cluster init --cluster {settings.cluster}`",
            cluster=settings.cluster,
            root=settings.layout.root,
        )


@contextmanager
def cluster_client(settings: ZooKeeperSettings, *, create: bool = False) -> Iterator[KazooClient]:
    """A connected client for an existing cluster (or one made now if ``create``)."""
    client = connect(settings)
    try:
        if create:
            ensure_cluster(client, settings)
        else:
            require_cluster(client, settings)
        with zk_errors(settings):
            yield client
    finally:
        close(client)


def utc_timestamp() -> str:
    """The current UTC time as ISO 8601 to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
