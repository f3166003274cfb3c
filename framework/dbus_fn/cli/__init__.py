"""The ``dbus`` command line.

The CLI is thin: each command parses its options and calls one library function;
the root group maps a ``DbusError`` to a one-line message and an exit code
(``_errors``), the same way for every command. Command groups that
need more than the SDK (``services``, ``runtime``) are found through the
``dbus_fn.cli`` entry point group, so installing the SDK alone never imports
Spark.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

import click

from dbus_fn.cli._errors import INTERRUPTED, from_dbus_error, missing_extra
from dbus_fn.cli._options import name_the_variable
from dbus_fn.errors import ConfigError, DbusError


class _LazyGroup(click.Group):
    """The root group: plugin subcommands are imported only when used, and every
    command's failure ends as one line and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            raise from_dbus_error(name_the_variable(exc, ctx)) from None
        except DbusError as exc:
            raise from_dbus_error(exc) from None
        except ImportError as exc:
            error = missing_extra(f"dbus {ctx.invoked_subcommand or ''}".strip(), exc.name)
            if error is None:
                raise
            raise error from None

    def _plugins(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group="dbus_fn.cli")}

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
            # `dbus --help` working and say how to fix it when the command is used.
            if (exc.name or "").startswith(("dbus_fn", "dbus_spark", "dbus_deploy")):
                raise
            return _unavailable(cmd_name, exc.name)
        assert isinstance(loaded, click.Command)
        return loaded


def _unavailable(name: str, missing: str | None) -> click.Command:
    error = missing_extra(f"dbus {name}", missing, default="runtime")

    def fail() -> None:
        assert error is not None
        raise error

    return click.Command(name, callback=fail, help=f"(unavailable: {missing} is not installed)")


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dbus-fn", prog_name="dbus")
def cli() -> None:
    """dbus: Python functions over MySQL/MariaDB row changes."""


from dbus_fn.cli.fn import fn as _fn  # noqa: E402 - the group needs `cli` defined first

cli.add_command(_fn)
from dbus_fn.cli.source import source as _source  # noqa: E402

cli.add_command(_source)
from dbus_fn.cli.cluster import cluster as _cluster  # noqa: E402

cli.add_command(_cluster)


def main() -> None:
    """Console entry point: user mistakes become one line and an exit code."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        raise SystemExit(INTERRUPTED) from None
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except click.exceptions.Exit as exc:
        raise SystemExit(exc.exit_code) from None
