"""`dbus runtime`: run the shared Spark runtime."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from dbus_fn.cli._options import env_option, given_as
from dbus_fn.errors import ConfigError, UndeliveredError
from dbus_spark.config import DEFAULT_CHUNK_ROWS
from dbus_spark.preflight import check_runtime
from dbus_spark.settings import runtime_config

if TYPE_CHECKING:
    from dbus_spark.cluster import ClusterMember


@click.group()
def runtime() -> None:
    """Run the shared Spark Structured Streaming runtime."""


@runtime.command("start")
@env_option(
    "--source",
    "sources",
    multiple=True,
    env="DBUS_SOURCES",
    help="A binlog source as NAME=DSN (mysql://user:password@host:port); repeatable (in "
    "the variable: space-separated). Default: the local MariaDB of `dbus services up`.",
)
@env_option(
    "--functions",
    "deployments",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    env="DBUS_FUNCTIONS",
    help="A function folder (with dbus.toml) to run; repeatable.",
)
@env_option("--kafka", env="DBUS_KAFKA", help="Kafka bootstrap servers.")
@env_option(
    "--elasticsearch",
    env="DBUS_ELASTICSEARCH",
    help="Elasticsearch URL.",
)
@env_option(
    "--checkpoint",
    env="DBUS_CHECKPOINT",
    type=click.Path(file_okay=False),
    help="Checkpoint directory (committed positions). Default: runtime/checkpoint in the "
    "local services' home (DBUS_HOME, else the checkout's .dbus), whatever the current "
    "folder.",
)
@env_option(
    "--from",
    "start",
    type=click.Choice(["earliest", "latest"]),
    default="latest",
    show_default=True,
    env="DBUS_FROM",
    help="Where a new source starts; a checkpoint, when there is one, wins.",
)
@click.option(
    "--trigger",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds between micro-batches (0: as soon as the last one ends).",
)
@env_option(
    "--decode-shards",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    env="DBUS_DECODE_SHARDS",
    help="Tasks that read one busy source at once, each decoding its share of the keys "
    "(0: one per two Spark cores).",
)
@env_option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=DEFAULT_CHUNK_ROWS,
    show_default=True,
    env="DBUS_CHUNK_ROWS",
    help="Rows per chunk at most when a deployment's history is read from its tables "
    "(its bootstrap or a backfill); chunks are sized to be read in under a second, "
    "and read in parallel, a few per micro-batch.",
)
@env_option(
    "--master",
    default="local[*]",
    show_default=True,
    env="DBUS_SPARK_MASTER",
    help="Spark master URL.",
)
@env_option(
    "--cluster",
    env="DBUS_CLUSTER",
    default=None,
    help="Join this dbus cluster: ZooKeeper assigns the sources and holds the functions "
    "(then --source and --functions are not used).",
)
@env_option(
    "--zookeeper",
    env="DBUS_ZOOKEEPER",
    default=None,
    help="ZooKeeper hosts of the cluster (default 127.0.0.1:2181).",
)
@env_option(
    "--zk-session-timeout",
    type=click.FloatRange(min=0, min_open=True),
    env="DBUS_ZK_SESSION_TIMEOUT",
    default=None,
    help="Seconds ZooKeeper waits for a silent runtime before its sources move to the "
    "others (default 10; the server keeps it within 2 and 20 of its ticks).",
)
@env_option(
    "--runtime-id",
    env="DBUS_RUNTIME_ID",
    default=None,
    help="This runtime's name in the cluster (default: host-pid).",
)
@click.option(
    "--capacity",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="This runtime's share of the cluster's sources, relative to the others.",
)
@click.option(
    "--for",
    "run_for",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many seconds.",
)
@env_option(
    "--verbose",
    is_flag=True,
    env="DBUS_VERBOSE",
    help="Also show Spark's warnings and the Kafka and Elasticsearch clients' warnings "
    "and notices.",
)
def start(
    sources: tuple[str, ...],
    deployments: tuple[str, ...],
    kafka: str | None,
    elasticsearch: str | None,
    checkpoint: str | None,
    start: str,
    trigger: float,
    decode_shards: int,
    chunk_rows: int,
    master: str,
    cluster: str | None,
    zookeeper: str | None,
    zk_session_timeout: float | None,
    runtime_id: str | None,
    capacity: float,
    run_for: float | None,
    verbose: bool,
) -> None:
    """Run the function deployments over the sources until stopped (Ctrl-C)."""
    from dbus_spark.job import start as start_query
    from dbus_spark.job import start_member
    from dbus_spark.job import stop as stop_query

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    member = None
    if cluster is not None:
        if sources or deployments:
            ctx = click.get_current_context()
            given = [
                given_as(ctx, name, flag)
                for name, flag, value in (
                    ("sources", "--source", sources), ("deployments", "--functions", deployments)
                )
                if value
            ]  # fmt: skip
            raise ConfigError(
                f"{given_as(ctx, 'cluster', '--cluster')} takes the sources and functions from "
                f"ZooKeeper: drop {' and '.join(given)} (register them with `dbus cluster "
                "source add` and `dbus fn deploy`)",
                setting="cluster",
            )
        member = _member(click.get_current_context().params)
        checkpoint_dir = member.checkpoint_dir
        query = start_member(member, master=master, verbose=verbose)
    else:
        if not deployments:
            raise ConfigError(
                "no function folder given: pass --functions PATH (a folder with dbus.toml), "
                "or --cluster NAME to run what is deployed there",
                setting="functions",
            )
        config = runtime_config(
            sources=sources,
            deployments=deployments,
            kafka=kafka,
            elasticsearch=elasticsearch,
            checkpoint=checkpoint,
            start=start,
            trigger=trigger,
            decode_shards=decode_shards,
            chunk_rows=chunk_rows,
        )
        checkpoint_dir = config.checkpoint_dir
        query = start_query(config, master=master, verbose=verbose)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    deadline = None if run_for is None else time.monotonic() + run_for
    try:
        while not stop and query.isActive:
            if deadline is not None and time.monotonic() > deadline:
                break
            query.awaitTermination(1.0)
    except KeyboardInterrupt:
        pass
    except Exception:
        # SIGTERM sent to the whole process group (a service manager's stop) also
        # reaches Spark's JVM and Python helpers, so the query dies under us with
        # their errors: that is the stop we were asked for, not a failure.
        if not stop:
            raise
    finally:
        stopping = time.time()
        try:
            if query.isActive:
                stop_query(query)
        except Exception:
            if not stop:
                raise
        finally:
            if member is not None:
                member.stop()
    error = None if stop else query.exception()
    if error is not None:
        raise click.ClickException(f"the runtime stopped on an error: {str(error).splitlines()[0]}")
    if not stop:  # a service manager's SIGTERM is a stop, not a failed run
        _check_delivered(checkpoint_dir, stopping)
    click.echo("runtime stopped")


def _check_delivered(checkpoint_dir: str, stopping: float) -> None:
    """Fail a run that ends with a batch its sinks never took (one planned before the
    stop began; a batch the stop itself cut short is only replayed)."""
    from dbus_spark.job import pending_batch

    pending = pending_batch(checkpoint_dir)
    if pending is None or pending.planned_at >= stopping:
        return
    reads = ", ".join(f"{name} up to {position}" for name, position in pending.positions.items())
    raise UndeliveredError(
        f"batch {pending.batch} ({reads or 'no source'}) was never acknowledged by the sinks "
        "before the runtime stopped; nothing is lost: the next start with the same "
        f"checkpoint ({checkpoint_dir}) delivers it. See the log above for the sink that failed",
        batch=pending.batch,
    )


def _member(options: Mapping[str, Any]) -> ClusterMember:
    """The cluster member ``runtime start --cluster`` runs, from the command's options."""
    import os
    import socket

    from dbus_fn.coordination import ZooKeeperSettings
    from dbus_spark.cluster import ClusterMember
    from dbus_spark.job import default_config_path
    from dbus_spark.settings import member_config

    settings = ZooKeeperSettings.from_env(
        os.environ,
        hosts=options["zookeeper"],
        cluster=options["cluster"],
        session_timeout=options["zk_session_timeout"],
    )
    name = options["runtime_id"] or f"{socket.gethostname()}-{os.getpid()}"
    settings_of_base = (
        "kafka", "elasticsearch", "checkpoint", "trigger", "decode_shards", "chunk_rows",
    )  # fmt: skip
    base = member_config(**{key: options[key] for key in settings_of_base})
    check_runtime(
        kafka=base.kafka_bootstrap, elasticsearch=base.elasticsearch_url, master=options["master"]
    )
    return ClusterMember(
        settings, name, base, default_config_path(base),
        capacity=options["capacity"], start=options["start"],
    )  # fmt: skip
