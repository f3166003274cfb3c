"""`dbus runtime`: run the shared Spark runtime."""

from __future__ import annotations

import click


@click.group()
def runtime() -> None:
    """Run the shared Spark Structured Streaming runtime."""
