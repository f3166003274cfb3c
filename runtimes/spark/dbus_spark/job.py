"""The runtime's streaming query: binlog source → function stage → sinks.

``start()`` builds (or reuses) a Spark session, registers the two Python data
sources and starts one Structured Streaming query whose checkpoint holds the
committed binlog positions. Local mode (``local[*]``) is the default; pass a
``master`` URL to run on a standalone cluster.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import replace
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from dbus_fn.capture import BinlogReader
from dbus_fn.registry import load_deployment
from dbus_spark.cluster import ClusterMember, PositionCommitter
from dbus_spark.config import RuntimeConfig, default_decode_shards
from dbus_spark.source import BinlogDataSource
from dbus_spark.writer import FunctionSinkDataSource

log = logging.getLogger("dbus.runtime")


def spark_session(master: str = "local[*]", *, app_name: str = "dbus-runtime") -> SparkSession:
    """A Spark session whose Python workers run this interpreter."""
    # Workers must import the same dbus and the same functions as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark binds to loopback only, like every service here.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        # Keep Python workers alive between tasks: functions and clients load once.
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.memory", "1g")
        # The default checkpoint writer goes through Hadoop's FileContext, which
        # forks `chmod` for every file it writes when Hadoop's native library is
        # absent (it is, in pyspark's jars): ~130 ms of every micro-batch. The
        # FileSystem-based writer gives the same write-then-rename atomicity with
        # fewer forks, and the raw local file system skips the .crc side files
        # (and their forks) too: ~35 ms left (tests/bench/bench_runtime.py prints
        # the per-phase times).
        .config(
            "spark.sql.streaming.checkpointFileManagerClass",
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager",
        )
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(BinlogDataSource)
    session.dataSource.register(FunctionSinkDataSource)
    return session


def preflight(config: RuntimeConfig) -> RuntimeConfig:
    """Check every source and deployment before Spark starts; pin the start positions.

    An unreachable source, missing privileges, a server without a ROW binlog or a
    deployment that does not load each raise one ``DbusError`` naming the fix,
    instead of a JVM stack trace from inside the streaming query. ``latest`` and
    ``earliest`` become the positions they mean now, so a change committed after
    ``start()`` returns is never taken for history (a checkpoint, when the query
    has one, still wins over them).
    """
    for deployment in config.deployments:
        load_deployment(deployment)
    bindings = []
    for binding in config.sources:
        reader = BinlogReader(binding.spec, server_id=binding.server_id)
        try:
            bindings.append(replace(binding, start=reader.resolve_start(binding.start)))
        finally:
            reader.close()
    return replace(config, sources=tuple(bindings))


def start(
    config: RuntimeConfig,
    *,
    spark: SparkSession | None = None,
    master: str = "local[*]",
    config_path: Path | None = None,
) -> StreamingQuery:
    """Start the runtime's query; returns at once, the query runs in the background.

    Sources and deployments are checked before any Spark session starts.
    """
    config = preflight(config)
    spark = spark or spark_session(master)
    path = config.save(config_path or default_config_path(config))
    return _start_query(spark, config, path)


def start_member(
    member: ClusterMember, *, spark: SparkSession | None = None, master: str = "local[*]"
) -> StreamingQuery:
    """Start a cluster member's query: ZooKeeper gives the sources and functions."""
    config = member.start()
    spark = spark or spark_session(master)
    spark.streams.addListener(PositionCommitter(member))
    return _start_query(spark, config, member.config_path)


def default_config_path(config: RuntimeConfig) -> Path:
    checkpoint = Path(config.checkpoint_dir)
    return checkpoint.parent / f"{checkpoint.name}.config.json"


def _start_query(spark: SparkSession, config: RuntimeConfig, path: Path) -> StreamingQuery:
    shards = config.decode_shards or default_decode_shards(spark.sparkContext.defaultParallelism)
    reader = (
        spark.readStream.format("dbus_binlog")
        .option("config", str(path))
        .option("shards", str(shards))
        .load()
    )
    writer = (
        reader.writeStream.format("dbus_functions")
        .option("config", str(path))
        .option("checkpointLocation", config.checkpoint_dir)
        .queryName("dbus")
    )
    if config.trigger_seconds > 0:
        writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    query = writer.start()
    log.info(
        "runtime started: sources=%s deployments=%s checkpoint=%s",
        [b.spec.name for b in config.sources],
        list(config.deployments),
        config.checkpoint_dir,
    )
    return query
