"""How a ``dbus`` command ends on a failure: one line on stderr and a documented exit code.

Every command runs inside the root group, which turns a ``DbusError`` into a
``CommandError`` carrying the error's ``exit_code`` (the table is in
docs/cli.md), and an import of an extra that is not installed into the line that
says which extra to install, from where this dbus-fn came (``dbus_fn_requirement``).
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import click

from dbus_fn.errors import DbusError
from dbus_fn.home import checkout

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
    "docker": "image",
}
"""Which extra of dbus-fn installs a third-party module."""


INTERRUPTED = 130
"""The exit code of a command Ctrl-C stopped (SIGINT), as shells report it."""


class CommandError(click.ClickException):
    """A failure on its way out of a command: one line, and its exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click declares exit_code on the class; ours varies with the error.
        setattr(self, "exit_code", exit_code)  # noqa: B010


class Interrupted(CommandError):
    """A command Ctrl-C stopped before its end: one line saying what was kept, exit 130.

    Not a mistake, so the line carries no "Error:"."""

    def __init__(self, message: str) -> None:
        super().__init__(message, INTERRUPTED)

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(self.format_message(), file=file, err=file is None)


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
        f"install it with: pip install '{dbus_fn_requirement()}[{extra}]'"
    )


def dbus_fn_requirement() -> str:
    """What the scaffolded tox.ini installs: the dbus-fn running this command.

    A local checkout or a direct file URL install gives its folder, so a new
    function folder tests against the very SDK that made it; a release gives
    ``dbus-fn==<version>``.
    """
    # Running from a checkout (an editable install): that checkout. Tools such as
    # tox install it from a temporary wheel, whose file URL would not outlive them.
    repo = checkout()
    if repo is not None:
        return str(repo)
    try:
        dist = metadata.distribution("dbus-fn")
    except metadata.PackageNotFoundError:
        return "dbus-fn"
    direct = dist.read_text("direct_url.json")
    if direct:
        url = urlparse(json.loads(direct).get("url", ""))
        if url.scheme == "file" and Path(url2pathname(url.path)).is_dir():
            return url2pathname(url.path)
    return f"dbus-fn=={dist.version}"
