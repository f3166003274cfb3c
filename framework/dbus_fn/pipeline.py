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

Time budget. A per-call budget must hold where the runtime calls us: inside a
Spark executor's Python worker, not necessarily in the main thread, so
``signal.setitimer`` is out, and a thread cannot be killed. Instead a watchdog
thread (one per pipeline with a budget) samples which call is running; when one
call has run longer than the budget it raises ``_Overrun`` inside the calling
thread with ``PyThreadState_SetAsyncExc``. That interrupts Python code at once,
and code blocked in C (``time.sleep``, a socket read) as soon as it returns to
Python; the event is dead-lettered either way. Sampling makes the budget exact to
a tick (a tenth of the budget, at most 50 ms), and costs the hot path two
attribute stores per call instead of a system call.

Speed. The chain of functions for each (database, table, operation) is resolved
once and cached; functions are called directly, not through pluggy's hook caller,
and per-function counters are derived from per-chain counts at ``stats()`` time.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
import traceback
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

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
_DESTINATION_CACHE_LIMIT = 10_000
_TRACEBACK_FRAMES = 6


@dataclass(frozen=True, slots=True)
class Delivery:
    """One payload for one destination.

    ``change`` is the event as captured; ``payload`` is the row to deliver: the
    last projection's result, or the row as captured (``after``, or ``before``
    for a delete) when no projection applies.
    """

    destination: Destination
    change: RowChange
    payload: Mapping[str, Any]

    def projected(self) -> RowChange:
        """The change as delivered: the payload as its row image.

        With projections, the other image of an update (``before``) is dropped:
        it did not go through the projections, and projections exist to remove
        or rewrite columns (PII, say) that it would still carry.
        """
        change = self.change
        if self.payload is change.row:
            return change
        image = self.payload if isinstance(self.payload, Row) else Row(self.payload)
        types = _projected_types(change, image)
        if change.op is Operation.DELETE:
            return replace(change, before=image, column_types=types)
        return replace(change, before=None, after=image, column_types=types)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An event a function could not process, and why.

    ``error`` is one line naming the function (``module:qualname (file:line)``),
    what was expected and what arrived; ``traceback`` is a short summary of the
    user's frames. ``user_error`` is ``False`` only for failures of dbus itself.
    """

    change: RowChange
    function: str
    error: str
    traceback: str
    destination: Destination
    stage: str = "function"
    """``filter``, ``projection``, ``route``, ``deployment`` or ``framework``."""
    user_error: bool = True
    error_type: str = ""
    """The class name of the error, e.g. ``FunctionTimeoutError``."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one row change in one deployment."""

    deliveries: list[Delivery]
    dead_letters: list[DeadLetter]
    filtered: bool

    @property
    def delivered(self) -> bool:
        return bool(self.deliveries)

    @property
    def destinations(self) -> list[str]:
        """Where the deliveries go, as ``scheme://name`` strs: handy in tests."""
        return [str(delivery.destination) for delivery in self.deliveries]


@dataclass(frozen=True, slots=True)
class FunctionStats:
    """What one function did since the pipeline started."""

    name: str
    kind: str
    calls: int
    passed: int
    filtered: int
    dead: int
    timeouts: int
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PipelineStats:
    """Counts of one pipeline: events in, delivered, filtered, dead-lettered."""

    events_in: int
    delivered: int
    filtered: int
    dead_lettered: int
    ignored: int
    """Events of a table or operation the deployment does not subscribe to."""
    user_errors: int
    framework_errors: int
    timeouts: int
    functions: Mapping[str, FunctionStats]


class _Overrun(BaseException):
    """Raised inside a user's function by the watchdog; never escapes the pipeline.

    A ``BaseException`` so that a function's ``except Exception`` does not
    swallow it.
    """


_Step = tuple[Any, bool, FunctionInfo, int]
"""(callable, takes_context, info, index of the step in its chain)."""


