"""`dbus fn pause NAME` and `dbus fn resume NAME`: a deployment's position held, and let
go (``dbus_spark.progress``).

They ask the runtime at a checkpoint, between two micro-batches, as a backfill does
(``dbus_spark.history.requests``); the SDK's `dbus fn` group finds them through the
``dbus_fn.cli.fn`` entry point group.
"""

from __future__ import annotations

import sys

import click

from dbus_fn.cli._options import env_option
from dbus_spark.history.commands import CHECKPOINT_HELP

ANSWER_TIMEOUT = 30.0


def ask(name: str, *, pause: bool, checkpoint: str | None, timeout: float = ANSWER_TIMEOUT) -> str:
    """Ask the runtime at ``checkpoint`` to pause (or resume) deployment ``name``; its
    answer. ``HistoryError`` when it refuses, ``ServiceUnreachableError`` when no
    runtime takes the request in ``timeout`` seconds (it is then withdrawn)."""
    from dbus_spark.history.requests import PaceRequest, submit, wait_answer
    from dbus_spark.history.target import runtime_at

    folder, _ = runtime_at(checkpoint)
    request = PaceRequest(name, pause)
    submit(folder, request)
    return wait_answer(folder, request, timeout=timeout).message


@click.command("pause")
@click.argument("name")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
def pause(name: str, checkpoint: str | None) -> None:
    """Stop sending deployment NAME anything; its position holds.

    The other deployments go on. `dbus fn resume NAME` lets it catch up from where it
    stopped, on a read of its own, and rejoin the shared read: nothing is lost. Exit
    2 for a deployment the runtime does not run, 3 when no runtime answers.
    """
    click.echo(ask(name, pause=True, checkpoint=checkpoint), file=sys.stdout)


@click.command("resume")
@click.argument("name")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
def resume(name: str, checkpoint: str | None) -> None:
    """Let a paused deployment NAME catch up from where it stopped, then rejoin."""
    click.echo(ask(name, pause=False, checkpoint=checkpoint), file=sys.stdout)


__all__ = ["ask", "pause", "resume"]
