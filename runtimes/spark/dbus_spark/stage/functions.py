"""The function stage: every captured change, through every deployment that wants it.

One binlog read fans out here. The stage runs in the same Python worker that
decodes the binlog, so a change is never serialized between capture and the
functions; what leaves the stage is one typed record per delivery or dead letter,
ready for its sink: a ``KafkaRecord`` (a CloudEvent in the Kafka binary binding,
or a dead letter in the structured one) or an Elasticsearch ``IndexAction``. A
``FunctionStage`` is built once per worker process (functions load once per
worker, not per row). One deployment's failing function sends that event to the
deployment's dead-letter destination and never stops the other deployments.
"""

from __future__ import annotations

import pickle
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, PlainSerializer, PlainValidator
from pydantic.dataclasses import dataclass as json_dataclass

from dbus_fn.cloudevent import (
    image_digests,
    key_json,
    partition_key,
    primary_key_text,
    row_digest,
    row_json,
)
from dbus_fn.columns import row_encoder
from dbus_fn.deadletter import capture_dead_letter, dead_letter_event, input_dead_letter
from dbus_fn.errors import (
    ColumnValueError,
    DbusError,
    UnsupportedColumnTypeError,
)
from dbus_fn.events import Operation, RowChange, UndecodedRows
from dbus_fn.json_format import event_to_json
from dbus_fn.kafka_binding import to_kafka_message
from dbus_fn.manifest import Destination
from dbus_fn.outcomes import Delivery
from dbus_fn.pipeline import DeadLetter, Pipeline
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.config.routes import Routes, routes_of
from dbus_spark.config.runtime import DeploymentFolder
from dbus_spark.stage.shipment import shipped_packages
from dbus_spark.state.history import ChunkDone, Gate, Refusal, ReplayPart
from dbus_spark.state.progress import (
    Admission,
    PaceEvent,
)
from dbus_spark.state.records import IndexAction, KafkaRecord, document_version


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One output of the stage for one deployment: a Kafka record (a delivery or a
    dead letter to the deployment's dead-letter topic) or an Elasticsearch write."""

    deployment: str
    record: KafkaRecord | IndexAction


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


class FunctionStage:
    def __init__(
        self, deployments: tuple[DeploymentFolder, ...], *, type_prefix: str, window: int = 0
    ) -> None:
        """``window``: how many of each table's newest changes a task keeps for the
        runtime's preview window (0: none)."""
        self._window = window
        self.deployments: list[LoadedDeployment] = [
            load_deployment(d.path, packages=shipped_packages(d.path), name=d.name)
            for d in deployments
        ]
        self._pipelines = [(d, Pipeline(d)) for d in self.deployments]
        self._versions = {d.manifest.name: d.manifest.version for d in self.deployments}
        self.routes: Routes = routes_of([d.manifest for d in self.deployments])
        """Where the deployments that name their own clusters write."""
        self._type_prefix = type_prefix
        self._index_actions = IndexActions()
        self._subscribed: dict[tuple[str, str], list[tuple[LoadedDeployment, Pipeline]]] = {}
        self._encoded: tuple[RowChange, Any] | None = None
        """The last change encoded for Kafka, and its message: the deployments that send
        a change unprojected send the same message, encoded once."""

    def _subscribers(self, source: str, table: str) -> list[tuple[LoadedDeployment, Pipeline]]:
        found = self._subscribed.get((source, table))
        if found is None:
            found = [
                (d, p)
                for d, p in self._pipelines
                if d.subscribes(table) and d.manifest.captures(source)
            ]
            self._subscribed[(source, table)] = found
        return found

    def process(
        self,
        change: RowChange,
        counts: StageCounts,
        gate: Gate | None = None,
        admission: Admission | None = None,
    ) -> Iterator[StageRecord]:
        """A binlog change through every deployment subscribed to its table; ``gate``
        holds back what a deployment's history chunks bring instead; ``admission``
        leaves out the deployments not with the stream (``dbus_spark.state.progress``)."""
        counts.rows += 1
        counts.tables[(change.source, change.qualified_table)] += 1
        if self._window:
            counts.keep(change, self._window)
        for deployment, pipeline in self._subscribers(change.source, change.qualified_table):
            if admission is not None and not admission.admits(deployment.manifest.name, change):
                continue
            if gate is not None and not gate.admits(deployment.manifest.name, change):
                counts.held[deployment.manifest.name] += 1
                continue
            yield from self._run(deployment, pipeline, change, counts)

    def process_only(
        self,
        deployment_name: str,
        change: RowChange,
        counts: StageCounts,
        route: Destination | None = None,
        gate: Gate | None = None,
    ) -> Iterator[StageRecord]:
        """A replayed change through one deployment; ``route`` replaces its destinations;
        ``gate`` holds back what the deployment's history chunks bring instead."""
        if gate is not None and not gate.admits(deployment_name, change):
            counts.held[deployment_name] += 1
            return
        for deployment, pipeline in self._subscribers(change.source, change.qualified_table):
            if deployment.manifest.name == deployment_name:
                yield from self._run(deployment, pipeline, change, counts, route)

    def process_snapshot(
        self, deployment_name: str, change: RowChange, counts: StageCounts
    ) -> Iterator[StageRecord]:
        """A snapshot row through the one deployment whose history read it."""
        counts.snapshot_rows[deployment_name] += 1
        for deployment, pipeline in self._subscribers(change.source, change.qualified_table):
            if deployment.manifest.name == deployment_name:
                yield from self._run(deployment, pipeline, change, counts)

    def input_dead_letters(
        self, source: str, message: Any, error: BaseException, counts: StageCounts
    ) -> Iterator[StageRecord]:
        """A Kafka source's message that is no change (``dbus_spark.config.kafka_source``), as a
        dead letter of every deployment subscribed to ``source``."""
        for deployment in self.deployments:
            if not deployment.manifest.captures(source):
                continue
            event = input_dead_letter(
                source, message.topic(), message.partition(), message.offset(),
                message.key(), message.value(), error, type_prefix=self._type_prefix,
            )  # fmt: skip
            yield self._made_dead_letter(deployment, event, counts)

    def undecoded(
        self, rows: UndecodedRows, counts: StageCounts, only: str | None = None
    ) -> Iterator[StageRecord]:
        """Rows the binlog read could not decode, as a dead letter of every deployment
        that reads their table (or of the deployment ``only``, when one reads alone)."""
        event = None  # one dead letter, made once, whoever reads the table
        for deployment, _pipeline in self._subscribers(rows.source, rows.qualified_table):
            if only is None or deployment.manifest.name == only:
                event = event or capture_dead_letter(rows, type_prefix=self._type_prefix)
                yield self._made_dead_letter(deployment, event, counts)

    def _made_dead_letter(
        self, deployment: LoadedDeployment, event: Any, counts: StageCounts
    ) -> StageRecord:
        """``event``, a dead letter the stage made itself, to ``deployment``'s
        dead-letter route, counted as its dead."""
        manifest = deployment.manifest
        counts.dead[manifest.name] += 1
        counts.routed[(manifest.name, manifest.dead_letter_route)] += 1
        return StageRecord(manifest.name, _structured(manifest.dead_letter_route.name, event))

    def sink_keys(self, change: RowChange) -> tuple[str, str]:
        """How Elasticsearch (document id) and Kafka (message key) name the change's row."""
        document = self._index_actions.build(change, "-").doc_id
        return document, partition_key(change)

    def deletion(self, deployment_name: str, destination: str, change: RowChange) -> StageRecord:
        """A repair's delete, past the functions: ``destination`` holds a row the table
        does not (as of ``change.position``, where the repair read found none)."""
        deployment = next(d for d in self.deployments if d.manifest.name == deployment_name)
        dead_topic = deployment.manifest.dead_letter_route.name
        [record] = self._records(
            Delivery(Destination.parse(destination), change, change.row), dead_topic
        )
        return StageRecord(deployment_name, record)

    def function_stats(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per deployment and function, what its pipeline counted in this worker so far:
        calls, passed, filtered, dead, timeouts, and call times (``dbus_spark.observe``)."""
        return {
            deployment.manifest.name: {
                name: asdict(stats) for name, stats in pipeline.stats().functions.items()
            }
            for deployment, pipeline in self._pipelines
        }

    def has_deployment(self, name: str) -> bool:
        return any(d.manifest.name == name for d in self.deployments)

    def _run(
        self,
        deployment: LoadedDeployment,
        pipeline: Pipeline,
        change: RowChange,
        counts: StageCounts,
        route: Destination | None = None,
    ) -> Iterator[StageRecord]:
        name = deployment.manifest.name
        dead_topic = deployment.manifest.dead_letter_route.name
        counts.offered[(change.source, change.qualified_table, name)] += 1
        began = time.perf_counter()
        outcome = pipeline.process(change)
        counts.busy[name] += time.perf_counter() - began
        if outcome.filtered:
            counts.filtered[name] += 1
        dead = list(outcome.dead_letters)
        encoded: list[StageRecord] = []
        deliveries = outcome.deliveries
        if route is not None and deliveries:
            # Rerouted: every destination becomes the one given, once.
            deliveries = [Delivery(route, deliveries[0].change, deliveries[0].payload)]
        for delivery in deliveries:
            try:
                encoded += [StageRecord(name, r) for r in self._records(delivery, dead_topic)]
            except DbusError as exc:
                # A projection's result the event format cannot carry (its key
                # columns gone, say) is that function's failure, not the runtime's.
                dead = [_unencodable(delivery.change, exc, deployment)]
                encoded = []
                break
        counts.delivered[name] += len(encoded)
        for delivery in deliveries if encoded else ():
            counts.routed[(name, delivery.destination)] += 1
        yield from encoded
        for letter in dead:
            counts.dead[name] += 1
            counts.routed[(name, deployment.manifest.dead_letter_route)] += 1
            yield self._dead_letter(letter, name)

    def _records(self, delivery: Delivery, dead_topic: str) -> list[KafkaRecord | IndexAction]:
        change = delivery.projected()
        destination = delivery.destination
        if destination.scheme == "es":
            return list(
                self._index_actions.writes(
                    change, destination.name, dead_letter=dead_topic, original=delivery.change
                )
            )
        encoded = self._encoded
        if encoded is not None and encoded[0] is change:
            message = encoded[1]
        else:
            message = to_kafka_message(change, type_prefix=self._type_prefix)
            self._encoded = (change, message)
        return [KafkaRecord(destination.name, message.key, message.value, tuple(message.headers))]

    def _dead_letter(self, dead: DeadLetter, deployment: str) -> StageRecord:
        event = dead_letter_event(
            dead.change,
            function=dead.function,
            error=RuntimeError(dead.error),
            stage=dead.stage,
            error_type=dead.error_type or None,
            traceback=dead.traceback,
            type_prefix=self._type_prefix,
            version=self._versions.get(deployment),
        )
        return StageRecord(deployment, _structured(dead.destination.name, event))


def _unencodable(change: RowChange, error: DbusError, deployment: LoadedDeployment) -> DeadLetter:
    return DeadLetter(
        change=change,
        function=f"{deployment.manifest.name} (projection result)",
        error=str(error),
        traceback="",
        destination=deployment.manifest.dead_letter_route,
        stage="projection",
        error_type=type(error).__name__,
    )


class IndexActions:
    """The Elasticsearch writes of row changes: each row is its document.

    The document's ``_id`` is the primary key (a one-column key as its plain value,
    a composite key as its JSON array); a row of a table without a primary key is
    named by its image (``dbus_fn.cloudevent.image_digest`` of the row as captured,
    before projections), so an update deletes the old image's document and writes
    the new one's. Its version grows with the binlog position; a delete removes the
    document. The row is in its JSON form, as the change's
    CloudEvent carries it, so a row reads the same in every sink, with one
    exception: a zero or partial date (``"0000-00-00"``) is ``null``, because a date
    field holds no year 0 or month 0. Rows of one set of column types share their
    codecs, built once. ``dbus fn verify`` builds its expected documents here too.
    """

    _LIMIT = 512

    def __init__(self) -> None:
        self._shapes: dict[tuple[tuple[str, str], ...], _DocumentShape] = {}

    def writes(
        self,
        change: RowChange,
        index: str,
        *,
        dead_letter: str = "",
        original: RowChange | None = None,
    ) -> Iterator[IndexAction]:
        """The writes of one delivered change: its ``build``, after, for an update of a
        table without a primary key whose row image changed, the delete of the
        document of its old image (the row's identity is its image)."""
        action = self.build(change, index, dead_letter=dead_letter, original=original)
        if not change.primary_key and change.op is Operation.UPDATE:
            old, _ = image_digests(original or change)
            if old is not None and old != action.doc_id:
                yield replace(action, doc_id=old, document=None)
        yield action

    def build(
        self,
        change: RowChange,
        index: str,
        *,
        dead_letter: str = "",
        original: RowChange | None = None,
    ) -> IndexAction:
        """The write of the change's row: ``original`` is the change as captured, before
        projections, whose row names the document of a table without a primary key."""
        types: Mapping[str, str] = change.column_types
        encode, calendar = self._shape(types)
        try:
            image = encode(change.row)
        except (ColumnValueError, UnsupportedColumnTypeError):
            image, types = row_json(change)  # infers what the declared types do not fit
            calendar = _calendar_columns(types)
        if not change.primary_key:
            doc_id = row_digest(original or change)
        elif any(name not in image for name in change.primary_key):
            primary_key_text(change)  # raises the event format's error naming the column
            raise AssertionError("unreachable: a missing key column is an error")
        else:
            doc_id = document_id([image[name] for name in change.primary_key])
        return IndexAction(
            index=index,
            doc_id=doc_id,
            # A snapshot row sits between the changes before its position and after.
            version=document_version(
                change.position, 0 if change.op is Operation.SNAPSHOT else change.row_index
            ),
            document=None
            if change.op is Operation.DELETE
            else _without_zero_dates(image, change.row, calendar),
            column_types=types,
            dead_letter=dead_letter,
            change=pickle.dumps(change, protocol=pickle.HIGHEST_PROTOCOL),
        )

    def _shape(self, types: Mapping[str, str]) -> _DocumentShape:
        shape = tuple(types.items())
        found = self._shapes.get(shape)
        if found is None:
            if len(self._shapes) >= self._LIMIT:
                self._shapes.clear()
            found = self._shapes[shape] = (row_encoder(types), _calendar_columns(types))
        return found


# A row encoder, and the DATE/DATETIME/TIMESTAMP columns a zero date may be in.
_DocumentShape = tuple[Callable[..., dict[str, Any]], tuple[str, ...]]


def _calendar_columns(types: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(
        name
        for name, column_type in types.items()
        if column_type.split("(", 1)[0].strip() in ("date", "datetime", "timestamp")
    )


def _without_zero_dates(
    image: dict[str, Any], row: Mapping[str, Any], calendar: tuple[str, ...]
) -> dict[str, Any]:
    """The document of a row: a zero or partial date, held as text in the row (see
    ``dbus_fn.columns``), is ``null``, as no Elasticsearch date holds year 0 or month 0."""
    zero = [name for name in calendar if isinstance(row.get(name), str)]
    return {**image, **dict.fromkeys(zero)} if zero else image


def document_id(key: list[Any]) -> str:
    """A document's ``_id``: a one-column key as its plain value, else its JSON array."""
    single = len(key) == 1 and isinstance(key[0], int | str)
    return str(key[0]) if single else key_json(key)


def index_action(change: RowChange, index: str, *, dead_letter: str = "") -> IndexAction:
    """The Elasticsearch write of one row change (see ``IndexActions``)."""
    return IndexActions().build(change, index, dead_letter=dead_letter)


def refusal_dead_letter(action: IndexAction, reason: str, *, type_prefix: str) -> KafkaRecord:
    """The dead letter of a document Elasticsearch refused, built from the change."""
    change = pickle.loads(action.change)  # written by index_action in this runtime
    event = dead_letter_event(
        change,
        function=f"es://{action.index}",
        error=ValueError(reason),
        stage="sink",
        type_prefix=type_prefix,
    )
    return _structured(action.dead_letter, event)


def _structured(topic: str, event: Any) -> KafkaRecord:
    message = to_kafka_message(event, mode="structured")
    return KafkaRecord(topic, message.key, message.value, tuple(message.headers))


__all__ = [
    "FunctionStage",
    "IndexActions",
    "StageCounts",
    "StageRecord",
    "index_action",
    "refusal_dead_letter",
]
