"""Spark's driver-side planner processes, ended once a query has started.

Spark plans a Python data source in Python processes of its own, one pool per
planner, each a daemon and the workers forked from it. Three of them (looking
the source up, creating it, planning its read) serve a streaming query only
while it starts (creating it once more for the first commit), yet Spark keeps
their daemons for the session's life and each idle worker for a minute: about
300 MiB, a quarter of the runtime's memory. The writer's planner is left alone:
Spark asks it again in later micro-batches.

``PlannerSweeper`` stops those pools while a query starts and once it has:
- never while a ``starting()`` block runs (the source and sink are looked up);
- the lookup and read planners once the writer's planner, the last one before
  the first batch's tasks (a batch with data), was used and handed back since
  the block began: the first batch of a big transaction runs without them;
- all three once the first batch committed (its sink runner started) and the
  source's creator, which that commit uses, was handed back;
- and only a pool with an idle worker and none busy; a query is forgotten only
  once its pools are stopped, so one busy at a sweep is stopped at a later one;
- once every query is forgotten, any of the three every ``LATE_SECONDS`` while no
  query starts: Spark may ask one again after the sweep that forgot the query
  (the creator, just after the first commit), and nothing else of the runtime
  asks them.
A pool stopped is started again by Spark when next needed. The pools of the
query's own tasks and of its streaming source and sink runners are left alone:
every micro-batch uses them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import psutil
from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.sql.streaming import StreamingQuery

from dbus_spark.spark.session import java_class

log = logging.getLogger("dbus.runtime")

CREATOR = "pyspark.sql.worker.create_data_source"
EARLY_MODULES = frozenset(
    {"pyspark.sql.worker.lookup_data_sources", "pyspark.sql.worker.plan_data_source_read"}
)
PLANNER_MODULES = EARLY_MODULES | {CREATOR}
WRITER_PLANNER = "pyspark.sql.worker.write_into_data_source"
SINK_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"
SWEEP_SECONDS = 0.2
LATE_SECONDS = 2.0

_LAST_ACTIVITY = "org$apache$spark$api$python$PythonWorkerFactory$$lastActivityNs"


def _private(sc: SparkContext, owner: Any, class_name: str, name: str) -> Any:
    """A private field of a JVM object, by reflection: py4j cannot call ``SparkEnv``
    itself, as listing its methods needs classes pyspark does not ship."""
    field = java_class(sc, "java.lang.Class").forName(class_name).getDeclaredField(name)
    field.setAccessible(True)
    return field.get(owner)


def _pools(sc: SparkContext) -> dict[str, Any]:
    """The driver's Python worker pools (``SparkEnv.pythonWorkers``), by worker module."""
    assert sc._jsc is not None
    context = java_class(sc, "java.lang.Class").forName("org.apache.spark.SparkContext")
    env = context.getMethod("env", None).invoke(sc._jsc.sc(), None)
    pairs = _private(sc, env, "org.apache.spark.SparkEnv", "pythonWorkers").clone().iterator()
    pools = {}
    while pairs.hasNext():
        pair = pairs.next()
        pools[pair._1().workerModule()] = pair._2()
    return pools


def _now_ns(sc: SparkContext) -> int:
    """The JVM's ``System.nanoTime()``, the clock of a pool's last activity."""
    return int(java_class(sc, "java.lang.System").nanoTime())


def _used_since(pools: dict[str, Any], module: str, since_ns: int, *, handed_back: bool) -> bool:
    """Whether a pool was used since ``since_ns`` (and, ``handed_back``, is idle again)."""
    pool = pools.get(module)
    if pool is None or (handed_back and pool.idleWorkers().isEmpty()):
        return False
    return int(getattr(pool, _LAST_ACTIVITY)()) >= since_ns


def _state(sc: SparkContext, pool: Any) -> str:
    """``"gone"`` (no daemon runs), ``"idle"`` (an idle worker and none busy) or
    ``"busy"`` (a worker at work, or a daemon with no worker yet, about to give one
    out)."""
    daemon = _private(sc, pool, "org.apache.spark.api.python.PythonWorkerFactory", "daemon")
    if daemon is None:
        return "gone"
    try:
        workers = psutil.Process(int(daemon.pid())).children()
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "busy"
    idle = int(pool.idleWorkers().size())
    return "idle" if idle > 0 and len(workers) <= idle else "busy"


