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
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from dbus_fn.cloudevent import (
    partition_key,
)
from dbus_fn.deadletter import capture_dead_letter, dead_letter_event, input_dead_letter
from dbus_fn.errors import (
    DbusError,
)
from dbus_fn.events import RowChange, UndecodedRows
from dbus_fn.kafka_binding import to_kafka_message
from dbus_fn.manifest import Destination
from dbus_fn.outcomes import Delivery
from dbus_fn.pipeline import DeadLetter, Pipeline
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_spark.config.routes import Routes, routes_of
from dbus_spark.config.runtime import DeploymentFolder
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.documents import IndexActions
from dbus_spark.stage.shipment import shipped_packages
from dbus_spark.state.history import Gate
from dbus_spark.state.progress import (
    Admission,
)
from dbus_spark.state.records import IndexAction, KafkaRecord


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One output of the stage for one deployment: a Kafka record (a delivery or a
    dead letter to the deployment's dead-letter topic) or an Elasticsearch write."""

    deployment: str
    record: KafkaRecord | IndexAction


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
    "StageRecord",
    "refusal_dead_letter",
]
