"""`dbus services`: the real services for development, tests and the demo."""

from __future__ import annotations

import click


@click.group()
def services() -> None:
    """Install, start, inspect and stop the local services (MariaDB, ZooKeeper, Kafka, Elasticsearch)."""
