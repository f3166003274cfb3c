"""Each deployment at its own pace: detached, caught up and rejoined.

A deployment is *with the stream* while the shared read of a source serves it; its
position is then the source's, in Spark's offset log like any batch's. The shared
read never waits on one deployment for long:

- **Detach.** A deployment whose sinks do not acknowledge its records within the
  bound (``RuntimeConfig.detach_seconds``), or whose functions take more than
  ``SLOW_SHARE`` of a read's time, is detached. It keeps the position up to which
  its sinks acknowledged everything (the read's start, or the transaction boundary
  where it was left out), the shared read leaves it out from there, and the batch
  commits for everyone else.
- **Catch up.** Each micro-batch then reads the binlog for it alone, from its
  position towards the batch's end, in a task of its own (``dbus_spark.reads.catchup``),
  for at most the open-read time. A read its sinks do not take is tried again
  after a backoff (1 s doubling to ``MAX_BACKOFF``); the position holds.
- **Rejoin.** Once its own read reached the end of a batch, the next shared read
  starts at its position for it (and at the stream's for the others) and it is
  with the stream again. Every key's changes stay in order: a deployment's records
  up to its position were acknowledged before any record past it is read.
- **Pause.** A paused deployment is left out with its position held; resumed, it
  catches up as above.

Where it is kept: each planned micro-batch's offsets carry, per source, the
deployments not with the stream and their positions (``"behind"``), so Spark's
offset log holds every deployment's position. What a batch's tasks found (a
detach, a catch-up read, a rejoin) reaches the next plan through
the ``deployments`` section of ``<checkpoint>.progress/``, written by the
batch's commit before Spark records it (``ProgressBook``; the file holds the
runtime's other progress too, ``dbus_spark.state.checkpoint.ProgressFolder``). A runtime
killed at any point replays its last batch from the positions in the offset log:
at least once, never less.

In a cluster member, the book's entries of a source are committed to ZooKeeper with
the source's position (``dbus_spark.cluster.member``): a source that moves to another
runtime takes its detached and paused deployments and their positions with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import field, replace
from typing import Annotated, Any, Literal

from pydantic import Field, field_serializer, model_validator
from pydantic.dataclasses import dataclass as json_dataclass

from dbus_fn.capture import position_from_json
from dbus_fn.events import RowChange
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.state.checkpoint import ProgressFolder
from dbus_spark.state.history.records import MAX_BACKOFF, backoff
from dbus_spark.state.records import position_order

# A deployment whose functions took more than this share of a read's time, once the
# read has run for ``SLOW_AFTER`` seconds, holds the others back: it is detached.
SLOW_SHARE = 0.5
SLOW_AFTER = 1.0

PAUSED = "paused"
STATES = ("with-stream", "catching-up", "detached", PAUSED)
"""A deployment's place in a source's stream, nearest first."""


@json_dataclass(frozen=True, config=JSON_FORM)
class Behind(JsonForm):
    """A deployment not with the stream of one source, and why."""

    position: dict[str, Any]
    """Its sinks have everything up to here (a transaction boundary, as JSON)."""
    reason: str
    since: float
    """Epoch seconds it was detached (or paused)."""
    commit_time: float = 0.0
    """Epoch seconds the last change it has was committed (0: not known)."""
    retry_at: float = 0.0
    """Epoch seconds before which no catch-up read is planned (a backoff)."""
    failures: int = 0
    """Catch-up reads in a row its sinks did not take."""
    caught_up: bool = False
    """Its last own read reached its batch's end: the next shared read takes it back."""
    paused: bool = False

    @property
    def state(self) -> str:
        if self.paused:
            return PAUSED
        return "catching-up" if self.commit_time and not self.failures else "detached"

    def due(self, now: float) -> bool:
        """Whether a catch-up read of it is planned now."""
        return not self.paused and not self.caught_up and now >= self.retry_at


Book = dict[str, dict[str, Behind]]
"""Per source, per deployment not with the stream, where it stands."""


# A task's counts carry its pace events as JSON objects tagged by ``kind`` (pydantic
# tells them apart by it: ``PaceEvent``); each event's tag is its last field.


@json_dataclass(frozen=True, config=JSON_FORM)
class Detached:
    """A task left ``deployment`` out of the shared read of ``source``: its sinks
    acknowledged everything up to ``position`` (JSON), and no further, for ``reason``."""

    source: str
    deployment: str
    position: Mapping[str, Any]
    reason: str
    commit_time: float = 0.0
    kind: Literal["detached"] = "detached"


@json_dataclass(frozen=True, config=JSON_FORM)
class CaughtUp:
    """A catch-up read's sinks acknowledged everything up to ``position`` (JSON);
    ``ended``: the read reached its batch's end."""

    source: str
    deployment: str
    position: Mapping[str, Any]
    commit_time: float
    ended: bool
    kind: Literal["read"] = "read"


