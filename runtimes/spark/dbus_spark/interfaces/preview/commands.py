"""`dbus fn preview PATH`: the local version of a deployment over the last real events of
its tables, beside what the deployed version does with them. Nothing is written.

It asks the runtime at a checkpoint (or, with ``--cluster``, every runtime of the
cluster) for its window's events and the deployed version's outcome of each
(``GET /api/v1/preview/{name}``), runs PATH over the same events here, with its
own packages, and shows per event what changes, then a summary
(``dbus_fn.preview``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import click

from dbus_fn.cli._options import env_option
from dbus_fn.cli.cluster import ZooKeeperOptions, cluster_or_local_options
from dbus_fn.errors import ConfigError, DbusError, HistoryError
from dbus_fn.preview import (
    DEFAULT_EVENTS,
    Outcome,
    compare,
    event_summary,
    outcomes,
    parse_since,
    render,
    row_changes,
)
from dbus_fn.registry import with_packages
from dbus_spark.interfaces.api.client import SLACK_SECONDS, NoState, call, runtime_url, unanswered
from dbus_spark.interfaces.history.commands import CHECKPOINT_HELP, api_token_option
from dbus_spark.state.preview_window import patterns_meet

if TYPE_CHECKING:
    from dbus_fn.coordination import ZooKeeperSettings


class NothingToPreview(DbusError):
    """The window holds no event to preview, and why."""

    exit_code = 7


def _ask(url: str, name: str, query: str, token: str | None, where: str) -> dict[str, Any]:
    try:
        _, answer = call(url, f"/api/v1/preview/{name}?{query}", token=token,
                         timeout=SLACK_SECONDS)  # fmt: skip
    except NoState as exc:
        if exc.code == 404:
            raise HistoryError(f"{where}: {exc.detail}") from None
        raise unanswered(where, url, exc, token) from None
    assert isinstance(answer, dict)
    return answer


def _runtime_apis(settings: ZooKeeperSettings) -> list[str]:
    from dbus_fn.coordination import cluster_client, cluster_status

    with cluster_client(settings) as client:
        status = cluster_status(client, settings)
    apis = [r.api for r in status.runtimes if r.api]
    if not apis:
        raise ConfigError(
            f"no runtime of cluster {settings.cluster} serves an API (each was started "
            "with --api off, or none runs); start one with its API on",
            setting="--cluster",
        )
    return apis


def ask_previews(
    name: str,
    query: dict[str, Any],
    *,
    checkpoint: str | None,
    cluster: ZooKeeperSettings | None,
    token: str | None,
) -> list[dict[str, Any]]:
    """Each runtime's answer (the one at ``checkpoint``, or every one of ``cluster``)."""
    text = urlencode(query, doseq=True)
    if cluster is None:
        from dbus_spark.interfaces.history.target import runtime_at

        folder, _ = runtime_at(checkpoint)
        return [_ask(runtime_url(folder), name, text, token, f"the runtime at {folder}")]
    return [_ask(api, name, text, token, f"runtime {api}") for api in _runtime_apis(cluster)]


def merged(answers: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], list[Outcome]]:
    """The ``limit`` newest events of all answers (each once), with the deployed outcomes."""
    pairs: dict[str, tuple[dict[str, Any], Outcome]] = {}
    for answer in answers:
        for event, outcome in zip(answer["events"], answer["outcomes"], strict=True):
            pairs.setdefault(str(event.get("id")), (event, Outcome.from_json(outcome)))
    newest = sorted(pairs.values(), key=lambda p: str(p[0].get("time", "")))[-limit:]
    return [e for e, _ in newest], [o for _, o in newest]


@click.command("preview")
@click.argument(
    "path", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path(".")
)
@click.option("--events", "-n", "count", type=click.IntRange(1, 10_000), default=DEFAULT_EVENTS,
              show_default=True, help="How many of the newest events to run over.")  # fmt: skip
@click.option("--table", "tables", multiple=True,
              help="Only this table (db.table or table; repeat for more); default: every "
              "table PATH subscribes to.")  # fmt: skip
@click.option(
    "--since",
    default=None,
    help="Only events committed since: a duration back (10m, 2h) or an ISO time.",
)
@click.option("--all", "every", is_flag=True, help="Show every event, not only those that change.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@api_token_option
@cluster_or_local_options
def preview(
    path: Path,
    count: int,
    tables: tuple[str, ...],
    since: str | None,
    every: bool,
    as_json: bool,
    checkpoint: str | None,
    api_token: str | None,
    zk: ZooKeeperOptions | None,
) -> None:
    """Run the deployment at PATH over the last real events of its tables and show, per
    event, what the deployed version did beside what PATH does: filtered or not, the
    rows sent and where, dead letters and their errors; then what changes (routes that
    appear or vanish, fields added or removed, new dead letters).

    The events come from the running runtime's window (`dbus runtime start
    --preview-window`, 100 per table by default); nothing is written to any sink. A
    function that fails on some events shows their dead letters. Exit 2 for a bad
    option or a deployment the runtime does not run, 3 when no runtime answers, 7 when
    the window holds no event of its tables (the message says why).
    """
    local = with_packages(path)
    for table in tables:
        if not patterns_meet(local.manifest.tables, [table]):
            raise ConfigError(
                f"--table {table}: {local.name} does not subscribe to it (it subscribes to "
                f"{', '.join(local.manifest.tables)}); name one of those",
                setting="--table",
            )
    query: dict[str, Any] = {"limit": count, "table": list(tables or local.manifest.tables)}
    if since is not None:
        query["since"] = parse_since(since)
    answers = ask_previews(
        local.name, query, checkpoint=checkpoint,
        cluster=zk.settings() if zk else None, token=api_token,
    )  # fmt: skip
    events, deployed = merged(answers, count)
    if not events:
        why = "; ".join(sorted({str(a.get("empty")) for a in answers if a.get("empty")}))
        raise NothingToPreview(f"nothing to preview for {local.name}: {why or 'no events'}")
    changes = row_changes(events)
    version = answers[0]["version"]
    comparison = compare(
        local.name,
        (f"deployed {version}", deployed),
        (f"local {local.manifest.version}", outcomes(local, changes)),
        [event_summary(c) for c in changes],
    )
    if as_json:
        click.echo(json.dumps(comparison.to_json(), indent=2, default=str))
        return
    click.echo(render(comparison, every=every), file=sys.stdout)


__all__ = ["NothingToPreview", "ask_previews", "merged", "preview"]
