"""`dbus runtime`: run the shared Spark runtime."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

import click

from dbus_fn.errors import ConfigError
from dbus_spark.settings import runtime_config


@click.group()
def runtime() -> None:
    """Run the shared Spark Structured Streaming runtime."""


@runtime.command("start")
@click.option(
    "--source",
    "sources",
    multiple=True,
    envvar="DBUS_SOURCES",
    help="A binlog source as NAME=DSN (mysql://user:password@host:port); repeatable. "
    "Env: DBUS_SOURCES (space-separated). Default: the local MariaDB of `dbus services up`.",
)
@click.option(
    "--functions",
    "deployments",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    envvar="DBUS_FUNCTIONS",
    help="A function folder (with dbus.toml) to run; repeatable. Env: DBUS_FUNCTIONS.",
)
@click.option("--kafka", envvar="DBUS_KAFKA", help="Kafka bootstrap servers. Env: DBUS_KAFKA.")
@click.option(
    "--elasticsearch",
    envvar="DBUS_ELASTICSEARCH",
    help="Elasticsearch URL. Env: DBUS_ELASTICSEARCH.",
)
@click.option(
    "--checkpoint",
    envvar="DBUS_CHECKPOINT",
    type=click.Path(file_okay=False),
    help="Checkpoint directory (committed positions). Env: DBUS_CHECKPOINT. "
    "Default: .dbus/runtime/checkpoint.",
)
@click.option(
    "--from",
    "start",
    type=click.Choice(["earliest", "latest"]),
    default="latest",
    show_default=True,
    envvar="DBUS_FROM",
    help="Where a new source starts; a checkpoint, when there is one, wins. Env: DBUS_FROM.",
)
@click.option(
    "--trigger",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds between micro-batches (0: as soon as the last one ends).",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    envvar="DBUS_SPARK_MASTER",
    help="Spark master URL. Env: DBUS_SPARK_MASTER.",
)
@click.option(
    "--for", "run_for", type=float, default=None, help="Stop after this many seconds."
)
def start(
    sources: tuple[str, ...],
    deployments: tuple[str, ...],
    kafka: str | None,
    elasticsearch: str | None,
    checkpoint: str | None,
    start: str,
    trigger: float,
    master: str,
    run_for: float | None,
) -> None:
    """Run the function deployments over the sources until stopped (Ctrl-C)."""
    from dbus_spark.job import start as start_query

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not deployments:
        raise ConfigError(
            "no function folder given: pass --functions PATH (a folder with dbus.toml)",
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
    )
    query = start_query(config, master=master)
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
        try:
            if query.isActive:
                query.stop()
        except Exception:
            if not stop:
                raise
    error = None if stop else query.exception()
    if error is not None:
        raise click.ClickException(f"the runtime stopped on an error: {str(error).splitlines()[0]}")
    click.echo(f"runtime stopped; positions are in {Path(config.checkpoint_dir)}")
