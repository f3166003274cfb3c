"""The `dbus fn` history commands: backfill, verify, replay, deadletters and redrive.

They ask a running runtime (or read its sinks) and so need the runtime; the SDK's
`dbus fn` group finds them through the ``dbus_fn.cli.fn`` entry point group and
imports this module only when one is listed or used. Each command parses its
options and calls one function of this package, imported when the command runs.
"""

from __future__ import annotations

import sys

import click

# The runtime's state these commands reach (dbus_fn.capture, through
# dbus_spark.state.history) needs pymysql: imported here, so that without the extras
# `dbus fn --help` lists these commands, and those of ``pace`` and ``preview``, as
# unavailable and says what to install (dbus_fn.cli._plugins), before one is run.
import pymysql  # noqa: F401

from dbus_fn.cli._options import env_option
from dbus_fn.cli.cluster import ZooKeeperOptions, cluster_or_local_options
from dbus_spark.interfaces.api.token import check_token

CHECKPOINT_HELP = (
    "Checkpoint (folder or URI) of the runtime to ask, as given to `dbus runtime start`. "
    "Default: runtime/checkpoint in the local services' home."
)

def _sendable_token(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A token given must be one a request can carry (``check_token``): an empty one
    is refused, not sent as no token at all."""
    if value is not None:
        check_token(value, unset="for a runtime started without one")
    return value


api_token_option = env_option(
    "--api-token", env="DBUS_API_TOKEN", default=None, callback=_sendable_token,
    help="The token of the runtime's API (which every command asks), when it was started "
    "with one.",
)  # fmt: skip


@click.command("backfill")
@click.argument("name")
@click.option(
    "--table",
    "tables",
    multiple=True,
    help="A table (db.table) to read again; repeatable. Default: every table the "
    "deployment subscribes to.",
)
@click.option(
    "--where",
    default=None,
    help="Only rows matching this SQL condition on the table's own columns "
    "(e.g. \"updated_at > '2024-01-01'\").",
)
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@click.option(
    "--wait/--no-wait",
    default=True,
    show_default=True,
    help="Show the progress until the last chunk is read.",
)
@api_token_option
@cluster_or_local_options
def backfill(
    name: str,
    tables: tuple[str, ...],
    where: str | None,
    checkpoint: str | None,
    wait: bool,
    api_token: str | None,
    zk: ZooKeeperOptions | None,
) -> None:
    """Send deployment NAME its tables' current rows again, while it runs.

    The running runtime reads the tables in chunks, as the deployment's bootstrap
    does (see docs/history.md): the rows reach only this deployment, as snapshot
    rows, merged per key with the live stream. In a cluster (--cluster), the
    request goes through ZooKeeper to the runtime owning each source. Exit 2 for an
    unknown deployment or table, a --where that is not a condition on the table, or
    a backfill of the same table already running; exit 3 when no runtime answers.
    """
    from dbus_spark.interfaces.history.follow import backfill as request_backfill

    request_backfill(name, tables, where, checkpoint=checkpoint, wait=wait,
                     cluster=zk.settings() if zk else None, token=api_token)  # fmt: skip


@click.command("verify")
@click.argument("name")
@click.option(
    "--table",
    "tables",
    multiple=True,
    help="Only this table (db.table); repeatable. Default: every table of the deployment "
    "(extra keys, a lost delete, are found only then).",
)
@click.option(
    "--repair",
    is_flag=True,
    help="Send the drifted keys again through the running runtime, then verify again.",
)
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@env_option(
    "--source",
    "sources",
    multiple=True,
    env="DBUS_SOURCES",
    help="A source of the runtime as NAME=DSN (mysql://user:password@host:port), read with "
    "this DSN instead of asking the running runtime for its password; repeatable (in the "
    "variable: space-separated). With every source given, no runtime needs to run.",
)
@env_option(
    "--functions",
    multiple=True,
    env="DBUS_FUNCTIONS",
    type=click.Path(exists=True, file_okay=False),
    help="Verify this function folder (with dbus.toml) over the --source tables (default: "
    "the local MariaDB) and the local services' Kafka and Elasticsearch, as `dbus runtime "
    "start` would run it, instead of what the runtime at --checkpoint runs; repeatable.",
)
@env_option("--kafka", env="DBUS_KAFKA", help="Kafka bootstrap servers to read (default: "
            "the runtime's, or with --functions the local services').")  # fmt: skip
@env_option("--elasticsearch", env="DBUS_ELASTICSEARCH", help="Elasticsearch URL to read "
            "(default: the runtime's, or with --functions the local services').")  # fmt: skip
@api_token_option
def verify(
    name: str,
    tables: tuple[str, ...],
    repair: bool,
    checkpoint: str | None,
    sources: tuple[str, ...],
    functions: tuple[str, ...],
    kafka: str | None,
    elasticsearch: str | None,
    api_token: str | None,
) -> None:
    """Compare what deployment NAME's sinks hold with what its functions make of its
    tables now.

    Every row is read (in chunks, no lock) and run through the deployment's
    filters, projections and routes; each Elasticsearch index and each Kafka
    topic's last message per key is compared with the result. Keys missing, extra
    or differing are checked again a few seconds later (changes in flight are not
    drift) and listed per destination. It reads the runtime's configuration beside
    the checkpoint (sources, deployments, sinks); a runtime that ran there once is
    enough when --source gives each source's DSN, and none at all with --functions.
    Exit 6 when drift remains, 2 for an unknown deployment, table or source, 3 when
    no runtime answers for a password (or takes a --repair).
    """
    from dbus_spark.interfaces.history.verify import verify as run_verify

    run_verify(name, tables, checkpoint=checkpoint, sources=sources, functions=functions,
               kafka=kafka, elasticsearch=elasticsearch, repair=repair, out=sys.stdout,
               token=api_token)  # fmt: skip


@click.command("replay")
@click.argument("name")
@click.option(
    "--from",
    "start",
    required=True,
    help="Where to start: file:pos, file:pos@gtid, a GTID state (0-1-14) or an ISO time "
    "(2026-11-25T08:00:00, UTC unless it says).",
)
@click.option(
    "--to",
    "end",
    default=None,
    help="Where to end, in the same forms (default: the source's position now).",
)
@click.option(
    "--route",
    default=None,
    help="Send every result here instead of the deployment's own destinations, e.g. a "
    "shadow topic: kafka://orders.shadow.",
)
@click.option("--source", default=None, help="The source a position belongs to (with several).")
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Show the progress to the end."
)
@api_token_option
@cluster_or_local_options
def replay(
    name: str,
    start: str,
    end: str | None,
    route: str | None,
    source: str | None,
    checkpoint: str | None,
    wait: bool,
    api_token: str | None,
    zk: ZooKeeperOptions | None,
) -> None:
    """Run deployment NAME's current version again over retained binlog, while it runs.

    Only NAME sees the replayed changes; every other deployment goes on untouched.
    Exit 4 when --from is purged or past the end (a backfill reads the tables
    instead), 2 for an unknown deployment, a bad --route or a replay of NAME
    already running, 3 when no runtime answers.
    """
    from dbus_spark.interfaces.history.follow import replay as request_replay

    request_replay(
        name, start, end, route=route, source=source, checkpoint=checkpoint, wait=wait,
        cluster=zk.settings() if zk else None, token=api_token,
    )  # fmt: skip


_SINCE = click.option(
    "--since", default=None, help="Only dead letters recorded at or after this ISO time."
)


@click.command("deadletters")
@click.argument("name")
@_SINCE
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
def deadletters(name: str, since: str | None, checkpoint: str | None) -> None:
    """List what went to deployment NAME's dead-letter destination: when, which
    version, which function at which stage, the key, the position and the error."""
    from dbus_spark.interfaces.history.deadletters import dead_letters, parse_since

    dead_letters(name, checkpoint=checkpoint, since=parse_since(since), out=sys.stdout)


@click.command("redrive")
@click.argument("name")
@_SINCE
@env_option("--checkpoint", env="DBUS_CHECKPOINT", default=None, help=CHECKPOINT_HELP)
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Show the progress to the end."
)
@api_token_option
def redrive(
    name: str, since: str | None, checkpoint: str | None, wait: bool, api_token: str | None
) -> None:
    """Send deployment NAME's dead-lettered rows through its current version, while it runs.

    The running runtime reads each dead-lettered key's row as it is now (merged with
    the live stream, so nothing older lands after a newer change) and runs it
    through the deployed functions; a dead-lettered delete whose row is still gone
    is delivered as a delete. Rows that fail again are dead letters again, and then
    the command exits 1 naming them (not known with --no-wait).
    """
    from dbus_spark.interfaces.history.deadletters import parse_since
    from dbus_spark.interfaces.history.deadletters import redrive as run_redrive

    run_redrive(name, checkpoint=checkpoint, since=parse_since(since), wait=wait, out=sys.stdout,
                token=api_token)  # fmt: skip
