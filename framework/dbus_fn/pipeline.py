"""The semantics of one deployment, in pure Python: filter → projection → route.

For each row change:

1. every filter that matches the table and operation must return ``True``;
2. matching projections apply in order, each seeing the previous one's result
   as the event's row, and the last result is the payload delivered (no
   projection: the row as captured);
3. every matching route names destinations (``kafka://topic``, ``es://index``,
   a list of them) or ``None``; their union, or else the deployment's default
   route, is where the payload goes. Filters and routes see the event as
   captured, so a route may use a column a projection removed.

A function that raises, returns the wrong type, tries to change its input or
runs past its time budget sends the event to the deployment's dead-letter
destination: the whole event, not a part of it, and nothing of it is delivered.
The next event and every other deployment go on. These user errors are counted
apart from failures of the framework itself.

Time budget: ``timeout`` in ``dbus.toml`` bounds each call; ``_budget`` enforces it.

Speed. The chain of functions for each (database, table, operation) is resolved
once and cached; functions are called directly, not through pluggy's hook caller,
and per-function counters are derived from per-chain counts at ``stats()`` time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from time import perf_counter
from typing import Any

from dbus_fn._budget import Budget, Overrun, disarm, start_watchdog
from dbus_fn._chains import Chain, Step, TableChains
from dbus_fn._failures import first_line, missing_image_hint, short, user_traceback
from dbus_fn.context import Counters, FunctionContext, function_logger
from dbus_fn.decorators import FunctionInfo
from dbus_fn.errors import (
    DestinationError,
    FunctionError,
    FunctionTimeoutError,
    ReadOnlyRowError,
)
from dbus_fn.events import Operation, Row, RowChange
from dbus_fn.manifest import Destination
from dbus_fn.outcomes import (
    RECENT_ERRORS,
    DeadLetter,
    Delivery,
    FunctionStats,
    LastError,
    Latency,
    Outcome,
    PipelineStats,
)
from dbus_fn.registry import LoadedDeployment

__all__ = [
    "DeadLetter",
    "Delivery",
    "Destination",
    "FunctionStats",
    "Outcome",
    "Pipeline",
    "PipelineStats",
]

log = logging.getLogger(__name__)

_INSERT = Operation.INSERT
_UPDATE = Operation.UPDATE
_DELETE = Operation.DELETE
_DESTINATION_CACHE_LIMIT = 10_000


class _Failed:
    """What ``Pipeline._call`` returns for a call that raised: the dead-letter outcome."""

    __slots__ = ("outcome",)

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class Pipeline:
    """Runs one deployment's functions over row changes.

    A pipeline is meant for one thread at a time (the runtime makes one per
    worker); ``process`` never raises for a function's failure.
    """

    def __init__(self, deployment: LoadedDeployment) -> None:
        self.deployment = deployment
        manifest = deployment.manifest
        self._manifest = manifest
        self._default: list[Destination] | None = (
            [manifest.default_route] if manifest.default_route is not None else None
        )
        self._dead_route = manifest.dead_letter_route
        self._sinks = frozenset(manifest.sinks)
        self._tables: dict[tuple[str, str], TableChains] = {}
        self._chains: list[Chain] = []
        self._destinations: dict[str, Destination] = {}
        self._counters = {info.name: Counters() for info in deployment.functions}
        self._latency = {info.name: Latency() for info in deployment.functions}
        self._errors: dict[str, deque[LastError]] = {
            info.name: deque(maxlen=RECENT_ERRORS) for info in deployment.functions
        }
        self._loggers = {info.name: function_logger(info.name) for info in deployment.functions}
        self._ignored = 0
        self._user_errors = 0
        self._framework_errors = 0
        self._budget: Budget | None = None
        self._watchdog: threading.Thread | None = None
        if manifest.timeout:
            self._budget = Budget(manifest.timeout)

    # -- the hot path ---------------------------------------------------------

    def process(self, change: RowChange) -> Outcome:
        """Run the deployment's functions over one row change."""
        imports = self.deployment.imports
        if imports is None:
            return self._process(change)
        with imports:  # its own packages (``dbus_fn.dependencies``)
            return self._process(change)

    def _process(self, change: RowChange) -> Outcome:
        key = (change.database, change.table)
        chains = self._tables.get(key)
        if chains is None:
            chains = self._resolve(change.database, change.table)
        op = change.op
        chain = (
            chains.insert
            if op is _INSERT
            else chains.update
            if op is _UPDATE
            else chains.delete
            if op is _DELETE
            else chains.snapshot
        )
        if chain is None:
            self._ignored += 1
            return Outcome([], [], True)
        chain.entered += 1
        budget = self._budget
        if budget is None:
            try:
                return self._run(chain, change, None)
            except Exception as exc:
                return self._framework_failure(change, exc)
        if self._watchdog is None:
            self._start_watchdog(budget)
        budget.thread = threading.get_ident()
        try:
            outcome = self._run(chain, change, budget)
        except Overrun:
            # Landed after the function returned, in our own code: still its overrun.
            outcome = self._late_overrun(chain, change, budget)
        except Exception as exc:
            return self._framework_failure(change, exc)
        if budget.fired:
            # The function swallowed the interrupt and returned anyway.
            outcome = self._late_overrun(chain, change, budget)
        return outcome

    def _call(
        self, chain: Chain, change: RowChange, step: Step, event: RowChange, budget: Budget | None
    ) -> Any:
        """Call one function on ``event`` under the budget; a failure comes back ``_Failed``."""
        if budget is not None:
            budget.calls += 1
            budget.step = step
        started = perf_counter()
        try:
            result = (
                step.function(event, self._context(step.info, event))
                if step.takes_context
                else step.function(event)
            )
        except BaseException as exc:
            step.latency.observe(perf_counter() - started)
            return _Failed(self._raised(chain, change, step, exc, budget))
        step.latency.observe(perf_counter() - started)
        if budget is not None:
            budget.step = None
        return result

    def _run(self, chain: Chain, change: RowChange, budget: Budget | None) -> Outcome:
        call = self._call
        for step in chain.filters:
            kept = call(chain, change, step, change, budget)
            if kept is not True:
                if kept is False:
                    chain.filtered[step.slot] += 1
                    return Outcome([], [], True)
                if type(kept) is _Failed:
                    return kept.outcome
                return self._wrong(
                    chain,
                    change,
                    step,
                    kept,
                    "bool (True keeps the event)",
                    "return True to keep the event, False to drop it",
                )

        payload: Mapping[str, Any] | None = None
        current = change
        for step in chain.projections:
            if payload is not None:
                current = _projected(current, payload)
            result = call(chain, change, step, current, budget)
            if type(result) is not dict and not isinstance(result, Mapping):
                if type(result) is _Failed:
                    return result.outcome
                return self._wrong(
                    chain,
                    change,
                    step,
                    result,
                    "a dict of column values",
                    "build and return a new dict, e.g. {**event.row, 'x': 1}",
                )
            if not all(isinstance(column, str) for column in result):
                return self._wrong(
                    chain,
                    change,
                    step,
                    result,
                    "a dict whose keys are column names (str)",
                    "name each column with a string, e.g. {'id': event.row['id']}; "
                    f"{', '.join(_non_str_keys(result))} would become a column named by its text",
                )
            payload = result
        if payload is None:
            payload = change.after if change.after is not None else change.before
            assert payload is not None

        destinations: list[Destination] = []
        for step in chain.routes:
            named = call(chain, change, step, change, budget)
            if named is None:
                continue
            if type(named) is str:
                found = self._destinations.get(named) or self._destination(named)
                if type(found) is str:
                    return self._bad_route(chain, change, step, named, found)
                destinations.append(found)  # type: ignore[arg-type]
            elif type(named) is _Failed:
                return named.outcome
            else:
                failure = self._route_items(named, destinations)
                if failure is not None:
                    return self._bad_route(chain, change, step, named, failure)
        if not destinations:
            if self._default is None:
                return self._no_route(chain, change)
            destinations = self._default
        elif len(destinations) > 1:
            destinations = list(dict.fromkeys(destinations))
        return Outcome([Delivery(d, change, payload) for d in destinations], [], False)

    def process_many(self, changes: Iterable[RowChange]) -> Iterator[Outcome]:
        """``process`` over a batch, lazily, one outcome per change in order."""
        process = self.process
        for change in changes:
            yield process(change)

    # -- chains and destinations ---------------------------------------------

    def _resolve(self, database: str, table: str) -> TableChains:
        if not self.deployment.subscribes(f"{database}.{table}"):
            chains = TableChains(None, None, None)
        else:
            by_op = {}
            for op in Operation:
                chain = Chain(*self.deployment.chain(database, table, op), self._latency)
                self._chains.append(chain)
                by_op[op] = chain
            chains = TableChains(
                by_op[Operation.INSERT],
                by_op[Operation.UPDATE],
                by_op[Operation.DELETE],
                by_op[Operation.SNAPSHOT],
            )
        self._tables[(database, table)] = chains
        return chains

    def _destination(self, text: str) -> Destination | str:
        """The destination ``text`` names, or why it names none (a message)."""
        try:
            destination = Destination.parse(text)
        except DestinationError as exc:
            return str(exc)
        if self._sinks and destination.scheme not in self._sinks:
            return (
                f"expected a destination on one of the deployment's sinks "
                f"({', '.join(sorted(self._sinks))}), got {text!r}"
            )
        if len(self._destinations) >= _DESTINATION_CACHE_LIMIT:
            self._destinations.clear()
        self._destinations[text] = destination
        return destination

    def _route_items(self, named: object, into: list[Destination]) -> str | None:
        items: Iterable[object]
        if isinstance(named, Destination):
            items = (str(named),)
        elif isinstance(named, list | tuple | set | frozenset):
            items = named
        else:
            return (
                f"expected a destination str (kafka://topic, es://index), a list of "
                f"them, or None, got {type(named).__name__} {short(named)}"
            )
        for item in items:
            text = str(item) if isinstance(item, Destination) else item
            if not isinstance(text, str):
                return (
                    f"expected destination strs in the list, got "
                    f"{type(item).__name__} {short(item)}"
                )
            destination = self._destinations.get(text) or self._destination(text)
            if isinstance(destination, str):
                return destination
            into.append(destination)
        return None

    def _context(self, info: FunctionInfo, change: RowChange) -> FunctionContext:
        return FunctionContext(
            function=info.name,
            deployment=self._manifest.name,
            version=self._manifest.version,
            source=change.source,
            table=f"{change.database}.{change.table}",
            position=change.position,
            logger=self._loggers[info.name],
            metrics=self._counters[info.name],
        )

    # -- failures -------------------------------------------------------------

    def _raised(
        self,
        chain: Chain,
        change: RowChange,
        step: Step,
        exc: BaseException,
        budget: Budget | None,
    ) -> Outcome:
        info = step.info
        if budget is not None:
            budget.step = None
        if isinstance(exc, Overrun):
            assert budget is not None
            disarm(budget)
            chain.timeouts[step.slot] += 1
            return self._timed_out(chain, change, step, budget.seconds)
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        if isinstance(exc, ReadOnlyRowError):
            message = (
                f"{info.describe()} tried to change its input ({exc.action} on a "
                f"read-only row): expected a new dict, e.g. {{**event.row, 'x': 1}}, "
                f"got an in-place change"
            )
        else:
            message = (
                f"{info.describe()} raised {type(exc).__name__}: "
                f"{first_line(exc)}; expected it to return without raising"
                + missing_image_hint(change, exc)
            )
        error = FunctionError(message, function=info.name, location=info.location, stage=info.kind)
        error.__cause__ = exc
        summary = user_traceback(exc)
        return self._dead(chain, change, step.slot, info.name, info.kind, error, summary)

    def _wrong(
        self, chain: Chain, change: RowChange, step: Step, got: object, expected: str, hint: str
    ) -> Outcome:
        info = step.info
        message = (
            f"{info.describe()} returned {type(got).__name__} {short(got)}; "
            f"expected {expected}; {hint}"
        )
        error = FunctionError(message, function=info.name, location=info.location, stage=info.kind)
        return self._dead(chain, change, step.slot, info.name, info.kind, error, "")

    def _bad_route(
        self, chain: Chain, change: RowChange, step: Step, named: object, why: str
    ) -> Outcome:
        info = step.info
        message = f"{info.describe()} returned {short(named)}: {why}"
        error = FunctionError(message, function=info.name, location=info.location, stage="route")
        return self._dead(chain, change, step.slot, info.name, "route", error, "")

    def _timed_out(self, chain: Chain, change: RowChange, step: Step, seconds: float) -> Outcome:
        info = step.info
        message = (
            f"{info.describe()} timed out: expected it to finish within {seconds:g} s "
            f"(timeout in dbus.toml), got a call still running after {seconds:g} s"
        )
        error = FunctionTimeoutError(
            message, function=info.name, location=info.location, stage=info.kind, budget=seconds
        )
        return self._dead(chain, change, step.slot, info.name, info.kind, error, "")

    def _late_overrun(self, chain: Chain, change: RowChange, budget: Budget) -> Outcome:
        running = budget.step
        step = (
            running
            if isinstance(running, Step)
            else (chain.filters + chain.projections + chain.routes)[-1]
        )
        budget.step = None
        disarm(budget)
        chain.timeouts[step.slot] += 1
        return self._timed_out(chain, change, step, budget.seconds)

    def _no_route(self, chain: Chain, change: RowChange) -> Outcome:
        name = f"deployment {self._manifest.name}"
        message = (
            f"{name}: no destination for {change.database}.{change.table}: expected a "
            "route to return one, or a default_route in dbus.toml; got neither"
        )
        error = FunctionError(message, function=name, location="dbus.toml", stage="deployment")
        return self._dead(chain, change, len(chain.steps), name, "deployment", error, "")

    def _dead(
        self,
        chain: Chain,
        change: RowChange,
        index: int,
        function: str,
        stage: str,
        error: FunctionError,
        summary: str,
    ) -> Outcome:
        chain.dead[index] += 1
        self._user_errors += 1
        self._errors.setdefault(function, deque(maxlen=RECENT_ERRORS)).append(LastError(
            time.time(), error.message, type(error).__name__, change.qualified_table,
            str(change.position),
        ))  # fmt: skip
        dead = DeadLetter(
            change,
            function,
            error.message,
            summary,
            self._dead_route,
            stage,
            True,
            type(error).__name__,
        )
        return Outcome([], [dead], False)

    def _framework_failure(self, change: RowChange, exc: Exception) -> Outcome:
        """A failure of dbus itself: counted apart, the event still dead-lettered."""
        self._framework_errors += 1
        log.exception("dbus pipeline failure on %s.%s", change.database, change.table)
        message = f"dbus failed on this event: {type(exc).__name__}: {first_line(exc)}"
        dead = DeadLetter(
            change,
            "dbus_fn",
            message,
            user_traceback(exc, skip=0),
            self._dead_route,
            "framework",
            False,
            type(exc).__name__,
        )
        return Outcome([], [dead], False)

    # -- the watchdog ---------------------------------------------------------

    def _start_watchdog(self, budget: Budget) -> None:
        self._watchdog = start_watchdog(budget, f"dbus-fn-watchdog-{self._manifest.name}")

    def close(self) -> None:
        """Let the watchdog thread end (within a tick; not waited for). The pipeline
        still works afterwards, without a time budget."""
        if self._budget is not None:
            self._budget.closed = True
        self._budget = None
        self._watchdog = None

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- counts -----------------------------------------------------------------

    def stats(self) -> PipelineStats:
        """The counts so far, per pipeline and per function."""
        per_function: dict[str, list[int]] = {
            info.name: [0, 0, 0, 0, 0] for info in self.deployment.functions
        }
        events_in = filtered = dead = timeouts = 0
        for chain in self._chains:
            events_in += chain.entered
            reaching = chain.entered
            for index, info in enumerate(chain.steps):
                counts = per_function[info.name]
                stopped = chain.filtered[index] + chain.dead[index]
                counts[0] += reaching
                counts[1] += reaching - stopped
                counts[2] += chain.filtered[index]
                counts[3] += chain.dead[index]
                counts[4] += chain.timeouts[index]
                reaching -= stopped
            filtered += sum(chain.filtered)
            dead += sum(chain.dead)
            timeouts += sum(chain.timeouts)
        kinds = {info.name: info.kind for info in self.deployment.functions}
        functions: dict[str, FunctionStats] = {}
        for name, counts in per_function.items():
            errors = tuple(self._errors.get(name, ()))
            functions[name] = FunctionStats(
                name,
                kinds[name],
                calls=counts[0],
                passed=counts[1],
                filtered=counts[2],
                dead=counts[3],
                timeouts=counts[4],
                counters=self._counters[name].snapshot(),
                latency=tuple(self._latency[name].counts),
                seconds=self._latency[name].seconds,
                last_error=errors[-1] if errors else None,
                recent_errors=errors,
            )
        return PipelineStats(
            events_in=events_in + self._ignored,
            delivered=events_in - filtered - dead - self._framework_errors,
            filtered=filtered,
            dead_lettered=dead + self._framework_errors,
            ignored=self._ignored,
            user_errors=self._user_errors,
            framework_errors=self._framework_errors,
            timeouts=timeouts,
            functions=functions,
        )


def _non_str_keys(result: Mapping[Any, Any]) -> list[str]:
    """The first few keys of a projection's result that are not strings, as shown."""
    return [short(key) for key in result if not isinstance(key, str)][:3]


def _projected(change: RowChange, row: Mapping[str, Any]) -> RowChange:
    """The change as the next projection sees it: the previous result as its row."""
    image = row if isinstance(row, Row) else Row(row)
    if change.op is Operation.DELETE:
        return replace(change, before=image)
    return replace(change, after=image)
