"""`dbus runtime`: run the shared Spark runtime."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from dbus_fn.cli._errors import Interrupted
from dbus_fn.cli._options import (
    KEEP_HELPER_TABLES,
    FiniteFloatRange,
    env_option,
    given_as,
    refuse_empty,
)
from dbus_fn.errors import ConfigError, DbusError, UndeliveredError
from dbus_spark.config.logs import LOG_FORMAT_ENV, log_formatter
from dbus_spark.config.runtime import (
    DEFAULT_API_ADDRESS,
    DEFAULT_CHUNK_ROWS,
    DEFAULT_DETACH_SECONDS,
    DEFAULT_OPEN_READ_SECONDS,
    DEFAULT_PREVIEW_WINDOW,
    EXECUTOR_PYTHON_ENV,
    MAX_DECODE_SHARDS,
)
from dbus_spark.interfaces.settings import runtime_config
from dbus_spark.spark.preflight import check_runtime

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

    from dbus_spark.cluster.member import ClusterMember
    from dbus_spark.interfaces.api.runtime import RuntimeApi


API_TOKEN = env_option(
    "--api-token",
    env="DBUS_API_TOKEN",
    default=None,
    help="A token every API request must carry (Authorization: Bearer TOKEN); needed to "
    "serve beyond loopback.",
)
RUN_FOR = click.option(
    "--for",
    "run_for",
    type=FiniteFloatRange(min=0, min_open=True),
    default=None,
    help="Stop after this many seconds.",
)


def _shards_within_bound(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """``--decode-shards`` no higher than ``MAX_DECODE_SHARDS``, whose reason it gives."""
    if value > MAX_DECODE_SHARDS:
        raise ConfigError(
            f"{given_as(ctx, 'decode_shards', '--decode-shards')} {value} is over "
            f"{MAX_DECODE_SHARDS}, the most one source is read with: each shard is a "
            f"replication connection of its own to the source; give at most {MAX_DECODE_SHARDS}, "
            "or 0 for one per two Spark cores",
            setting="decode_shards",
        )
    return value


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
@KEEP_HELPER_TABLES
@env_option("--kafka", env="DBUS_KAFKA", help="Kafka bootstrap servers.")
@env_option(
    "--elasticsearch",
    env="DBUS_ELASTICSEARCH",
    help="Elasticsearch URL.",
)
@env_option(
    "--checkpoint",
    env="DBUS_CHECKPOINT",
    help="Checkpoint (committed positions): a local folder, or a Hadoop file system URI "
    "the driver reaches (hdfs://, s3a://, file:// ...; see docs/distribution.md). Default: "
    "runtime/checkpoint in the local services' home (DBUS_HOME, else the checkout's .dbus, "
    "or /var/tmp/dbus-<id> for a checkout other users cannot enter: `dbus services --help` "
    "names it), whatever the current folder.",
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
    type=FiniteFloatRange(min=0),
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
    callback=_shards_within_bound,
    help="Tasks that read one busy source at once, each decoding its share of the keys "
    f"(0: one per two Spark cores; at most {MAX_DECODE_SHARDS}: each is a replication "
    "connection of its own to the source).",
)
@env_option(
    "--open-read",
    type=FiniteFloatRange(min=0),
    default=DEFAULT_OPEN_READ_SECONDS,
    show_default=True,
    env="DBUS_OPEN_READ",
    help="Seconds a micro-batch's one reader of a source goes on past the batch's planned "
    "end, sending each change to the sinks as it is committed (0: never). Longer: fewer "
    "checkpoints and fewer changes waiting between two batches; a crash or a stop "
    "replays up to this much again (at least once, as always). Not in a --cluster, "
    "whose fenced writes wait for the batch's commit.",
)
@env_option(
    "--detach-after",
    type=FiniteFloatRange(min=0),
    default=DEFAULT_DETACH_SECONDS,
    show_default=True,
    env="DBUS_DETACH_AFTER",
    help="Seconds a deployment's sinks may take to acknowledge what a read gave them; "
    "one that takes longer (or whose functions take most of a read's time) is detached: "
    "the others go on, and it catches up on a read of its own and rejoins (0: never "
    "detach; every deployment waits for the slowest).",
)
@env_option(
    "--preview-window",
    type=click.IntRange(min=0),
    default=DEFAULT_PREVIEW_WINDOW,
    show_default=True,
    env="DBUS_PREVIEW_WINDOW",
    help="Of each table it reads, how many of the newest changes the runtime keeps for "
    "`dbus fn preview` and the dashboard's preview (0: none, and previews say so).",
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
    "--executor-python",
    env="DBUS_EXECUTOR_PYTHON",
    default=None,
    help="The Python Spark's executors run: a name each host finds on its PATH (python3, "
    "as in the runtime image), or a path that exists on every host. Default: this one.",
)
@env_option(
    "--cluster",
    env="DBUS_CLUSTER",
    default=None,
    callback=refuse_empty(
        "give a cluster name, or leave the option out to run the --functions folders alone"
    ),
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
    type=FiniteFloatRange(min=0, min_open=True),
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
    type=FiniteFloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="This runtime's share of the cluster's sources, relative to the others.",
)
@env_option(
    "--api",
    "api_address",
    env="DBUS_API",
    default=DEFAULT_API_ADDRESS,
    show_default=True,
    help="Serve the runtime's metrics (/metrics, for Prometheus) and its JSON API "
    "(/api/v1/...) at HOST:PORT (port 0: any free one; the address is logged and written "
    "beside the checkpoint), or off.",
)
@API_TOKEN
@env_option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    env="DBUS_LOG_FORMAT",
    help="The runtime's log lines as text, or as one JSON object each (the batch line's "
    "counters as fields) for machines.",
)
@RUN_FOR
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
    keep_helper_tables: bool | None,
    kafka: str | None,
    elasticsearch: str | None,
    checkpoint: str | None,
    start: str,
    trigger: float,
    decode_shards: int,
    open_read: float,
    detach_after: float,
    preview_window: int,
    chunk_rows: int,
    master: str,
    executor_python: str | None,
    cluster: str | None,
    zookeeper: str | None,
    zk_session_timeout: float | None,
    runtime_id: str | None,
    capacity: float,
    api_address: str,
    api_token: str | None,
    log_format: str,
    run_for: float | None,
    verbose: bool,
) -> None:
    """Run the function deployments over the sources until stopped: Ctrl-C stops with
    one line saying how far the sinks have every change and exits 130; SIGTERM exits 0."""
    from dbus_spark.reads import open_read_control
    from dbus_spark.spark.session import end_spark, workers_python

    os.environ[LOG_FORMAT_ENV] = log_format  # Spark's Python workers inherit it
    if executor_python:
        os.environ[EXECUTOR_PYTHON_ENV] = executor_python
    python = workers_python(os.environ)  # a bad --executor-python fails before anything starts
    open_read_control.switched_on(os.environ)  # and so does a bad DBUS_CARRY_OPEN_READS
    handler = logging.StreamHandler()
    handler.setFormatter(log_formatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    from dbus_spark.interfaces.api.runtime import RuntimeApi

    served = RuntimeApi.serve(api_address, api_token, runtime_id or "")
    signals = _StopSignals()  # Ctrl-C is held back until the query runs
    try:
        query, member, checkpoint_dir = _launch(click.get_current_context(), served, python)
        if served is not None:
            served.start(checkpoint_dir)
    except BaseException:
        if served is not None:  # bound before Spark started: a taken port fails first
            served.stop()
        signals.restore()
        raise
    signals.listen()
    failure: Exception | None = None
    try:
        stopping, ran_out = _run_until_stopped(query, signals, run_for, served, member)
        # Read while Spark runs: a checkpoint URI is read through its JVM.
        if signals.received == signal.SIGINT:
            failure = _interrupted(checkpoint_dir)
        elif signals.received is None:  # a service manager's SIGTERM is a stop, not a failure
            failure = _query_error(query) or _undelivered(checkpoint_dir, stopping, ran_out)
    finally:
        end_spark()
    if failure is not None:
        raise failure
    click.echo("runtime stopped")
    if signals.received == signal.SIGTERM:
        # The group's SIGTERM stopped Spark's JVM too: py4j's daemon threads may still
        # be logging its end while the interpreter finalizes, which aborts it (exit
        # -6). The query is stopped and nothing is left to close: leave, with success.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


class _StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM as requests for the runtime's quiet stop.

    Ctrl-C reaches the whole process group. It is held back while Spark starts:
    pyspark's own SIGINT handler would cancel jobs from inside the py4j call the
    CLI waits in, and py4j would log that call's tracebacks. Once the query runs
    (``listen``), either signal, held or new, only notes the stop (``received``);
    ``restore`` gives the process its handlers back.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: int | None = None
        self._saved = {signum: signal.getsignal(signum) for signum in self._SIGNALS}
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

    def listen(self) -> None:
        for signum in self._SIGNALS:
            signal.signal(signum, self._note)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def restore(self) -> None:
        for signum, handler in self._saved.items():
            if handler is not None:
                signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    def _note(self, signum: int, frame: object) -> None:
        self.received = signum


def _interrupted(checkpoint_dir: str) -> Interrupted:
    """The one line of a runtime Ctrl-C stopped: how far its sinks have every change."""
    from dbus_spark.state.checkpoint import delivered_positions

    again = f"the next start with checkpoint {checkpoint_dir}"
    try:
        batch, positions = delivered_positions(checkpoint_dir)
    except (OSError, DbusError):
        return Interrupted(f"runtime interrupted; {again} goes on from what it committed")
    if batch < 0:
        return Interrupted(f"runtime interrupted before it committed a micro-batch; {again} "
                           "begins where this one did")  # fmt: skip
    reads = ", ".join(f"{name} up to {position}" for name, position in sorted(positions.items()))
    return Interrupted(
        f"runtime interrupted after committing batch {batch}: the sinks have every change of "
        f"{reads or 'no source'}; {again} goes on from there"
    )


def _launch(
    ctx: click.Context, served: RuntimeApi | None, python: str
) -> tuple[StreamingQuery, ClusterMember | None, str]:
    """Start the query `runtime start` asked for, its Spark workers running ``python``:
    the query, the cluster member (None alone) and the checkpoint folder."""
    metrics = served.metrics if served else None
    from dbus_spark.spark.job import start as start_query
    from dbus_spark.spark.job import start_member

    options = ctx.params
    if options["cluster"] is not None:
        taken = (
            ("sources", "--source"), ("deployments", "--functions"),
            ("keep_helper_tables", "--keep-helper-tables"),
        )  # fmt: skip
        if any(options[name] is not None and options[name] != () for name, _ in taken):
            given = [
                given_as(ctx, name, flag)
                for name, flag in taken
                if options[name] is not None and options[name] != ()
            ]
            raise ConfigError(
                f"{given_as(ctx, 'cluster', '--cluster')} takes the sources and functions from "
                f"ZooKeeper: drop {' and '.join(given)} (register them with `dbus cluster "
                "source add` and `dbus fn deploy`)",
                setting="cluster",
            )
        member = _member(options)
        if served is not None:
            member.coordinator.api = served.server.url  # shown by `dbus cluster status`
            served.previewer.previous = member.previous_version
        query = start_member(
            member, master=options["master"], verbose=options["verbose"], metrics=metrics,
            python=python,
        )  # fmt: skip
        return query, member, member.checkpoint_dir
    if not options["deployments"]:
        raise ConfigError(
            "no function folder given: pass --functions PATH (a folder with dbus.toml), "
            "or --cluster NAME to run what is deployed there",
            setting="functions",
        )
    settings = (
        "sources", "deployments", "kafka", "elasticsearch", "checkpoint", "start", "trigger",
        "decode_shards", "open_read", "detach_after", "chunk_rows", "keep_helper_tables",
        "preview_window",
    )  # fmt: skip
    config = runtime_config(**{key: options[key] for key in settings})
    query = start_query(
        config, master=options["master"], verbose=options["verbose"], metrics=metrics,
        python=python,
    )  # fmt: skip
    return query, None, config.checkpoint_dir


def _run_until_stopped(
    query: StreamingQuery,
    signals: _StopSignals,
    run_for: float | None,
    served: RuntimeApi | None,
    member: ClusterMember | None,
) -> tuple[float, bool]:
    """Wait for the query to end, a stop signal or the end of ``run_for``, then stop the
    query, the API and the cluster membership; when the stop began, and whether
    ``run_for`` ended the run."""
    from dbus_spark.spark.job import stop as stop_query

    deadline = None if run_for is None else time.monotonic() + run_for
    ran_out = False
    try:
        while signals.received is None and query.isActive:
            if deadline is not None and time.monotonic() > deadline:
                ran_out = True
                break
            query.awaitTermination(1.0)
    except KeyboardInterrupt:
        signals.received = signal.SIGINT
    except Exception:
        # SIGTERM sent to the whole process group (a service manager's stop) also
        # reaches Spark's JVM and Python helpers, so the query dies under us with
        # their errors: that is the stop we were asked for, not a failure.
        if signals.received is None:
            raise
    finally:
        stopping = time.time()
        try:
            if query.isActive:
                stop_query(query)
        except Exception:
            if signals.received is None:
                raise
        finally:
            if served is not None:
                served.stop()
            if member is not None:
                member.stop()
            signals.restore()
    return stopping, ran_out


def _query_error(query: StreamingQuery) -> click.ClickException | None:
    """The one line of a run whose query failed."""
    error = query.exception()
    if error is None:
        return None
    return click.ClickException(f"the runtime stopped on an error: {str(error).splitlines()[0]}")


def _undelivered(
    checkpoint_dir: str, stopping: float, ran_out: bool = False
) -> UndeliveredError | None:
    """What fails a run that ends with a batch its sinks never took (one planned before
    the stop began; a batch the stop itself cut short is only replayed). ``ran_out``:
    the run ended because --for did, so the batch may only have been long, not failed."""
    from dbus_spark.state.checkpoint import pending_batch

    pending = pending_batch(checkpoint_dir)
    if pending is None or pending.planned_at >= stopping:
        return None
    reads = ", ".join(f"{name} up to {position}" for name, position in pending.positions.items())
    if ran_out:
        # The driver cannot tell a slow batch from a sink that keeps failing (both
        # just keep the batch in flight): say what is known, blame no sink.
        why = (
            f"before --for ended ({stopping - pending.planned_at:.0f}s after it was planned, "
            "still being written, so the stop cut it short)"
        )
        hint = "If a sink failed, the log above names it"
    else:
        why, hint = "before the runtime stopped", "See the log above for the sink that failed"
    return UndeliveredError(
        f"batch {pending.batch} ({reads or 'no source'}) was never acknowledged by the sinks "
        f"{why}; nothing is lost: the next start with the same checkpoint "
        f"({checkpoint_dir}) delivers it. {hint}",
        batch=pending.batch,
    )


def _member(options: Mapping[str, Any]) -> ClusterMember:
    """The cluster member ``runtime start --cluster`` runs, from the command's options."""
    import socket

    from dbus_fn.coordination import ZooKeeperSettings
    from dbus_spark.cluster.member import ClusterMember
    from dbus_spark.interfaces.settings import member_config
    from dbus_spark.state.checkpoint import last_config_path

    settings = ZooKeeperSettings.from_env(
        os.environ,
        hosts=options["zookeeper"],
        cluster=options["cluster"],
        session_timeout=options["zk_session_timeout"],
    )
    name = options["runtime_id"] or f"{socket.gethostname()}-{os.getpid()}"
    settings_of_base = (
        "kafka", "elasticsearch", "checkpoint", "trigger", "decode_shards", "chunk_rows",
        "detach_after", "preview_window",
    )  # fmt: skip
    base = member_config(**{key: options[key] for key in settings_of_base})
    check_runtime(
        kafka=base.kafka_bootstrap, elasticsearch=base.elasticsearch_url, master=options["master"]
    )
    return ClusterMember(
        settings, name, base, last_config_path(base.checkpoint_dir),
        capacity=options["capacity"], start=options["start"],
    )  # fmt: skip
