"""Spark's planner processes end once a query has started (``dbus_spark.spark.planners``).

They hold about 400 MiB, a third of the runtime's memory, and a running query
never uses them again. The query goes on without them, and the next query in the
same session starts them again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psutil
import pytest
from e2e_support import Scratch
from support import kafka_count, relay_table, wait_for

from dbus_spark.spark import planners
from dbus_spark.spark.job import start, stop
from dbus_spark.spark.planners import CREATOR, PLANNER_MODULES, PlannerSweeper
from dbus_spark.state.checkpoint import last_config_path

pytestmark = pytest.mark.e2e


def _planners(spark: Any) -> list[str]:
    """The planner modules some process of this test's Spark session still runs: the
    Python processes under the session's JVM, not every process under this one (a
    worker of the suite may have other children)."""
    jvm = psutil.Process(int(spark.sparkContext._jvm.ProcessHandle.current().pid()))
    running = []
    for process in jvm.children(recursive=True):
        try:
            command = process.cmdline()
        except psutil.Error:
            continue
        running += [module for module in PLANNER_MODULES if module in command]
    return running


def _wait_for_planners_to_end(spark: Any, what: str) -> None:
    try:
        wait_for(lambda: not _planners(spark), 30, what)
    except AssertionError as late:
        raise AssertionError(f"{late}; still running: {_planners(spark)}") from None


def _relay_fifty_rows(query: Any, scratch: Scratch) -> None:
    """The query's first progress, then 50 rows inserted and relayed to the topic."""
    wait_for(lambda: query.exception() or query.lastProgress, 120, "the first progress")
    with scratch.fresh_database.connect().cursor() as cur:
        for key in range(1, 51):
            cur.execute("INSERT INTO t VALUES (%s)", (key,))
    bootstrap = scratch.services.kafka.bootstrap_servers
    assert kafka_count(bootstrap, scratch.kafka_topic, expected=50) == 50


def test_planner_processes_end_after_a_start_and_come_back_for_the_next(
    spark: Any, scratch: Scratch
) -> None:
    services, database, topic, _index, tmp_path, function_folder = scratch
    folder, _table = relay_table(database, function_folder, f"kafka://{topic}")
    config = scratch.runtime_config(folder)
    bootstrap = services.kafka.bootstrap_servers
    written = 0
    # A later run bootstraps the table into the topic: each row once more.
    shown = 0

    def write(rows: int) -> int:
        nonlocal written
        with database.connect().cursor() as cur:
            for key in range(written + 1, written + rows + 1):
                cur.execute("INSERT INTO t VALUES (%s)", (key,))
        written += rows
        return written

    for run in range(2):
        run_config = replace(config, checkpoint_dir=str(tmp_path / f"checkpoint-{run}"))
        query = start(run_config, spark=spark)
        try:
            wait_for(lambda q=query: q.exception() or q.lastProgress, 120, "the first progress")
            assert query.exception() is None
            # The first batch with data plans the writer; the first commit ends the start.
            assert kafka_count(bootstrap, topic, expected=shown + write(50)) == shown + written
            _wait_for_planners_to_end(spark, "the planner processes to end")
            # The query goes on without them.
            assert kafka_count(bootstrap, topic, expected=shown + write(50)) == shown + written
            assert query.isActive and query.exception() is None
            assert not _planners(spark)
        finally:
            # As the runtime stops: its carried read ends with it. Spark's own stop left
            # it reading for ALIVE_SECONDS, so it sent the next run's first rows too.
            stop(query, spark)
        shown += written
    assert PlannerSweeper.ensure(spark.sparkContext).is_alive()


def test_a_planner_busy_at_the_sweep_after_the_first_commit_is_stopped_at_a_later_one(
    spark: Any, scratch: Scratch, monkeypatch: pytest.MonkeyPatch
) -> None:
    _services, database, topic, _index, tmp_path, function_folder = scratch
    folder, _table = relay_table(database, function_folder, f"kafka://{topic}")
    config = replace(scratch.runtime_config(folder), checkpoint_dir=str(tmp_path / "cp"))
    sweep = planners.sweep
    busy: list[frozenset[str]] = []

    def creator_busy_once(sc: Any, pools: dict[str, Any], modules: frozenset[str]) -> bool:
        # Spark asked the creator again just as the query committed: busy at that sweep
        # (a moment no service gives on cue).
        if CREATOR in modules and not busy:
            busy.append(modules)
            sweep(sc, pools, modules - {CREATOR})
            return False
        return sweep(sc, pools, modules)

    monkeypatch.setattr(planners, "sweep", creator_busy_once)
    query = start(config, spark=spark)
    try:
        _relay_fifty_rows(query, scratch)
        _wait_for_planners_to_end(spark, "the planner processes to end")
        assert busy, "the sweep after the first commit found the creator busy"
    finally:
        stop(query, spark)


def test_a_planner_spark_asks_again_after_the_query_was_forgotten_is_stopped_later(
    spark: Any, scratch: Scratch
) -> None:
    _services, database, topic, _index, tmp_path, function_folder = scratch
    folder, _table = relay_table(database, function_folder, f"kafka://{topic}")
    config = replace(scratch.runtime_config(folder), checkpoint_dir=str(tmp_path / "cp"))
    query = start(config, spark=spark)
    try:
        _relay_fifty_rows(query, scratch)
        _wait_for_planners_to_end(spark, "the planner processes to end")
        # Spark asks the creator once more after the sweep that forgot the query (as
        # it may just after a first commit): here by resolving the source outside a start.
        saved = str(last_config_path(config.checkpoint_dir))
        spark.readStream.format("dbus_binlog").option("config", saved).load()
        assert CREATOR in _planners(spark), "resolving the source started its creator"
        _wait_for_planners_to_end(spark, "the creator asked late to end")
        assert query.isActive and query.exception() is None
    finally:
        stop(query, spark)
