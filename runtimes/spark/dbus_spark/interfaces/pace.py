"""`dbus fn pause NAME` and `dbus fn resume NAME`: a deployment's position held, and let
go (``dbus_spark.state.progress``); `dbus fn status`: where each deployment stands.

All three ask the runtime at a checkpoint through its API (``dbus_spark.interfaces.api.client``):
pause and resume post a request its planner answers between two micro-batches, as
a backfill does (``dbus_spark.planning.requests``); status asks for its state, as
the dashboard does. The SDK's `dbus fn` group finds them through the
``dbus_fn.cli.fn`` entry point group.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from dbus_fn.cli._options import env_option
from dbus_fn.cli.cluster import ZooKeeperOptions, cluster_or_local_options
from dbus_fn.errors import HistoryError
from dbus_spark.interfaces.history.commands import CHECKPOINT_HELP, api_token_option

if TYPE_CHECKING:
    from dbus_fn.coordination import ZooKeeperSettings

ANSWER_TIMEOUT = 30.0


def ask(name: str, *, pause: bool, checkpoint: str | None, timeout: float = ANSWER_TIMEOUT,
        cluster: ZooKeeperSettings | None = None, token: str | None = None) -> str:  # fmt: skip
    """Ask the runtime at ``checkpoint`` (through its API) or the runtimes of ``cluster``
    owning its sources (through ZooKeeper) to pause (or resume) deployment ``name``;
    its answer. ``HistoryError`` when it refuses, ``ServiceUnreachableError`` when no
    runtime takes the request in ``timeout`` seconds (it is then withdrawn)."""
    from dbus_spark.interfaces.history.follow import ask as ask_runtime
    from dbus_spark.interfaces.history.follow import ask_cluster
    from dbus_spark.interfaces.history.target import runtime_at
    from dbus_spark.planning.request_models import PaceRequest

    request = PaceRequest(name, pause)
    if cluster is not None:
        answers = ask_cluster(cluster, request, answer_timeout=timeout)
        return "\n".join(f"{source}: {answers[source].message}" for source in sorted(answers))
    folder, _ = runtime_at(checkpoint)
    what = "pause" if pause else "resume"
    return ask_runtime(folder, request, what, answer_timeout=timeout, token=token).message


@click.command("pause")
@click.argument("name")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@api_token_option
@cluster_or_local_options
def pause(
    name: str, checkpoint: str | None, api_token: str | None, zk: ZooKeeperOptions | None
) -> None:
    """Stop sending deployment NAME anything; its position holds.

    The other deployments go on. `dbus fn resume NAME` lets it catch up from where it
    stopped, on a read of its own, and rejoin the shared read: nothing is lost. In a
    cluster (--cluster), each runtime owning a source pauses it there, and the
    position moves with the source. Exit 2 for a deployment the runtime does not run,
    3 when no runtime answers.
    """
    said = ask(name, pause=True, checkpoint=checkpoint, cluster=zk.settings() if zk else None,
               token=api_token)  # fmt: skip
    click.echo(said, file=sys.stdout)


@click.command("resume")
@click.argument("name")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@api_token_option
@cluster_or_local_options
def resume(
    name: str, checkpoint: str | None, api_token: str | None, zk: ZooKeeperOptions | None
) -> None:
    """Let a paused deployment NAME catch up from where it stopped, then rejoin."""
    said = ask(name, pause=False, checkpoint=checkpoint, cluster=zk.settings() if zk else None,
               token=api_token)  # fmt: skip
    click.echo(said, file=sys.stdout)


def deployments_of(checkpoint: str | None, token: str | None = None) -> list[dict[str, Any]]:
    """What the runtime at ``checkpoint`` says of its deployments (its API's state, as
    the dashboard asks it), as JSON."""
    from dataclasses import asdict

    from dbus_spark.interfaces.api.client import runtime_state
    from dbus_spark.interfaces.history.target import runtime_at

    folder, _ = runtime_at(checkpoint)
    state = runtime_state(folder, token, timeout=ANSWER_TIMEOUT)
    return [asdict(deployment) for deployment in state.deployments]


def status_line(deployment: dict[str, Any]) -> str:
    """One deployment as `dbus fn status` prints it."""
    lag = deployment.get("lag_seconds")
    line = f"{deployment['name']}  {deployment['version']}  {deployment['state']}"
    if lag is not None:
        line += f"  lag {lag:.1f}s"
    for pace in deployment.get("pace", []):
        if pace["state"] == "with-stream":
            continue
        line += f"  [{pace['source']}: {pace['state']}"
        if pace.get("position"):
            line += f" at {pace['position']}"
        if pace.get("lag_bytes") is not None:
            line += f", {pace['lag_bytes']} bytes behind"
        if pace.get("reason"):
            line += f"; {pace['reason']}"
        line += "]"
    return line


@click.command("status")
@click.argument("name", required=False)
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@api_token_option
@click.option("--json", "as_json", is_flag=True, help="Print what the runtime said, as JSON.")
def status(name: str | None, checkpoint: str | None, api_token: str | None, as_json: bool) -> None:
    """Each deployment of a running runtime: with the stream, catching up, detached
    (and why) or paused, and how far behind its sinks are.

    Exit 2 for a deployment the runtime does not run, 3 when no runtime answers.
    """
    found = deployments_of(checkpoint, api_token)
    if name is not None:
        names = sorted(d["name"] for d in found)
        found = [d for d in found if d["name"] == name]
        if not found:
            raise HistoryError(
                f"no deployment {name!r} runs in this runtime; it runs "
                f"{', '.join(names) or 'none'}"
            )
    if as_json:
        click.echo(json.dumps(found, indent=2, sort_keys=True))
        return
    if not found:
        click.echo("no deployment runs in this runtime; give it one with --functions")
    for deployment in found:
        click.echo(status_line(deployment))


__all__ = ["ask", "deployments_of", "pause", "resume", "status", "status_line"]