class _Chain:
    """The functions that apply to one (database, table, operation), with counts."""

    __slots__ = (
        "dead",
        "entered",
        "filtered",
        "filters",
        "projections",
        "routes",
        "steps",
        "timeouts",
    )

    def __init__(
        self,
        filters: tuple[FunctionInfo, ...],
        projections: tuple[FunctionInfo, ...],
        routes: tuple[FunctionInfo, ...],
    ) -> None:
        infos = (*filters, *projections, *routes)
        steps = [
            (info.function, info.takes_context, info, index) for index, info in enumerate(infos)
        ]
        self.steps: tuple[FunctionInfo, ...] = infos
        self.filters: tuple[_Step, ...] = tuple(steps[: len(filters)])
        self.projections: tuple[_Step, ...] = tuple(
            steps[len(filters) : len(filters) + len(projections)]
        )
        self.routes: tuple[_Step, ...] = tuple(steps[len(filters) + len(projections) :])
        self.entered = 0
        # Per step; the extra last slot counts events dead-lettered by the
        # deployment itself (no route and no default route).
        self.filtered = [0] * len(infos)
        self.dead = [0] * (len(infos) + 1)
        self.timeouts = [0] * len(infos)


class _TableChains:
    __slots__ = ("delete", "insert", "update")

    def __init__(self, insert: _Chain | None, update: _Chain | None, delete: _Chain | None) -> None:
        self.insert = insert
        self.update = update
        self.delete = delete


class _Budget:
    """What the watchdog watches: which call is running, and since which call count."""

    __slots__ = ("__weakref__", "calls", "closed", "fired", "seconds", "step", "thread")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.step: _Step | None = None
        self.thread = 0
        self.fired = 0
        self.closed = False


def _watch(budget_ref: weakref.ReferenceType[_Budget], tick: float) -> None:
    """The watchdog loop: interrupt a call that has run longer than the budget."""
    last_calls = -1
    since = 0.0
    while True:
        time.sleep(tick)
        budget = budget_ref()
        if budget is None or budget.closed:
            return
        calls, step = budget.calls, budget.step
        now = time.monotonic()
        if step is None:
            last_calls = -1
        elif calls != last_calls:
            last_calls, since = calls, now
        elif now - since >= budget.seconds and budget.calls == calls and budget.step is step:
            budget.fired = calls
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(budget.thread), ctypes.py_object(_Overrun)
            )
        del budget