@json_dataclass(frozen=True, config=JSON_FORM)
class NotTaken:
    """A catch-up read's sinks did not take what it read, for ``reason``."""

    source: str
    deployment: str
    reason: str
    kind: Literal["failed"] = "failed"


@json_dataclass(frozen=True, config=JSON_FORM)
class Rejoined:
    """A shared read took ``deployment`` back and delivered for it."""

    source: str
    deployment: str
    kind: Literal["rejoined"] = "rejoined"


PaceEvent = Annotated[Detached | CaughtUp | NotTaken | Rejoined, Field(discriminator="kind")]
"""What a batch's tasks report of the deployments not with the stream, for ``fold``."""


def detached(source: str, deployment: str, position: Mapping[str, Any], reason: str,
             commit_time: float = 0.0) -> Detached:  # fmt: skip
    """What a task reports when ``deployment`` leaves the shared read of ``source``."""
    return Detached(source, deployment, dict(position), reason, commit_time)


def caught_up_to(source: str, deployment: str, position: Mapping[str, Any], commit_time: float,
                 ended: bool) -> CaughtUp:  # fmt: skip
    """What a catch-up read reports: acknowledged up to ``position``; ``ended``: it
    reached its batch's end."""
    return CaughtUp(source, deployment, dict(position), commit_time, ended)


def not_taken(source: str, deployment: str, reason: str) -> NotTaken:
    """What a catch-up read reports when its sinks did not take what it read."""
    return NotTaken(source, deployment, reason)


def rejoined(source: str, deployment: str) -> Rejoined:
    """What a shared read reports for a deployment it took back and delivered for."""
    return Rejoined(source, deployment)


def _book(data: Mapping[str, Any]) -> Book:
    return {
        source: {name: Behind.from_json(entry) for name, entry in deployments.items()}
        for source, deployments in data.items()
    }


def _data(book: Book) -> dict[str, Any]:
    return {
        source: {name: behind.to_json() for name, behind in deployments.items()}
        for source, deployments in book.items()
        if deployments
    }


class ProgressBook:
    """The ``deployments`` section of the checkpoint's progress folder
    (``dbus_spark.state.checkpoint.ProgressFolder``): per source, the deployments not with
    the stream."""

    def __init__(self, checkpoint: str, folder: ProgressFolder | None = None) -> None:
        self._file = folder if folder is not None else ProgressFolder.of(checkpoint)

    def load(self) -> Book:
        try:
            return _book(self._file.read("deployments"))
        except (ValueError, AttributeError):  # an entry it cannot read: none is kept
            return {}

    def save(self, book: Book) -> None:
        self._file.write("deployments", _data(book))

    def _change(self, change: Callable[[Book], Book | None]) -> Book:
        """Apply ``change`` to the book while no other process writes it (None: it
        changed nothing); the book after it."""
        with self._file.held():
            book = self.load()
            changed = change(book)
            if changed is not None:
                self.save(changed)
                return changed
            return book

    def forget(self) -> None:
        """A new checkpoint starts with every deployment with the stream."""
        self._file.forget("deployments")

    def section(self, source: str) -> dict[str, dict[str, Any]]:
        """The deployments not with ``source``'s stream, as JSON: what a cluster member
        commits with the source's position, so that they move with it."""
        section = self.load().get(source, {}).items()
        return {name: {**b.to_json(), "state": b.state} for name, b in section}

    def adopt(self, source: str, section: Mapping[str, Mapping[str, Any]]) -> None:
        """Take ``source``'s deployments not with its stream as its last owner committed
        them (``section``), in place of what this book had of it."""

        def adopted(book: Book) -> Book:
            book[source] = {name: Behind.from_json(entry) for name, entry in section.items()}
            return book

        self._change(adopted)

    def apply(self, events: Iterable[PaceEvent], now: float | None = None) -> Book:
        """Fold what a batch's tasks reported into the book; the book after it."""
        events = list(events)
        if not events:
            return self.load()
        return self._change(lambda book: fold(book, events, time.time() if now is None else now))

    def pause(self, deployment: str, sources: Mapping[str, Mapping[str, Any]]) -> None:
        """Leave ``deployment`` out of every source's shared read at the position given
        per source (where it is with the stream, the batch's start), until resumed."""

        def paused(book: Book) -> Book:
            now = time.time()
            for source, position in sources.items():
                found = book.setdefault(source, {}).get(deployment)
                if found is None:
                    found = Behind(position=dict(position), reason=PAUSED, since=now)
                book[source][deployment] = replace(found, paused=True, reason=PAUSED)
            return book

        self._change(paused)

    def resume(self, deployment: str, source: str | None = None) -> bool:
        """Let a paused deployment catch up (on ``source``, or on every source); False
        when it was not paused."""
        found = False

        def resumed(book: Book) -> Book | None:
            nonlocal found
            for name, deployments in book.items():
                behind = deployments.get(deployment) if source in (None, name) else None
                if behind is not None and behind.paused:
                    deployments[deployment] = replace(
                        behind, paused=False, reason="resumed: catching up", retry_at=0.0
                    )
                    found = True
            return book if found else None

        self._change(resumed)
        return found


