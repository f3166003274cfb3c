"""What one read task counted, and the JSON it hands Spark them in.

A task's ``StageCounts`` say what the function stage did with each change it read
(rows, offers, deliveries, dead letters, each deployment's busy time), what its
history reads and its pace reported, and the newest changes of each table for the
preview window. The task sends them to the driver as its last row
(``stage.worker.Batcher``); the writer's tasks sum them (``add``) into the batch's
metrics and progress (``sinks.writer``).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import field, fields
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, PlainSerializer, PlainValidator
from pydantic.dataclasses import dataclass as json_dataclass

from dbus_fn.errors import DbusError
from dbus_fn.events import RowChange
from dbus_fn.json_format import event_to_json
from dbus_fn.manifest import Destination
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.state.history import ChunkDone, Refusal, ReplayPart
from dbus_spark.state.progress import PaceEvent


def _pairs(counts: Counter[Any]) -> list[list[Any]]:
    """A counter keyed by tuples as JSON: ``[[*key, count], ...]``, each key part a
    str (a ``Destination`` becomes ``scheme://name`` here, not on the hot path)."""
    return [[*map(str, key), count] for key, count in counts.items()]


def counter_of_pairs(pairs: list[list[Any]]) -> Counter[Any]:
    """The counter ``_pairs`` wrote."""
    return Counter({tuple(pair[:-1]): int(pair[-1]) for pair in pairs})


def _counter_or_pairs(value: Counter[Any] | list[list[Any]]) -> Counter[Any]:
    return value if isinstance(value, Counter) else counter_of_pairs(value)


def _recent(value: Any) -> dict[tuple[str, str], deque[RowChange] | list[str]]:
    if isinstance(value, dict):
        return value
    return {(source, table): list(events) for source, table, events in value}


Parts = TypeVar("Parts")
Pairs = Annotated[Counter[Parts], PlainValidator(_counter_or_pairs), PlainSerializer(_pairs)]
"""A counter keyed by tuples: in JSON, ``_pairs``'s lists."""
Tally = Annotated[Counter[str], PlainValidator(Counter), PlainSerializer(dict)]
"""A counter keyed by names (of counts, or of seconds): in JSON, an object."""
Recent = Annotated[
    dict[tuple[str, str], deque[RowChange] | list[str]],
    PlainValidator(_recent),
    PlainSerializer(
        lambda recent: [[s, t, _event_texts(changes)] for (s, t), changes in recent.items()]
    ),
]
"""Changes kept per table: in JSON, ``[source, table, [structured CloudEvent, ...]]``
each, the changes encoded only as the counts leave the task."""


@json_dataclass(config=ConfigDict(**JSON_FORM, arbitrary_types_allowed=True))
class StageCounts(JsonForm):
    """What the stage did, per deployment; summed on the driver into batch metrics.

    Each task's counts travel to its writer as ``to_bytes``; the writer's report carries
    them as ``to_json``."""

    rows: int = 0
    ddl: int = 0
    read_seconds: float = 0.0
    started: float = 0.0
    """Epoch seconds the earliest read began."""
    tables: Pairs[tuple[str, str]] = field(default_factory=Counter)
    """Per (source, table), the binlog row changes read (``rows`` summed)."""
    offered: Pairs[tuple[str, str, str]] = field(default_factory=Counter)
    """Per (source, table, deployment), the events offered to its functions."""
    routed: Pairs[tuple[str, Destination]] = field(default_factory=Counter)
    """Per (deployment, destination), the records it sent there, dead letters included
    (a ``Destination``, read back as its text)."""
    delivered: Tally = field(default_factory=Counter)
    filtered: Tally = field(default_factory=Counter)
    dead: Tally = field(default_factory=Counter)
    positions: dict[str, str] = field(default_factory=dict)
    """Per source, the position the batch read up to."""
    last_commit: dict[str, float] = field(default_factory=dict)
    """Per source, the commit time (epoch seconds) of the newest transaction read."""
    held: Tally = field(default_factory=Counter)
    """Per deployment, binlog changes a history task's chunk holds (see ``history``)."""
    snapshot_rows: Tally = field(default_factory=Counter)
    """Per deployment, snapshot rows read for its history tasks."""
    chunks: list[ChunkDone] = field(default_factory=list)
    """The history chunks read."""
    replays: list[ReplayPart] = field(default_factory=list)
    """The replay parts read: where each stopped, how many rows."""
    reached: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per source read open past its planned end, the position (as JSON) it delivered
    up to (see ``dbus_spark.planning.source``)."""
    busy: Tally = field(default_factory=Counter)
    """Per deployment, seconds its functions ran (``dbus_spark.state.progress``: a deployment
    that takes most of a read's time is detached)."""
    progress: list[PaceEvent] = field(default_factory=list)
    """Deployments detached, caught up or taken back (``dbus_spark.state.progress`` events)."""
    refused: list[Refusal] = field(default_factory=list)
    """History reads (a chunk, a replay part) their deployment's sinks did not take;
    read again after a backoff."""
    recent: Recent = field(default_factory=dict)
    """Per (source, table), the newest changes read (``keep``), for the runtime's preview
    window (``dbus_spark.interfaces.preview``): changes here, their structured JSON once sent."""

    def keep(self, change: RowChange, size: int) -> None:
        """Remember ``change`` among the ``size`` newest of its table."""
        key = (change.source, change.qualified_table)
        found = self.recent.get(key)
        if found is None:
            found = self.recent[key] = deque(maxlen=size)
        found.append(change)  # type: ignore[arg-type]

    def add_bytes(self, data: bytes) -> None:
        """Fold in another task's counts as ``to_bytes`` wrote them."""
        self.add(StageCounts.from_bytes(data))

    def add(self, other: StageCounts) -> None:
        """Fold another task's counts into these (the shards of one source included)."""
        self.rows += other.rows
        self.ddl += other.ddl
        self.read_seconds = max(self.read_seconds, other.read_seconds)
        if other.started:
            self.started = min(self.started or other.started, other.started)
        self.tables.update(other.tables)
        self.offered.update(other.offered)
        self.routed.update(other.routed)
        self.delivered.update(other.delivered)
        self.filtered.update(other.filtered)
        self.dead.update(other.dead)
        self.positions.update(other.positions)
        for source, moment in other.last_commit.items():
            self.last_commit[source] = max(self.last_commit.get(source, 0.0), moment)
        self.held.update(other.held)
        self.snapshot_rows.update(other.snapshot_rows)
        self.chunks += other.chunks
        self.replays += other.replays
        self.reached.update(other.reached)
        self.busy.update(other.busy)
        self.progress += other.progress
        self.refused += other.refused
        for key, changes in other.recent.items():
            self.recent[key] = [*_event_texts(self.recent.get(key, [])), *_event_texts(changes)]


def _event_texts(changes: Iterable[RowChange | str]) -> list[str]:
    """Kept changes as structured JSON CloudEvents (those already so, as they are); a
    change with no CloudEvent form is left out of the window."""
    texts = []
    for change in changes:
        if isinstance(change, str):
            texts.append(change)
            continue
        try:
            texts.append(event_to_json(change).decode())
        except DbusError:
            continue
    return texts


@json_dataclass(config=JSON_FORM)
class SinkCounts(JsonForm):
    """What a read task's sinks took: records handed to them, messages and documents
    acknowledged, per source; summed on the driver beside the ``StageCounts``."""

    records: int = 0
    kafka: int = 0
    elasticsearch: int = 0
    fenced: int = 0
    """Kafka messages dropped because the source's hold was lost mid-task."""
    already: int = 0
    """Kafka messages not sent again: their lane's committed mark in the cluster was
    past them (exactly once, ``dbus_spark.sinks.kafka_positions``)."""
    seconds: float = 0.0
    started: float = 0.0
    """Epoch seconds the task began writing (0: it wrote nothing)."""
    per_source: Tally = field(default_factory=Counter)

    def sink_counts(self) -> SinkCounts:
        """These counts alone (a copy), as a read task that delivered itself sends them."""
        copied = {f.name: getattr(self, f.name) for f in fields(SinkCounts)}
        return SinkCounts(**{**copied, "per_source": Counter(self.per_source)})

    def add_sinks(self, other: SinkCounts) -> None:
        """Add what another task's sinks took."""
        self.records += other.records
        self.kafka += other.kafka
        self.elasticsearch += other.elasticsearch
        self.fenced += other.fenced
        self.already += other.already
        self.seconds = max(self.seconds, other.seconds)
        began = [t for t in (self.started, other.started) if t]
        self.started = min(began) if began else 0.0
        self.per_source.update(other.per_source)


__all__ = ["SinkCounts", "StageCounts", "Tally", "counter_of_pairs"]
