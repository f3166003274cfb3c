"""``dbus cluster``: the ZooKeeper side of a dbus cluster (init, status, sources).

The ZooKeeper options here are shared with ``dbus fn deploy`` and friends. kazoo
is imported only when a command runs, so the SDK without the coordination extra
keeps a working ``dbus --help``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from dbus_fn.cli._options import (
    KEEP_HELPER_TABLES,
    FiniteFloatRange,
    env_option,
    refuse_empty,
)

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from dbus_fn.coordination import ZooKeeperSettings

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ZooKeeperOptions:
    """The ZooKeeper options of one command, as given (flag, variable or default)."""

    zookeeper: str
    cluster: str
    zk_auth: str | None = field(repr=False)
    zk_timeout: float

    def settings(self) -> ZooKeeperSettings:
        from dbus_fn.coordination import ZooKeeperSettings

        return ZooKeeperSettings(
            hosts=self.zookeeper,
            cluster=self.cluster,
            auth=self.zk_auth or None,
            connect_timeout=self.zk_timeout,
        )

    @contextmanager
    def open(self) -> Iterator[tuple[KazooClient, ZooKeeperSettings]]:
        """A client of the existing cluster; errors become one line (inside the block too)."""
        from dbus_fn.coordination import cluster_client

        settings = self.settings()
        with cluster_client(settings) as client:
            yield client, settings


_OPTIONS = (
    env_option(
        "--zookeeper",
        env="DBUS_ZOOKEEPER",
        default="127.0.0.1:2181",
        show_default=True,
        help="ZooKeeper address: host:port[,host:port][/chroot].",
    ),
    env_option(
        "--cluster",
        env="DBUS_CLUSTER",
        default="default",
        show_default=True,
        callback=refuse_empty("give a cluster name, or leave the option out for 'default'"),
        help="Cluster name; its tree is /dbus/<cluster> in ZooKeeper.",
    ),
    env_option(
        "--zk-auth",
        env="DBUS_ZK_AUTH",
        default=None,
        help="user:password for ZooKeeper digest auth; nodes this creates are then "
        "readable and writable by that user only. Prefer the variable to the flag.",
    ),
    env_option(
        "--zk-timeout",
        env="DBUS_ZK_TIMEOUT",
        type=FiniteFloatRange(min=0, min_open=True),
        default=10.0,
        show_default=True,
        help="Seconds to wait for ZooKeeper to answer.",
    ),
)


_OPTIONAL_CLUSTER = env_option(
    "--cluster",
    env="DBUS_CLUSTER",
    default=None,
    callback=refuse_empty(
        "give a cluster name, or leave the option out to ask the runtime at --checkpoint"
    ),
    help="Ask this cluster's runtimes, through ZooKeeper, instead of the runtime at "
    "--checkpoint.",
)


def zookeeper_options(command: F) -> F:
    """Add --zookeeper, --cluster, --zk-auth and --zk-timeout (each with its DBUS_*
    variable); the command receives them as one ``zk: ZooKeeperOptions``."""
    return _with_zookeeper(command, _OPTIONS)


def cluster_or_local_options(command: F) -> F:
    """As ``zookeeper_options``, for a command that talks to a local runtime unless
    --cluster (or DBUS_CLUSTER) names a cluster: ``zk`` is None then."""
    return _with_zookeeper(command, (_OPTIONS[0], _OPTIONAL_CLUSTER, *_OPTIONS[2:]))


def _with_zookeeper(command: F, options: tuple[Any, ...]) -> F:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        zk = ZooKeeperOptions(
            kwargs.pop("zookeeper"),
            kwargs.pop("cluster"),
            kwargs.pop("zk_auth"),
            kwargs.pop("zk_timeout"),
        )
        return command(*args, zk=zk if zk.cluster else None, **kwargs)

    decorated: Any = wrapper
    for option in reversed(options):
        decorated = option(decorated)
    return cast(F, decorated)


@click.group("cluster")
def cluster() -> None:
    """The cluster in ZooKeeper: create it, see its state, register sources.

    Needs dbus-fn[coordination].
    """


@cluster.command("init")
@zookeeper_options
def init(zk: ZooKeeperOptions) -> None:
    """Create the cluster's tree (with digest ACLs if --zk-auth is given)."""
    from dbus_fn.coordination import close, connect, ensure_cluster

    settings = zk.settings()
    client = connect(settings)
    try:
        created = ensure_cluster(client, settings)
    finally:
        close(client)
    acl = f"; readable by user {settings.user!r} only" if settings.user else ""
    verb = "Created" if created else "Found existing"
    click.echo(f"{verb} {settings.where()}{acl}")


