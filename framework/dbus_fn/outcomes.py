"""What became of one row change in one deployment: deliveries, dead letters, counts."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dbus_fn.events import Operation, Row, RowChange
from dbus_fn.manifest import Destination

__all__ = ["DeadLetter", "Delivery", "FunctionStats", "Outcome", "PipelineStats"]


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
    latency: tuple[int, ...] = ()
    """How many calls took at most each of ``LATENCY_BOUNDS`` seconds (not
    cumulative), then how many took longer."""
    seconds: float = 0.0
    """The calls' total time."""
    last_error: LastError | None = None
    """Why the function's latest dead letter was sent (None: none yet)."""
    recent_errors: tuple[LastError, ...] = ()
    """Why its latest dead letters were sent, oldest first (at most ``RECENT_ERRORS``)."""


@dataclass(frozen=True, slots=True)
class LastError:
    """A function's latest failure: when, the dead letter's one-line error, and where."""

    at: float
    """Epoch seconds."""
    error: str
    error_type: str
    table: str
    position: str


RECENT_ERRORS = 10
"""How many of a function's latest dead-letter errors a pipeline keeps."""

LATENCY_BOUNDS: tuple[float, ...] = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds (seconds) of the buckets a function's call times are counted in."""


class Latency:
    """Call times of one function, counted in ``LATENCY_BOUNDS`` buckets."""

    __slots__ = ("counts", "seconds")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BOUNDS) + 1)
        self.seconds = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BOUNDS, seconds)] += 1
        self.seconds += seconds


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