def _disarm(budget: _Budget) -> None:
    """Forget an interrupt: handled, or swallowed by the function.

    The watchdog may have raised again while the first interrupt unwound; a
    pending one would go off later in the caller's code, so it is cleared (a
    NULL exception clears the thread's pending asynchronous exception).
    """
    budget.fired = 0
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(budget.thread), None)


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
        self._tables: dict[tuple[str, str], _TableChains] = {}
        self._chains: list[_Chain] = []
        self._destinations: dict[str, Destination] = {}
        self._counters = {info.name: Counters() for info in deployment.functions}
        self._loggers = {info.name: function_logger(info.name) for info in deployment.functions}
        self._ignored = 0
        self._user_errors = 0
        self._framework_errors = 0
        self._budget: _Budget | None = None
        self._watchdog: threading.Thread | None = None
        if manifest.timeout:
            self._budget = _Budget(manifest.timeout)

    # -- the hot path ---------------------------------------------------------

    def process(self, change: RowChange) -> Outcome:
        """Run the deployment's functions over one row change."""
        key = (change.database, change.table)
        chains = self._tables.get(key)
        if chains is None:
            chains = self._resolve(change.database, change.table)
        op = change.op
        chain = (
            chains.insert if op is _INSERT else chains.update if op is _UPDATE else chains.delete
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
        except _Overrun:
            # Landed after the function returned, in our own code: still its overrun.
            outcome = self._late_overrun(chain, change, budget)
        except Exception as exc:
            return self._framework_failure(change, exc)
        if budget.fired:
            # The function swallowed the interrupt and returned anyway.
            outcome = self._late_overrun(chain, change, budget)
        return outcome

    def _run(self, chain: _Chain, change: RowChange, budget: _Budget | None) -> Outcome:
        for step in chain.filters:
            if budget is not None:
                budget.calls += 1
                budget.step = step
            try:
                kept = (
                    step[0](change, self._context(step[2], change)) if step[1] else step[0](change)
                )
            except BaseException as exc:
                return self._raised(chain, change, step, exc, budget)
            if budget is not None:
                budget.step = None
            if kept is not True:
                if kept is False:
                    chain.filtered[step[3]] += 1
                    return Outcome([], [], True)
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
            if budget is not None:
                budget.calls += 1
                budget.step = step
            try:
                result = (
                    step[0](current, self._context(step[2], current))
                    if step[1]
                    else step[0](current)
                )
            except BaseException as exc:
                return self._raised(chain, change, step, exc, budget)
            if budget is not None:
                budget.step = None
            if type(result) is not dict and not isinstance(result, Mapping):
                return self._wrong(
                    chain,
                    change,
                    step,
                    result,
                    "a dict of column values",
                    "build and return a new dict, e.g. {**event.row, 'x': 1}",
                )
            payload = result
        if payload is None:
            payload = change.after if change.after is not None else change.before
            assert payload is not None

        destinations: list[Destination] = []
        for step in chain.routes:
            if budget is not None:
                budget.calls += 1
                budget.step = step
            try:
                named = (
                    step[0](change, self._context(step[2], change)) if step[1] else step[0](change)
                )
            except BaseException as exc:
                return self._raised(chain, change, step, exc, budget)
            if budget is not None:
                budget.step = None
            if named is None:
                continue
            if type(named) is str:
                found = self._destinations.get(named) or self._destination(named)
                if type(found) is str:
                    return self._bad_route(chain, change, step, named, found)
                destinations.append(found)  # type: ignore[arg-type]
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

    def _resolve(self, database: str, table: str) -> _TableChains:
        if not self.deployment.subscribes(f"{database}.{table}"):
            chains = _TableChains(None, None, None)
        else:
            by_op = {}
            for op in Operation:
                chain = _Chain(*self.deployment.chain(database, table, op))
                self._chains.append(chain)
                by_op[op] = chain
            chains = _TableChains(
                by_op[Operation.INSERT], by_op[Operation.UPDATE], by_op[Operation.DELETE]
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
                f"them, or None, got {type(named).__name__} {_short(named)}"
            )
        for item in items:
            text = str(item) if isinstance(item, Destination) else item
            if not isinstance(text, str):
                return (
                    f"expected destination strs in the list, got "
                    f"{type(item).__name__} {_short(item)}"
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
        chain: _Chain,
        change: RowChange,
        step: _Step,
        exc: BaseException,
        budget: _Budget | None,
    ) -> Outcome:
        info = step[2]
        if budget is not None:
            budget.step = None
        if isinstance(exc, _Overrun):
            assert budget is not None
            _disarm(budget)
            chain.timeouts[step[3]] += 1
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
                f"{_first_line(exc)}; expected it to return without raising"
                + _missing_image_hint(change, exc)
            )
        error = FunctionError(message, function=info.name, location=info.location, stage=info.kind)
        error.__cause__ = exc
        return self._dead(chain, change, step[3], info.name, info.kind, error, _user_traceback(exc))

    def _wrong(
        self, chain: _Chain, change: RowChange, step: _Step, got: object, expected: str, hint: str
    ) -> Outcome:
        info = step[2]
        message = (
            f"{info.describe()} returned {type(got).__name__} {_short(got)}; "
            f"expected {expected}; {hint}"
        )
        error = FunctionError(message, function=info.name, location=info.location, stage=info.kind)
        return self._dead(chain, change, step[3], info.name, info.kind, error, "")

    def _bad_route(
        self, chain: _Chain, change: RowChange, step: _Step, named: object, why: str
    ) -> Outcome:
        info = step[2]
        message = f"{info.describe()} returned {_short(named)}: {why}"
        error = FunctionError(message, function=info.name, location=info.location, stage="route")
        return self._dead(chain, change, step[3], info.name, "route", error, "")

    def _timed_out(self, chain: _Chain, change: RowChange, step: _Step, seconds: float) -> Outcome:
        info = step[2]
        message = (
            f"{info.describe()} timed out: expected it to finish within {seconds:g} s "
            f"(timeout in dbus.toml), got a call still running after {seconds:g} s"
        )
        error = FunctionTimeoutError(
            message, function=info.name, location=info.location, stage=info.kind, budget=seconds
        )
        return self._dead(chain, change, step[3], info.name, info.kind, error, "")

    def _late_overrun(self, chain: _Chain, change: RowChange, budget: _Budget) -> Outcome:
        step = budget.step or (chain.filters + chain.projections + chain.routes)[-1]
        budget.step = None
        _disarm(budget)
        chain.timeouts[step[3]] += 1
        return self._timed_out(chain, change, step, budget.seconds)

    def _no_route(self, chain: _Chain, change: RowChange) -> Outcome:
        name = f"deployment {self._manifest.name}"
        message = (
            f"{name}: no destination for {change.database}.{change.table}: expected a "
            "route to return one, or a default_route in dbus.toml; got neither"
        )
        error = FunctionError(message, function=name, location="dbus.toml", stage="deployment")
        return self._dead(chain, change, len(chain.steps), name, "deployment", error, "")

    def _dead(
        self,
        chain: _Chain,
        change: RowChange,
        index: int,
        function: str,
        stage: str,
        error: FunctionError,
        summary: str,
    ) -> Outcome:
        chain.dead[index] += 1
        self._user_errors += 1
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
        message = f"dbus failed on this event: {type(exc).__name__}: {_first_line(exc)}"
        dead = DeadLetter(
            change,
            "dbus_fn",
            message,
            _user_traceback(exc, skip=0),
            self._dead_route,
            "framework",
            False,
            type(exc).__name__,
        )
        return Outcome([], [dead], False)

    # -- the watchdog ---------------------------------------------------------

    def _start_watchdog(self, budget: _Budget) -> None:
        tick = min(budget.seconds / 10, 0.05)
        self._watchdog = threading.Thread(
            target=_watch,
            args=(weakref.ref(budget), tick),
            name=f"dbus-fn-watchdog-{self._manifest.name}",
            daemon=True,
        )
        self._watchdog.start()

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
        functions = {
            name: FunctionStats(
                name,
                kinds[name],
                calls=counts[0],
                passed=counts[1],
                filtered=counts[2],
                dead=counts[3],
                timeouts=counts[4],
                counters=self._counters[name].snapshot(),
            )
            for name, counts in per_function.items()
        }
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