@cluster.command("status")
@zookeeper_options
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON document.")
@click.option(
    "--lag",
    is_flag=True,
    help="Also ask each source how many binlog bytes follow its committed position "
    "(needs the sources' DSN variables or files here, and dbus-fn[capture]).",
)
def status(zk: ZooKeeperOptions, as_json: bool, lag: bool) -> None:
    """Runtimes, leader and epoch, assignments, committed positions, active functions."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import binlog_lag, cluster_status

        report = cluster_status(client, settings, lag=binlog_lag if lag else None)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    for line in report.lines():
        click.echo(line)


@cluster.group("source")
def source() -> None:
    """Sources the cluster reads; the DSN stays out of ZooKeeper (a variable or file
    name that each runtime resolves on its own machine)."""


@source.command("add")
@click.argument("name")
@click.option("--dsn-env", help="Name of the environment variable holding the DSN on runtimes.")
@click.option("--dsn-file", help="Absolute path of a file holding the DSN on runtimes (mode 0600).")
@click.option(
    "--table",
    "tables",
    multiple=True,
    help='A "db.table" glob to capture; repeat it (default: every table).',
)
@KEEP_HELPER_TABLES
@click.option("--replace", is_flag=True, help="Change a source that is already registered.")
@zookeeper_options
def source_add(
    name: str,
    dsn_env: str | None,
    dsn_file: str | None,
    tables: tuple[str, ...],
    keep_helper_tables: bool | None,
    replace: bool,
    zk: ZooKeeperOptions,
) -> None:
    """Register source NAME; the leader assigns it to a runtime."""
    from dbus_fn.coordination import SourceReference

    reference = SourceReference(
        name, dsn_env=dsn_env, dsn_file=dsn_file, tables=tables,
        keep_helper_tables=bool(keep_helper_tables),
    )  # fmt: skip
    with zk.open() as (client, settings):
        from dbus_fn.coordination import SourceRegistry

        registry = SourceRegistry(client, settings)
        new = registry.add(reference, replace=replace)
        owner = None if new else registry.owner(name)
    verb = "Registered" if new else "Replaced"
    click.echo(f"{verb} source {name} (DSN from {reference.reference})")
    if owner is not None:
        # The owner took the source's settings when it took the source; it reads on
        # with them (its position stays consistent) until it takes the source again.
        click.echo(
            f"runtime {owner} reads {name} now and goes on with the tables and DSN it took "
            "until it takes the source again: restart it to apply the change"
        )


@source.command("list")
@zookeeper_options
def source_list(zk: ZooKeeperOptions) -> None:
    """The registered sources and where their DSNs come from."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import SourceRegistry

        sources = SourceRegistry(client, settings).all()
    if not sources:
        click.echo("no sources; add one with `dbus cluster source add NAME --dsn-env VAR`")
    for item in sources:
        tables = ",".join(item.tables) or "*"
        kept = "  keep-helper-tables" if item.keep_helper_tables else ""
        click.echo(f"{item.name}  dsn={item.reference}  tables={tables}{kept}")


@source.command("remove")
@click.argument("name")
@zookeeper_options
def source_remove(name: str, zk: ZooKeeperOptions) -> None:
    """Unregister source NAME (its committed position is kept)."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import SourceRegistry

        SourceRegistry(client, settings).remove(name)
    click.echo(f"Removed source {name}")