def sweep(sc: SparkContext, pools: dict[str, Any], modules: frozenset[str]) -> bool:
    """Stop the ``pools`` of ``modules`` none of whose workers is busy; whether none of
    them runs now (a busy one is left for a later sweep)."""
    done = True
    for module, pool in pools.items():
        if module not in modules:
            continue
        state = _state(sc, pool)
        if state == "idle":
            pool.stop()
        elif state == "busy":
            done = False
    return done


class PlannerSweeper(threading.Thread):
    """Sweeps a Spark context's planner pools as its queries start, until it stops."""

    _running: ClassVar[dict[int, PlannerSweeper]] = {}
    _lock = threading.Lock()

    def __init__(
        self, sc: SparkContext, every: float = SWEEP_SECONDS, late: float = LATE_SECONDS
    ) -> None:
        super().__init__(name="dbus-planner-sweeper", daemon=True)
        self.sc = sc
        self.every = every
        self.late = late
        self._late_at = 0.0
        self._starting = 0
        self._pending: list[tuple[StreamingQuery, int]] = []
        self._guard = threading.Lock()

    @classmethod
    def ensure(cls, sc: SparkContext) -> PlannerSweeper:
        """The context's sweeper, started on first use."""
        with cls._lock:
            sweeper = cls._running.get(id(sc))
            if sweeper is None or not sweeper.is_alive():
                sweeper = cls._running[id(sc)] = cls(sc)
                sweeper.start()
            return sweeper

    @contextmanager
    def starting(self) -> Iterator[Callable[[StreamingQuery], None]]:
        """Hold sweeps back while a query starts: call what it yields with the query."""
        with self._guard:  # waits for a sweep under way
            self._starting += 1
            since = _now_ns(self.sc)
        try:
            yield lambda query: self._pending.append((query, since))
        finally:
            with self._guard:
                self._starting -= 1

    def _due(self) -> tuple[frozenset[str], dict[str, Any], list[tuple[StreamingQuery, int]]]:
        """Which pools a sweep may stop now (see the module's text), the pools, and the
        queries still to wait for once those are stopped (the others committed a
        batch, or ended)."""
        if self._starting:
            return frozenset(), {}, self._pending
        if not self._pending:
            # Every query forgotten: a late sweep now and then, for a planner asked again.
            now = time.monotonic()
            if now < self._late_at:
                return frozenset(), {}, []
            self._late_at = now + self.late
            return PLANNER_MODULES, _pools(self.sc), []
        pools = _pools(self.sc)
        due, waiting = PLANNER_MODULES, []
        for query, since in self._pending:
            if not query.isActive:
                continue
            if not _used_since(pools, WRITER_PLANNER, since, handed_back=True):
                return frozenset(), pools, self._pending  # its first batch is being planned
            if not (
                _used_since(pools, SINK_RUNNER, since, handed_back=False)
                and _used_since(pools, CREATOR, since, handed_back=True)
            ):
                waiting.append((query, since))  # its first commit is still to come
                due = EARLY_MODULES
        return due, pools, waiting

    def run(self) -> None:
        try:
            while SparkContext._active_spark_context is self.sc:
                with self._guard:  # no query starts while a sweep runs
                    due, pools, waiting = self._due()
                    # A query is forgotten only once its pools are stopped: one busy at
                    # this sweep (the creator, just asked again) is stopped at a later one.
                    if due and sweep(self.sc, pools, due):
                        self._pending = waiting
                time.sleep(self.every)
        except (Py4JError, OSError, AttributeError, AssertionError) as exc:
            # The context stopped between the check and the sweep.
            log.debug("planner sweeper ended: %s", exc)
        finally:
            with self._lock:
                if self._running.get(id(self.sc)) is self:
                    del self._running[id(self.sc)]
