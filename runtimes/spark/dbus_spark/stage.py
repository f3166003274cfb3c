"""The function stage: every captured change, through every deployment that wants it.

One binlog read fans out here. The stage runs in the same Python worker that
decodes the binlog, so a change is never serialized between capture and the
functions; what leaves the stage is already encoded for the sinks: one
``StageRecord`` per delivery or dead letter, each a CloudEvent in the Kafka
binary binding plus where it goes. A ``FunctionStage`` is built once per worker
process (functions load once per worker, not per row). One deployment's failing
function sends that event to the deployment's dead-letter destination and never
stops the other deployments.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from dbus_fn.deadletter import dead_letter_event
from dbus_fn.errors import DbusError
from dbus_fn.events import RowChange
from dbus_fn.kafka_binding import KafkaMessage, to_kafka_message
from dbus_fn.pipeline import DeadLetter, Pipeline
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_spark.sinks.records import RecordType

_SINK_RECORD = {"kafka": RecordType.KAFKA, "es": RecordType.ELASTICSEARCH}
"""The record type of a destination's scheme."""


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One encoded output of the stage: a CloudEvent bound for one destination.

    ``record_type`` names the sink (``KAFKA`` or ``ELASTICSEARCH``); dead letters are
    Kafka records to the deployment's dead-letter topic. ``dead_letter`` is where a
    record the sink refuses (a document Elasticsearch rejects) goes.
    """

    record_type: RecordType
    deployment: str
    destination: str
    message: KafkaMessage
    dead_letter: str


@dataclass
class StageCounts:
    """What the stage did, per deployment; summed on the driver into batch metrics."""

    rows: int = 0
    ddl: int = 0
    read_seconds: float = 0.0
    started: float = 0.0
    """Epoch seconds the earliest read began."""
    delivered: Counter[str] = field(default_factory=Counter)
    filtered: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)
    positions: dict[str, str] = field(default_factory=dict)
    """Per source, the position the batch read up to."""
    last_commit: dict[str, float] = field(default_factory=dict)
    """Per source, the commit time (epoch seconds) of the newest transaction read."""

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "rows": self.rows,
                "ddl": self.ddl,
                "read_seconds": self.read_seconds,
                "started": self.started,
                "delivered": self.delivered,
                "filtered": self.filtered,
                "dead": self.dead,
                "positions": self.positions,
                "last_commit": self.last_commit,
            }
        ).encode()

    def add_json(self, data: bytes) -> None:
        self.add(StageCounts.from_json(data))

    @classmethod
    def from_json(cls, data: bytes) -> StageCounts:
        counts = json.loads(data)
        return cls(
            rows=counts["rows"],
            ddl=counts["ddl"],
            read_seconds=counts["read_seconds"],
            started=counts.get("started", 0.0),
            delivered=Counter(counts["delivered"]),
            filtered=Counter(counts["filtered"]),
            dead=Counter(counts["dead"]),
            positions=counts.get("positions", {}),
            last_commit=counts.get("last_commit", {}),
        )

    def add(self, other: StageCounts) -> None:
        """Fold another task's counts into these (the shards of one source included)."""
        self.rows += other.rows
        self.ddl += other.ddl
        self.read_seconds = max(self.read_seconds, other.read_seconds)
        if other.started:
            self.started = min(self.started or other.started, other.started)
        self.delivered.update(other.delivered)
        self.filtered.update(other.filtered)
        self.dead.update(other.dead)
        self.positions.update(other.positions)
        for source, moment in other.last_commit.items():
            self.last_commit[source] = max(self.last_commit.get(source, 0.0), moment)


class FunctionStage:
    def __init__(self, deployment_paths: tuple[str, ...], *, type_prefix: str) -> None:
        self.deployments: list[LoadedDeployment] = [load_deployment(p) for p in deployment_paths]
        self._pipelines = [(d, Pipeline(d)) for d in self.deployments]
        self._type_prefix = type_prefix
        self._subscribed: dict[tuple[str, str], list[tuple[LoadedDeployment, Pipeline]]] = {}

    def _subscribers(self, source: str, table: str) -> list[tuple[LoadedDeployment, Pipeline]]:
        found = self._subscribed.get((source, table))
        if found is None:
            found = [
                (d, p)
                for d, p in self._pipelines
                if d.subscribes(table) and (not d.manifest.sources or source in d.manifest.sources)
            ]
            self._subscribed[(source, table)] = found
        return found

    def process(self, change: RowChange, counts: StageCounts) -> Iterator[StageRecord]:
        counts.rows += 1
        for deployment, pipeline in self._subscribers(change.source, change.qualified_table):
            name = deployment.manifest.name
            dead_route = str(deployment.manifest.dead_letter_route)
            outcome = pipeline.process(change)
            if outcome.filtered:
                counts.filtered[name] += 1
            dead = list(outcome.dead_letters)
            encoded: list[StageRecord] = []
            for delivery in outcome.deliveries:
                try:
                    message = to_kafka_message(delivery.projected(), type_prefix=self._type_prefix)
                except DbusError as exc:
                    # A projection's result the event format cannot carry (its key
                    # columns gone, say) is that function's failure, not the runtime's.
                    dead = [_unencodable(delivery.change, exc, deployment)]
                    encoded = []
                    break
                encoded.append(
                    StageRecord(
                        _SINK_RECORD[delivery.destination.scheme], name,
                        delivery.destination.name, message,
                        dead_route,
                    )
                )  # fmt: skip
            counts.delivered[name] += len(encoded)
            yield from encoded
            for letter in dead:
                counts.dead[name] += 1
                yield self._dead_letter(letter, name)

    def _dead_letter(self, dead: DeadLetter, deployment: str) -> StageRecord:
        event = dead_letter_event(
            dead.change,
            function=dead.function,
            error=RuntimeError(dead.error),
            stage=dead.stage,
            error_type=dead.error_type or None,
            traceback=dead.traceback,
            type_prefix=self._type_prefix,
        )
        message = to_kafka_message(event, mode="structured")
        return StageRecord(RecordType.KAFKA, deployment, dead.destination.name, message, "")


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


def dead_letter_for_refusal(
    message: KafkaMessage, *, sink: str, reason: str, type_prefix: str
) -> KafkaMessage:
    """A dead letter for an event a sink refused (a document Elasticsearch rejects)."""
    from dbus_fn.cloudevent import from_cloudevent
    from dbus_fn.kafka_binding import from_kafka_message

    change = from_cloudevent(from_kafka_message(message.key, message.value, message.headers))
    event = dead_letter_event(
        change, function=sink, error=ValueError(reason), stage="sink", type_prefix=type_prefix
    )
    return to_kafka_message(event, mode="structured")


__all__ = ["FunctionStage", "StageCounts", "StageRecord", "dead_letter_for_refusal"]
