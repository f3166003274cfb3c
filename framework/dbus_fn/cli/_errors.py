"""How a ``dbus`` command ends on a failure: one line on stderr and a documented exit code.

Every command runs inside the root group, which turns a ``DbusError`` into a
``CommandError`` carrying the error's ``exit_code`` (the table is in
docs/cli.md), and an import of an extra that is not installed into the line that
says which extra to install.
"""

from __future__ import annotations

import click

from dbus_fn.errors import DbusError

EXTRA_OF_MODULE = {
    "pymysql": "capture",
    "pymysqlreplication": "capture",
    "kazoo": "coordination",
    "pyspark": "runtime",
    "pyarrow": "runtime",
    "pandas": "runtime",
    "confluent_kafka": "runtime",
    "elasticsearch": "runtime",
    "psutil": "dev",
}
"""Which extra of dbus-fn installs a third-party module."""


class CommandError(click.ClickException):
    """A failure on its way out of a command: one line, and its exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click declares exit_code on the class; ours varies with the error.
        setattr(self, "exit_code", exit_code)  # noqa: B010


def from_dbus_error(exc: DbusError) -> CommandError:
    """The error's message on one line, with the error's exit code."""
    return CommandError(" ".join(str(exc).split("\n")), exc.exit_code)


def missing_extra(
    command: str, missing: str | None, *, default: str | None = None
) -> CommandError | None:
    """The line for a command that needs an extra whose module ``missing`` is not
    installed; ``None`` when ``missing`` is not a module an extra (or ``default``)
    installs."""
    top = (missing or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top, default)
    if extra is None or not top or top.startswith("dbus_"):
        return None
    return CommandError(
        f"`{command}` needs the {extra} extra ({top} is missing); "
        f"install it with: pip install 'dbus-fn[{extra}]'"
    )
