"""`dbus demo`: the main job on local defaults, end to end."""

from __future__ import annotations

import click


@click.command()
def demo() -> None:
    """Start the local services and run the runtime with an example function."""
    raise click.ClickException("the demo is not wired yet")
