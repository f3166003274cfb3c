"""Command groups whose commands may come from other packages, found by entry point.

A ``PluginGroup`` lists its own commands and those of its entry point group, and
imports a plugin's module only when the command is shown or used, so the SDK
never imports the runtime: ``dbus`` finds ``runtime`` and ``services`` through
``dbus_fn.cli``, ``dbus fn`` finds the history commands through ``dbus_fn.cli.fn``.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

import click

from dbus_fn.cli._errors import missing_extra


class PluginGroup(click.Group):
    """A group that also holds the commands of the entry point group ``plugins``."""

    def __init__(self, *args: Any, plugins: str, **settings: Any) -> None:
        super().__init__(*args, **settings)
        self.plugins = plugins

    def _plugins(self) -> dict[str, EntryPoint]:
        return {ep.name: ep for ep in entry_points(group=self.plugins)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        plugin = self._plugins().get(cmd_name)
        if plugin is None:
            return None
        try:
            loaded = plugin.load()
        except ImportError as exc:
            # A missing third-party module means the extras are not installed; keep
            # `--help` working and say how to fix it when the command is used.
            if (exc.name or "").startswith(("dbus_fn", "dbus_spark", "dbus_deploy")):
                raise
            return _unavailable(cmd_name, _typed(ctx, cmd_name), exc.name)
        assert isinstance(loaded, click.Command)
        return loaded


def _typed(ctx: click.Context, cmd_name: str) -> str:
    """``dbus fn backfill``: what the user typed, whatever the program was called."""
    words = [cmd_name]
    while ctx.parent is not None:
        words.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["dbus", *reversed(words)])


def _unavailable(name: str, command: str, missing: str | None) -> click.Command:
    error = missing_extra(command, missing, default="runtime")

    def fail() -> None:
        assert error is not None
        raise error

    # Whatever follows the name (`dbus runtime start --source ...`), the answer is this line.
    return click.Command(
        name,
        callback=fail,
        help=f"(unavailable: {missing} is not installed)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )
