"""The runtime's streaming query: binlog source → function stage → sinks.

``start()`` builds (or reuses) a Spark session, registers the two Python data
sources and starts one Structured Streaming query whose checkpoint holds the
committed binlog positions. Local mode (``local[*]``) is the default; pass a
``master`` URL to run on a standalone cluster.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from dbus_fn.capture import BinlogReader
from dbus_fn.errors import ConfigError
from dbus_fn.registry import with_packages
from dbus_spark.cluster.member import ClusterMember, PositionCommitter
from dbus_spark.config import logs
from dbus_spark.config.routes import routes_of
from dbus_spark.config.runtime import RuntimeConfig, default_decode_shards
from dbus_spark.observe import BatchListener, RuntimeMetrics
from dbus_spark.planning.kafka_planner import KafkaPlanner, start_offsets
from dbus_spark.reads import open_read_control
from dbus_spark.spark.planners import PlannerSweeper
from dbus_spark.spark.preflight import (
    check_addresses,
    check_kafka_source,
    check_master,
    check_reachable,
    deployment_sink_problems,
)
from dbus_spark.spark.query_listener import add_listener
from dbus_spark.spark.session import spark_session
from dbus_spark.stage.shipment import PackageShipper
from dbus_spark.state.checkpoint import (
    ProgressFolder,
    SparkLog,
    checkpoint_incarnation,
    committed_positions,
    is_uri,
    last_config_path,
    progress_path,
    reports_dir,
)
from dbus_spark.state.history import HistoryStore

log = logging.getLogger("dbus.runtime")


def preflight(config: RuntimeConfig, spark: SparkSession | None = None) -> RuntimeConfig:
    """Check every source and deployment before Spark starts; pin the start positions.

    An unreachable source, missing privileges, a server without a ROW binlog or a
    deployment that does not load each raise one ``DbusError`` naming the fix,
    instead of a JVM stack trace from inside the streaming query. ``latest`` and
    ``earliest`` become the positions they mean now, so a change committed after
    ``start()`` returns is never taken for history (a checkpoint, when the query
    has one, still wins over them). ``spark``: the session that reads a checkpoint
    given as a URI.
    """
    _check_source_names(config, spark)
    # Each with its own packages, resolved here (a set that does not resolve or import
    # is one line now, not a task failure later).
    manifests = [with_packages(Path(d.path), name=d.name).manifest for d in config.deployments]
    for problem in deployment_sink_problems(routes_of(manifests)):
        log.warning("%s", problem)
    history = HistoryStore(progress_path(config.checkpoint_dir))
    first_run = not SparkLog(config.checkpoint_dir, spark).started()
    bindings = []
    for binding in config.sources:
        reader = BinlogReader(binding.spec, replica_id=binding.replica_id)
        try:
            bindings.append(replace(binding, start=reader.resolve_start(binding.start)))
            # The tables a new deployment's history reads are those there now: a
            # table created after start() returns is all in the binlog. A first run
            # told where in the binlog to start takes its history from there.
            history.consider(
                reader, manifests, from_binlog=first_run and binding.start != "latest"
            )
        finally:
            reader.close()
    kafka_sources = []
    for source in config.kafka_sources:
        check_kafka_source(source.name, source.bootstrap)
        planner = KafkaPlanner(source)
        try:
            planner.check_topics()
            kafka_sources.append(replace(source, start=start_offsets(source, planner)))
        finally:
            planner.close()
    return replace(config, sources=tuple(bindings), kafka_sources=tuple(kafka_sources))


def _check_source_names(config: RuntimeConfig, spark: SparkSession | None) -> None:
    """Refuse a run whose sources the checkpoint does not know while it holds the
    positions of sources this run does not read: a source renamed (``ux`` run as
    ``other``) would start over, reading its history again, and orphan the old name's
    position. Adding a source, or leaving one out, is not refused."""
    spark_log = SparkLog(config.checkpoint_dir, spark)
    newest = spark_log.newest("offsets")
    if newest < 0:
        return
    known = set(spark_log.offsets(newest)[1])
    names = [binding.spec.name for binding in config.sources]
    new = [name for name in names if name not in known]
    gone = sorted(known - set(names))
    if new and gone:
        raise ConfigError(
            f"checkpoint {config.checkpoint_dir} holds the position of source "
            f"{', '.join(gone)}, which this run does not read, and none of "
            f"{', '.join(new)}: a source renamed would read its history again and "
            f"orphan that position; name it {gone[0]} again (--source {gone[0]}=DSN), "
            f"or give {new[0]} a --checkpoint of its own",
            setting="checkpoint",
        )


def start(
    config: RuntimeConfig,
    *,
    spark: SparkSession | None = None,
    master: str = "local[*]",
    config_path: Path | None = None,
    verbose: bool | None = None,
    metrics: RuntimeMetrics | None = None,
    python: str | None = None,
) -> StreamingQuery:
    """Start the runtime's query; returns at once, the query runs in the background.

    Sources, deployments, sinks and the master are checked before any Spark
    session starts (see ``preflight``). ``verbose`` and ``python`` are the new
    session's (see ``spark_session``). ``metrics``, when given, counts every batch
    of the query.
    """
    phases = StartPhases()
    master = master if spark is None else "local[*]"  # a given session has its master
    check_addresses(kafka=config.kafka_bootstrap, elasticsearch=config.elasticsearch_url,
                    master=master)  # fmt: skip
    if is_uri(config.checkpoint_dir) and spark is None:
        # Its Spark log is read through the JVM, so the session starts before the
        # other checks: a master that does not answer is said first, not waited on.
        check_master(master)
        spark = spark_session(master, verbose=verbose, python=python)
    config = preflight(config, spark)
    check_reachable(kafka=config.kafka_bootstrap, elasticsearch=config.elasticsearch_url,
                    master=master)  # fmt: skip
    phases.done("checks")
    spark = spark or spark_session(master, verbose=verbose, python=python)
    phases.done("Spark")
    # Exactly-once lanes are this making of the checkpoint's (``RuntimeConfig.incarnation``).
    config = replace(config, incarnation=checkpoint_incarnation(config.checkpoint_dir, spark))
    path = config.save(config_path or last_config_path(config.checkpoint_dir))
    return _start_query(spark, config, path, metrics, phases)


def start_member(
    member: ClusterMember,
    *,
    spark: SparkSession | None = None,
    master: str = "local[*]",
    verbose: bool | None = None,
    metrics: RuntimeMetrics | None = None,
    python: str | None = None,
) -> StreamingQuery:
    """Start a cluster member's query: ZooKeeper gives the sources and functions."""
    phases = StartPhases()
    config = member.start()
    phases.done("cluster")
    spark = spark or spark_session(master, verbose=verbose, python=python)
    phases.done("Spark")
    add_listener(spark, PositionCommitter(member))
    shipper = PackageShipper(spark.sparkContext)
    # Deployments ZooKeeper sends while it runs bring their packages as they come.
    member.ship_with(shipper.ship)
    return _start_query(spark, config, member.config_path, metrics, phases, shipper)


