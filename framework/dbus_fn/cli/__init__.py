"""The ``dbus`` command line.

The CLI is thin: each command parses its options and calls one library function;
the root group maps a ``DbusError`` to a one-line message and an exit code
(``_errors``), the same way for every command. Commands that need more than
the SDK (``services``, ``runtime``; ``dbus fn backfill`` and the other history
commands) are found through the ``dbus_fn.cli`` and ``dbus_fn.cli.fn`` entry point
groups (``_plugins``), so the SDK never imports the runtime and installing it
alone never imports Spark.
"""

from __future__ import annotations

from typing import Any

import click

from dbus_fn.cli._errors import INTERRUPTED, from_dbus_error, missing_extra
from dbus_fn.cli._options import name_the_variable
from dbus_fn.cli._plugins import PluginGroup
from dbus_fn.errors import ConfigError, DbusError


class _RootGroup(PluginGroup):
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


@click.group(
    cls=_RootGroup, plugins="dbus_fn.cli", context_settings={"help_option_names": ["-h", "--help"]}
)
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
