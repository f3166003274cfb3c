"""The function stage: every captured change, through every deployment that wants it.

One binlog read fans out here. A ``FunctionStage`` is built once per Python worker
process (functions are loaded once per worker, not per row) and turns each change
into sink records: Kafka messages, Elasticsearch actions, and dead letters. One
deployment's failing function sends that event to the deployment's dead-letter
destination and never stops the other deployments.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dbus_fn.cloudevent import primary_key_text, row_json, to_cloudevent
from dbus_fn.deadletter import dead_letter_event
from dbus_fn.events import Operation, RowChange
from dbus_fn.kafka_binding import to_kafka_message
from dbus_fn.manifest import Destination
from dbus_fn.pipeline import DeadLetter, Delivery, Pipeline
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_spark.sinks.elasticsearch import document_version
from dbus_spark.sinks.records import IndexAction, KafkaRecord

log = logging.getLogger(__name__)

Record = KafkaRecord | IndexAction


@dataclass
class StageCounts:
    """What one task did, per deployment; summed on the driver into batch metrics."""

    rows_in: Counter[str] = field(default_factory=Counter)
    delivered: Counter[str] = field(default_factory=Counter)
    filtered: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)


class FunctionStage:
    def __init__(self, deployment_paths: tuple[str, ...], *, type_prefix: str) -> None:
        self.deployments: list[LoadedDeployment] = [load_deployment(p) for p in deployment_paths]
        self._pipelines = [(d, Pipeline(d)) for d in self.deployments]
        self._type_prefix = type_prefix
        self._by_table: dict[tuple[str, str], list[tuple[LoadedDeployment, Pipeline]]] = {}
        self.counts = StageCounts()

    def _subscribers(self, source: str, table: str) -> list[tuple[LoadedDeployment, Pipeline]]:
        found = self._by_table.get((source, table))
        if found is None:
            found = [
                (d, p)
                for d, p in self._pipelines
                if d.subscribes(table) and (not d.manifest.sources or source in d.manifest.sources)
            ]
            self._by_table[(source, table)] = found
        return found

    def process(self, change: RowChange) -> Iterator[Record]:
        for deployment, pipeline in self._subscribers(change.source, change.qualified_table):
            name = deployment.manifest.name
            self.counts.rows_in[name] += 1
            outcome = pipeline.process(change)
            if outcome.filtered:
                self.counts.filtered[name] += 1
            for delivery in outcome.deliveries:
                self.counts.delivered[name] += 1
                yield self._encode(delivery)
            for dead in outcome.dead_letters:
                self.counts.dead[name] += 1
                yield self._dead_letter(dead)

    def _encode(self, delivery: Delivery) -> Record:
        change = delivery.projected()
        if delivery.destination.scheme == "es":
            document, types = row_json(change)
            deleted = change.op is Operation.DELETE
            return IndexAction(
                index=delivery.destination.name,
                doc_id=document_id(delivery.change),
                version=document_version(change.position, change.row_index),
                op="delete" if deleted else "index",
                document=None if deleted else document,
                column_types=types,
                origin=change,
            )
        message = to_kafka_message(to_cloudevent(change, type_prefix=self._type_prefix))
        return KafkaRecord(
            topic=delivery.destination.name,
            key=message.key,
            value=message.value,
            headers=tuple(message.headers),
        )

    def _dead_letter(self, dead: DeadLetter) -> KafkaRecord:
        event = dead_letter_event(
            dead.change,
            function=dead.function,
            error=RuntimeError(dead.error),
            stage=dead.stage,
            error_type=dead.error_type or None,
            traceback=dead.traceback,
            type_prefix=self._type_prefix,
        )
        return dead_letter_record(dead.destination, event, dead.change)

    def refused(self, action: IndexAction, reason: str, destination: Destination) -> KafkaRecord:
        """A document Elasticsearch refused, as a dead letter."""
        change: RowChange = action.origin
        event = dead_letter_event(
            change, function=f"es://{action.index}", error=ValueError(reason), stage="sink"
        )
        return dead_letter_record(destination, event, change)


def dead_letter_record(destination: Destination, event: Any, change: RowChange) -> KafkaRecord:
    message = to_kafka_message(event, mode="structured")
    return KafkaRecord(
        topic=destination.name,
        key=message.key,
        value=message.value,
        headers=tuple(message.headers),
    )


def document_id(change: RowChange) -> str:
    """The Elasticsearch ``_id`` of a row: its primary key.

    A one-column key is its JSON value as text (``42``, ``ada@example.com``); a
    composite key is the JSON array of its values (``[7,"2024-01-01"]``). A table
    without a primary key cannot be kept equal to an index, and is refused.
    """
    if not change.primary_key:
        raise ValueError(
            f"{change.qualified_table} has no primary key; route it to Kafka, not Elasticsearch"
        )
    # The key as captured: a projection may drop or rewrite the key columns.
    text = primary_key_text(change)
    assert text is not None
    values = json.loads(text)
    if len(values) == 1 and isinstance(values[0], int | str):
        return str(values[0])
    return text