def _projected(change: RowChange, row: Mapping[str, Any]) -> RowChange:
    """The change as the next projection sees it: the previous result as its row."""
    image = row if isinstance(row, Row) else Row(row)
    if change.op is Operation.DELETE:
        return replace(change, before=image)
    return replace(change, after=image)


def _projected_types(change: RowChange, payload: Mapping[str, Any]) -> dict[str, str]:
    """The column types that still describe a projected row.

    A column keeps its MySQL type when the projection left a value of the same
    Python type (a masked e-mail is still a ``varchar``) or NULL; a column it
    added or changed the kind of (a SET turned into a list, a flattened JSON key)
    loses it, and its JSON form is inferred from the value.
    """
    original = change.row
    kept: dict[str, str] = {}
    for column, column_type in change.column_types.items():
        if column not in payload:
            continue
        value, before = payload[column], original.get(column)
        if value is None or (before is not None and type(value) is type(before)):
            kept[column] = column_type
    return kept


def _missing_image_hint(change: RowChange, exc: BaseException) -> str:
    """The likeliest cause of a ``NoneType`` error: reading the image an operation lacks."""
    if not isinstance(exc, AttributeError | TypeError) or "NoneType" not in str(exc):
        return ""
    if change.op is Operation.DELETE:
        missing = "event.after is None for a delete"
    elif change.op is Operation.INSERT:
        missing = "event.before is None for an insert"
    else:
        return ""
    return (
        f"; hint: {missing}: read event.row (the row as it is, or as it was before a "
        "delete), or limit the function with operations=[...]"
    )


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "(no message)"


def _user_traceback(exc: BaseException, *, skip: int = 1) -> str:
    """The last frames of ``exc``'s traceback, skipping the pipeline's own frame."""
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    frames = traceback.extract_tb(tb)[-_TRACEBACK_FRAMES:]
    lines = [f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames]
    lines.append(f"{type(exc).__name__}: {_first_line(exc)}")
    return "\n".join(lines)
