"""`dbus services`: the real services for development, tests and the demo."""

from __future__ import annotations

from collections.abc import Sequence

import click

from dbus_deploy.services import ENV_HELP, SERVICE_NAMES, ServiceStatus
from dbus_deploy.services import down as _down
from dbus_deploy.services import restart as _restart
from dbus_deploy.services import status as _status
from dbus_deploy.services import up as _up

_NAMES = click.argument("names", nargs=-1, type=click.Choice(SERVICE_NAMES), metavar="[NAME...]")


def _progress(message: str) -> None:
    click.echo(message, err=True)


def _show(statuses: Sequence[ServiceStatus]) -> None:
    click.echo(f"{'SERVICE':<16} {'STATE':<8} {'PID':<12} PORT")
    for entry in statuses:
        state = "running" if entry.running else "stopped"
        pid = str(entry.pid) if entry.pid is not None else "-"
        ports = ",".join(str(port) for port in entry.ports)
        took = f" in {entry.seconds:.1f}s" if entry.action == "started" else ""
        action = f"  ({entry.action}{took})" if entry.action else ""
        click.echo(f"{entry.name:<16} {state:<8} {pid:<12} {ports:<12}{action}")


@click.group(epilog=ENV_HELP)
def services() -> None:
    """Install, start, inspect and stop the local services (MariaDB, ZooKeeper, Kafka,
    Elasticsearch; Prometheus, a MariaDB replica, MySQL and a MySQL replica when named)
    on 127.0.0.1. NAME is one of: mariadb, mariadb-replica, mysql, mysql-replica,
    zookeeper, kafka, elasticsearch, prometheus (default: mariadb, zookeeper, kafka
    and elasticsearch for `up` and `restart`, all for `down` and `status`).
    """


@services.command(epilog=ENV_HELP)
@_NAMES
def up(names: tuple[str, ...]) -> None:
    """Install if needed, start and health-check services; running ones are left alone."""
    _show(_up(names or None, progress=_progress))


@services.command(epilog=ENV_HELP)
@_NAMES
def down(names: tuple[str, ...]) -> None:
    """Stop services started by `up` (by the pid in their pid file)."""
    _show(_down(names or None))


@services.command(epilog=ENV_HELP)
@_NAMES
def status(names: tuple[str, ...]) -> None:
    """Show each service: running or not, pid and port."""
    _show(_status(names or None))


@services.command(epilog=ENV_HELP)
@_NAMES
def restart(names: tuple[str, ...]) -> None:
    """Stop, then start and health-check services."""
    _show(_restart(names or None, progress=_progress))