def fold(book: Book, events: list[PaceEvent], now: float) -> Book:
    """The book after a batch: catch-up reads first, then rejoins, then detaches (a
    deployment detached again in the batch that took it back is detached)."""
    before = book
    book = {source: dict(deployments) for source, deployments in book.items()}
    for event in events:
        if not isinstance(event, CaughtUp | NotTaken):
            continue
        behind = book.get(event.source, {}).get(event.deployment)
        if behind is None or behind.paused:
            continue
        if isinstance(event, CaughtUp):
            book[event.source][event.deployment] = replace(
                behind, position=dict(event.position),
                commit_time=event.commit_time or behind.commit_time,
                caught_up=bool(event.ended), failures=0, retry_at=0.0,
            )  # fmt: skip
        else:
            failures = behind.failures + 1
            book[event.source][event.deployment] = replace(
                behind, failures=failures, reason=event.reason,
                retry_at=now + backoff(failures),
            )  # fmt: skip
    for event in events:
        if isinstance(event, Rejoined):
            deployments = book.get(event.source, {})
            behind = deployments.get(event.deployment)
            if behind is not None and not behind.paused:
                del deployments[event.deployment]
    for event in events:
        if not isinstance(event, Detached):
            continue
        deployments = book.setdefault(event.source, {})
        behind = deployments.get(event.deployment) or before.get(event.source, {}).get(
            event.deployment
        )
        position = dict(event.position)
        if behind is not None and start_order(behind.position) <= start_order(position):
            position = behind.position  # two shards: the earlier position holds
        deployments[event.deployment] = Behind(
            position=position, reason=event.reason, since=behind.since if behind else now,
            commit_time=event.commit_time or (behind.commit_time if behind else 0.0),
            retry_at=now + 1.0, failures=behind.failures if behind else 0,
            paused=behind.paused if behind else False,
        )  # fmt: skip
    return book


def start_order(position: Mapping[str, Any]) -> int:
    """The position order of an offset or position JSON (see ``Admission``)."""
    return position_order(position_from_json(dict(position)))


@json_dataclass(frozen=True, config=JSON_FORM)
class Admission(JsonForm):
    """Which deployments a shared read serves each change to: not those ``left_out``
    (detached, paused), and each only past its own start (a deployment taken back
    starts at its position, ``back``, the others at the stream's, ``default_start``)."""

    left_out: frozenset[str] = frozenset()
    back: Mapping[str, Mapping[str, Any]] | None = None
    """Per deployment taken back, its position (JSON)."""
    default_start: int | None = None
    """The position order past which the others receive changes (None: all)."""
    _starts: Mapping[str, int] | None = field(
        default=Field(default=None, exclude=True), init=False, compare=False
    )
    """``back``'s position orders, worked out once (not written: ``back`` holds them)."""

    def __post_init__(self) -> None:
        starts = None if self.back is None else {d: start_order(p) for d, p in self.back.items()}
        object.__setattr__(self, "_starts", starts)

    def __bool__(self) -> bool:
        return bool(self.left_out) or self.back is not None

    def admits(self, deployment: str, change: RowChange) -> bool:
        if deployment in self.left_out:
            return False
        if self._starts is None:
            return True
        floor = self._starts.get(deployment, self.default_start)
        return floor is None or position_order(change.position) > floor

    def without(self, deployment: str) -> Admission:
        return replace(self, left_out=self.left_out | {deployment})

    @model_validator(mode="before")
    @classmethod
    def _none(cls, data: Any) -> Any:
        """An admission that serves every deployment from the stream's start travels as
        None (``dbus_spark.planning.source``)."""
        return {} if data is None or data == {} else data

    @field_serializer("left_out")
    def _sorted(self, left_out: frozenset[str]) -> list[str]:
        return sorted(left_out)


__all__ = [
    "MAX_BACKOFF",
    "PAUSED",
    "SLOW_AFTER",
    "SLOW_SHARE",
    "STATES",
    "Admission",
    "Behind",
    "Book",
    "CaughtUp",
    "Detached",
    "NotTaken",
    "PaceEvent",
    "ProgressBook",
    "Rejoined",
    "caught_up_to",
    "detached",
    "fold",
    "not_taken",
    "rejoined",
    "start_order",
]
