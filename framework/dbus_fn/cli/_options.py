"""Options every command defines the same way: a ``DBUS_*`` variable behind a flag.

``env_option`` is a click option that falls back to its environment variable,
shows the variable in ``--help`` and, when a bad value came from the variable,
names the variable in the error instead of a flag the user never typed.
``FROM`` is the one ``--from`` (and ``DBUS_FROM``) of every command that reads a
source, so the variable means the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from click.core import ParameterSource

F = TypeVar("F", bound=Callable[..., Any])

FROM_HELP = (
    "Where to start reading: latest, earliest, snapshot (the tables as they are, then "
    "the binlog), file:pos, file:pos@gtid or a MariaDB GTID state such as 0-1-42."
)


class EnvOption(click.Option):
    """An option whose errors name its environment variable when the value came from it."""

    def get_error_hint(self, ctx: click.Context | None) -> str:
        source = ctx.get_parameter_source(self.name) if ctx and self.name else None
        if source is ParameterSource.ENVIRONMENT:
            return f"{self.envvar} (from the environment)"
        return super().get_error_hint(ctx)


def env_option(*names: str, env: str, **settings: Any) -> Callable[[F], F]:
    """A click option backed by the environment variable ``env``."""
    return click.option(*names, cls=EnvOption, envvar=env, show_envvar=True, **settings)


def given_as(ctx: click.Context, name: str, flag: str) -> str:
    """How the user gave parameter ``name``: its ``flag``, or its variable."""
    param = next((p for p in ctx.command.params if p.name == name), None)
    if param is not None and ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
        return f"{param.envvar} (from the environment)"
    return flag


FROM = env_option(
    "--from", "start", env="DBUS_FROM", default="latest", show_default=True, help=FROM_HELP
)
"""``--from`` / ``DBUS_FROM``: the start of every command that reads a source."""


def start_point(value: str) -> Any:
    """What ``--from`` names: ``latest``, ``earliest``, ``snapshot`` or a ``BinlogPosition``."""
    choice = value.strip().lower()
    if choice in ("latest", "earliest", "snapshot"):
        return choice
    from dbus_fn.capture import parse_position
    from dbus_fn.errors import ConfigError

    try:
        return parse_position(value)
    except ConfigError as exc:
        ctx = click.get_current_context(silent=True)
        where = given_as(ctx, "start", "--from") if ctx is not None else "--from"
        raise ConfigError(
            f"{where} {value!r} is not a place to start ({exc}); use latest, earliest, "
            "snapshot, file:pos, file:pos@gtid or a GTID state",
            setting="from",
        ) from None
