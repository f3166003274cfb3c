"""Options every command defines the same way: a ``DBUS_*`` variable behind a flag.

``env_option`` is a click option that falls back to its environment variable,
shows the variable in ``--help`` and, when a bad value came from the variable,
names the variable in the error instead of a flag the user never typed.
``FROM`` is the one ``--from`` (and ``DBUS_FROM``) of every command that reads a
source, so the variable means the same everywhere; ``KEEP_HELPER_TABLES`` likewise.
``refuse_empty`` and ``FiniteFloatRange`` refuse what would otherwise pass unnoticed:
an empty name, a number of seconds that is ``nan`` or ``inf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from dbus_fn.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

FROM_HELP = (
    "Where to start reading: latest, earliest, snapshot (the tables as they are, then "
    "the binlog), file:pos, file:pos@gtid, a MariaDB GTID state such as 0-1-42 or a "
    "MySQL GTID set such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-42 (not a time: "
    "`dbus fn replay --from` takes one)."
)


_FROM_ENV = "dbus_fn.from_environment"
"""The key in ``ctx.meta`` (shared by a command's context and its parents) under which
the options whose value came from their variable are kept: option name → EnvOption."""


class EnvOption(click.Option):
    """An option whose errors name its environment variable when the value came from it:
    click's own (``get_error_hint``) and a ``ConfigError`` about it that the command
    raises later (``name_the_variable``)."""

    def get_error_hint(self, ctx: click.Context | None) -> str:
        source = ctx.get_parameter_source(self.name) if ctx and self.name else None
        if source is ParameterSource.ENVIRONMENT:
            return f"{self.envvar} (from the environment)"
        return super().get_error_hint(ctx)

    def handle_parse_result(
        self, ctx: click.Context, opts: Mapping[str, Any], args: list[str]
    ) -> tuple[Any, list[str]]:
        value, rest = super().handle_parse_result(ctx, opts, args)
        if self.name and ctx.get_parameter_source(self.name) is ParameterSource.ENVIRONMENT:
            ctx.meta.setdefault(_FROM_ENV, {})[self.name] = self
        return value, rest

    def names_setting(self, setting: str) -> bool:
        """Whether a ``ConfigError``'s ``setting`` ("api", "--master", "zk-timeout")
        means this option."""
        wanted = setting.lstrip("-").replace("-", "_")
        return wanted == self.name or any(
            opt.lstrip("-").replace("-", "_") == wanted for opt in self.opts
        )


def name_the_variable(exc: ConfigError, ctx: click.Context) -> ConfigError:
    """``exc`` with the variable named, when the value it is about came from one.

    A message that begins with the option's flag gets the variable in its place;
    any other gets the variable in front. One already naming it stays as it is.
    """
    from_env: dict[str, EnvOption] = ctx.meta.get(_FROM_ENV, {})
    option = next(
        (o for o in from_env.values() if exc.setting and o.names_setting(exc.setting)), None
    )
    message = str(exc)
    if option is None or not isinstance(option.envvar, str) or option.envvar in message:
        return exc
    named = f"{option.envvar} (from the environment)"
    flag = next((opt for opt in option.opts if message.startswith(opt + " ")), None)
    text = named + message[len(flag) :] if flag else f"{named}: {message}"
    return ConfigError(text, setting=exc.setting)


def env_option(*names: str, env: str, **settings: Any) -> Callable[[F], F]:
    """A click option backed by the environment variable ``env``."""
    return click.option(*names, cls=EnvOption, envvar=env, show_envvar=True, **settings)


def given_as(ctx: click.Context, name: str, flag: str) -> str:
    """How the user gave parameter ``name``: its ``flag``, or its variable."""
    param = next((p for p in ctx.command.params if p.name == name), None)
    if param is not None and ctx.get_parameter_source(name) is ParameterSource.ENVIRONMENT:
        return f"{param.envvar} (from the environment)"
    return flag


def _given(ctx: click.Context | None, param: click.Parameter | None) -> str:
    """How the user gave ``param`` (its first flag, or its variable), while it is read."""
    flag = param.opts[0] if param is not None and param.opts else "the value"
    if ctx is None or param is None or param.name is None:
        return flag
    return given_as(ctx, param.name, flag)


def refuse_empty(instead: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """The callback of an option that, given empty, would quietly mean something else:
    ``--cluster ''`` meant the cluster ``default`` (and ``cluster init`` created it),
    ``--name ''`` the manifest's name, ``rollback --to ''`` no version at all, so every
    runtime stopped the function (issue #46). The ``ConfigError`` says ``instead``,
    what to give. An empty variable is not given at all, as click reads it."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            what = "is empty" if not value else "is only whitespace"
            raise ConfigError(
                f"{_given(ctx, param)} {value!r} {what}; {instead}", setting=param.name
            )
        return value

    return check


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` without ``nan`` and ``inf``, which ``float()`` reads: ``nan``
    passes every bound (each comparison with it is false) and ``inf`` every lower one,
    so ``--trigger inf`` started Spark only to fail in it, and ``--for nan`` never
    ended (issue #46). Every option that takes a number of seconds or a share uses it."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Any:
        number = super().convert(value, param, ctx)
        if math.isfinite(number):
            return number
        raise ConfigError(
            f"{_given(ctx, param)} {value!r} is not a finite number; give one such as 2.5",
            setting=param.name if param is not None else None,
        )


FROM = env_option(
    "--from", "start", env="DBUS_FROM", default="latest", show_default=True, help=FROM_HELP
)
"""``--from`` / ``DBUS_FROM``: the start of every command that reads a source."""

KEEP_HELPER_TABLES = env_option(
    "--keep-helper-tables/--skip-helper-tables",
    "keep_helper_tables",
    default=None,
    env="DBUS_KEEP_HELPER_TABLES",
    help="Deliver the rows of online schema change tools' helper tables "
    "(pt-online-schema-change's _T_new and _T_old, gh-ost's _T_gho, _T_ghc and _T_del) as "
    "tables of their own. Default: skip them; the swap at the end is the schema change of T.",
)
"""The one ``--keep-helper-tables`` (and ``DBUS_KEEP_HELPER_TABLES``) of ``dbus runtime
start``, ``dbus source add|tail|record`` and ``dbus cluster source add``: None when
neither is given (``dbus fn run-local`` always leaves helper tables out)."""


def start_point(value: str) -> Any:
    """What ``--from`` names: ``latest``, ``earliest``, ``snapshot`` or a ``BinlogPosition``."""
    choice = value.strip().lower()
    if choice in ("latest", "earliest", "snapshot"):
        return choice
    from dbus_fn.capture import parse_position

    ctx = click.get_current_context(silent=True)
    where = given_as(ctx, "start", "--from") if ctx is not None else "--from"
    places = "use latest, earliest, snapshot, file:pos, file:pos@gtid or a GTID state"
    if _is_a_time(value):
        # parse_position would take 2030-01-01T00:00:00 for file "2030-01-01T00:00",
        # offset 0, and the read would call that file purged.
        raise ConfigError(
            f"{where} {value!r} is a time; reading a source starts at a position, not a "
            f"time: {places} (`dbus fn replay --from` takes a time)",
            setting="from",
        )
    try:
        return parse_position(value)
    except ConfigError as exc:
        raise ConfigError(
            f"{where} {value!r} is not a place to start ({exc}); {places}",
            setting="from",
        ) from None


def _is_a_time(value: str) -> bool:
    """Whether ``value`` is an ISO date or time (2026-11-25, 2026-11-25T08:00:00Z)."""
    from datetime import datetime

    try:
        datetime.fromisoformat(value.strip())
    except ValueError:
        return False
    return True