_read_by: dict[str, tuple[str, list[str], str]] = {}
"""Per running query (its id), its checkpoint, sources and run (the ``run`` option
its reader was given): their reads end with it."""


def stop(
    query: StreamingQuery, spark: SparkSession | None = None, *, timeout: float = 5.0
) -> None:
    """Stop the query between micro-batches, waiting up to ``timeout`` for one in flight.

    A batch the stop interrupts is aborted and replayed from its start positions
    next time; Spark reports that abort as errors. Quiet, those are silenced for
    the stop: they are the stop that was asked for. ``query.exception()`` still
    tells a query that failed. ``spark``: the query's session (default: the active one).
    """
    deadline = time.monotonic() + timeout
    checkpoint, sources, run = _read_by.pop(str(query.id), ("", [], ""))
    # A carried read's batch ends as soon as it may.
    open_read_control.hurry_all(checkpoint, sources)
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.05)
    spark = spark or SparkSession.getActiveSession()
    try:
        if spark is None or logs.verbose():
            query.stop()
            return
        spark.sparkContext.setLogLevel("OFF")
        try:
            query.stop()
        finally:
            spark.sparkContext.setLogLevel(logs.spark_log_level())
    finally:
        # Nothing goes on delivering for a query that stopped.
        open_read_control.end_all(checkpoint, sources, run or None)


class StartPhases:
    """How long each step of a runtime's start took, for its "runtime started" line."""

    def __init__(self) -> None:
        self._began = self._last = time.monotonic()
        self._took: list[tuple[str, float]] = []

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self._took.append((phase, now - self._last))
        self._last = now

    def __str__(self) -> str:
        split = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in self._took)
        return f"{time.monotonic() - self._began:.1f} s ({split})"


def _start_query(
    spark: SparkSession,
    config: RuntimeConfig,
    path: Path,
    metrics: RuntimeMetrics | None,
    phases: StartPhases,
    shipper: PackageShipper | None = None,
) -> StreamingQuery:
    if not SparkLog(config.checkpoint_dir, spark).started():
        # A new checkpoint starts where it is told, every deployment with the stream.
        ProgressFolder.of(config.checkpoint_dir).forget("reached", "deployments")
    cores = spark.sparkContext.defaultParallelism
    shards = config.decode_shards or default_decode_shards(cores)
    options = {"config": str(path)}
    # This start of the query: its tasks that outlive its stop start no read.
    run = uuid.uuid4().hex
    if metrics is not None:
        reports = reports_dir(config.checkpoint_dir)
        # Workers on this host publish there; on another host they find no such folder
        # and publish nothing (``dbus_spark.state.live_counters``).
        reports.mkdir(parents=True, exist_ok=True)
        # Left by the last run: batches it never saw progress of, its workers' counts.
        for stale in [*reports.glob("*.json"), *reports.glob("*/*.json")]:
            stale.unlink(missing_ok=True)
        metrics.attach(path, committed_positions(config.checkpoint_dir, spark), reports)
        options["reports"] = str(reports)  # the workers report there
    # The executors' own copy of each deployment's packages.
    (shipper or PackageShipper(spark.sparkContext)).ship([d.path for d in config.deployments])
    # The query's start uses Spark's planner processes; they are stopped after it.
    with PlannerSweeper.ensure(spark.sparkContext).starting() as started:
        reader = (
            spark.readStream.format("dbus_binlog")
            .options(**options)
            .option("run", run)
            .option("shards", str(shards))
            .option("chunk_tasks", str(max(1, cores)))
            .load()
        )
        writer = (
            reader.writeStream.format("dbus_functions")
            .options(**options)
            .option("checkpointLocation", config.checkpoint_dir)
            .queryName("dbus")
        )
        if config.trigger_seconds > 0:
            writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
        query = writer.start()
        started(query)
    phases.done("query")
    _read_by[str(query.id)] = (config.checkpoint_dir, [b.spec.name for b in config.sources], run)
    if metrics is not None:
        metrics.listener = BatchListener(metrics, reports, str(query.id))
        add_listener(spark, metrics.listener)
    log.info(
        "runtime started: sources=%s deployments=%s checkpoint=%s in %s",
        [b.spec.name for b in config.sources] + [k.name for k in config.kafka_sources],
        [d.name for d in config.deployments],
        config.checkpoint_dir,
        phases,
    )
    return query
