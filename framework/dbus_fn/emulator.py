"""Local emulation: a deployment's functions over recorded events, no Spark, no services.

The emulator reads CloudEvents (one per line, as ``dbus source record`` writes
them, or a single event) or a live binlog through the capture code (which needs
the ``capture`` extra), turns each row event back into a ``RowChange``, runs
the deployment's ``Pipeline`` over it and reports what would go where: each
delivery as the CloudEvent a sink would receive, and each dead letter as the
dead-letter CloudEvent. Transaction and schema markers in the input pass by
(they are counted, not run: functions only see row changes).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX, CloudEvent, item_from_cloudevent, to_cloudevent
from dbus_fn.deadletter import capture_dead_letter, dead_letter_event
from dbus_fn.errors import DbusError, EventFormatError
from dbus_fn.events import BinlogPosition, RowChange, UndecodedRows
from dbus_fn.json_format import MAX_EVENT_BYTES, event_from_json, event_to_json, read_jsonl
from dbus_fn.manifest import Destination
from dbus_fn.pipeline import DeadLetter, Delivery, Outcome, Pipeline, PipelineStats
from dbus_fn.registry import LoadedDeployment

if TYPE_CHECKING:
    from dbus_fn.capture import SourceSpec

__all__ = [
    "EmulatedRecord",
    "EmulationReport",
    "Emulator",
    "dead_letter_cloudevent",
    "delivery_cloudevent",
    "read_event_file",
]


@dataclass(frozen=True, slots=True)
class EmulatedRecord:
    """One thing a sink would receive: a CloudEvent for a destination."""

    destination: Destination
    event: CloudEvent
    dead_letter: bool = False
    error: str | None = None
    """For a dead letter, the one-line error."""

    def to_json(self) -> dict[str, Any]:
        """``{"destination", "dead_letter", "error"?, "event"}``, the event in its
        structured JSON form."""
        record: dict[str, Any] = {
            "destination": str(self.destination),
            "dead_letter": self.dead_letter,
        }
        if self.error is not None:
            record["error"] = self.error
        record["event"] = json.loads(event_to_json(self.event))
        return record


@dataclass(slots=True)
class EmulationReport:
    """What an emulation run did."""

    events: int = 0
    """Row events run through the functions."""
    markers: int = 0
    """Transaction and schema events passed by."""
    deliveries: int = 0
    dead_letters: int = 0
    filtered: int = 0
    """Row events a filter dropped (or that no function chain took)."""
    unsubscribed: dict[str, int] = field(default_factory=dict)
    """Row events of tables the manifest's ``tables`` do not name, per table."""
    stats: PipelineStats | None = None
    records: list[EmulatedRecord] = field(default_factory=list)

    def summary(self) -> str:
        parts = [
            f"{self.events} row event{'s' if self.events != 1 else ''}",
            f"{self.deliveries} deliver{'ies' if self.deliveries != 1 else 'y'}",
            f"{self.filtered} filtered",
            f"{self.dead_letters} dead-lettered",
        ]
        if self.unsubscribed:
            parts.append(self.unsubscribed_note())
        if self.markers:
            parts.append(f"{self.markers} transaction/schema markers passed by")
        return ", ".join(parts)

    def unsubscribed_note(self) -> str:
        """What was skipped for its table, and how to take it in."""
        count = sum(self.unsubscribed.values())
        them = "them" if len(self.unsubscribed) > 1 else "it"
        return (
            f"{count} event{'s' if count != 1 else ''} skipped: the deployment does not "
            f"subscribe to {', '.join(sorted(self.unsubscribed))} (add {them} to tables in "
            f"dbus.toml to run {them})"
        )


def delivery_cloudevent(
    delivery: Delivery, *, type_prefix: str = DEFAULT_TYPE_PREFIX
) -> CloudEvent:
    """The CloudEvent a sink receives for a delivery: the projected change."""
    return to_cloudevent(delivery.projected(), type_prefix=type_prefix)


def dead_letter_cloudevent(
    dead: DeadLetter, *, type_prefix: str = DEFAULT_TYPE_PREFIX
) -> CloudEvent:
    """The dead-letter CloudEvent of a dead letter: original event, position,
    function, stage, error and traceback summary."""
    return dead_letter_event(
        dead.change,
        function=dead.function,
        error=dead.error,
        stage=dead.stage,
        error_type=dead.error_type or None,
        traceback=dead.traceback or None,
        type_prefix=type_prefix,
    )


def read_event_file(path: str | Path) -> CloudEvent:
    """One CloudEvent from a file holding one JSON event (pretty-printed or not).

    At most one byte past ``MAX_EVENT_BYTES`` is read: a larger file is refused, and
    a device such as /dev/zero is not read on without end."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_EVENT_BYTES + 1)
    except OSError as exc:
        raise EventFormatError(
            f"{file}: cannot read the event file ({exc.strerror}); expected a JSON CloudEvent",
            problems=(str(exc),),
            where=str(file),
        ) from None
    return event_from_json(data, where=str(file))


class Emulator:
    """Runs one deployment over events the way the runtime would, reporting records."""

    def __init__(
        self, deployment: LoadedDeployment, *, type_prefix: str = DEFAULT_TYPE_PREFIX
    ) -> None:
        self.deployment = deployment
        self.type_prefix = type_prefix
        self.pipeline = Pipeline(deployment)
        self.report = EmulationReport()

    def run_events(self, events: Iterable[CloudEvent]) -> Iterator[EmulatedRecord]:
        """Records for CloudEvents; markers pass by, a malformed event raises."""
        for event in events:
            item = item_from_cloudevent(event)
            if not isinstance(item, RowChange):
                self.report.markers += 1
                continue
            yield from self.run_change(item)

    def run_change(self, change: RowChange) -> Iterator[EmulatedRecord]:
        """Records for one row change."""
        outcome = self.pipeline.process(change)
        table = change.qualified_table
        if self.deployment.subscribes(table):
            self._count(outcome)
        else:  # the runtime would never read it; not something a filter dropped
            self.report.events += 1
            self.report.unsubscribed[table] = self.report.unsubscribed.get(table, 0) + 1
        for delivery in outcome.deliveries:
            try:
                event = delivery_cloudevent(delivery, type_prefix=self.type_prefix)
            except DbusError as exc:
                # A payload with no event form (a value that fits no column
                # type): the sink would refuse it; report it as a dead letter.
                yield self._unencodable(delivery, exc)
                continue
            yield EmulatedRecord(delivery.destination, event)
        for dead in outcome.dead_letters:
            yield EmulatedRecord(
                dead.destination,
                dead_letter_cloudevent(dead, type_prefix=self.type_prefix),
                dead_letter=True,
                error=dead.error,
            )

    def _undecoded(self, rows: UndecodedRows) -> EmulatedRecord:
        """Rows the capture could not decode: a dead letter, as the runtime sends it."""
        self.report.dead_letters += 1
        return EmulatedRecord(
            self.deployment.manifest.dead_letter_route,
            capture_dead_letter(rows, type_prefix=self.type_prefix),
            dead_letter=True,
            error=rows.reason,
        )

    def _unencodable(self, delivery: Delivery, exc: DbusError) -> EmulatedRecord:
        self.report.dead_letters += 1
        message = (
            f"the payload for {delivery.destination} has no CloudEvent form: {exc}; "
            "expected the projection to return values of the documented column types"
        )
        dead = DeadLetter(
            delivery.change,
            f"{self.deployment.name} encoder",
            message,
            "",
            self.deployment.manifest.dead_letter_route,
            stage="encode",
            user_error=False,
            error_type=type(exc).__name__,
        )
        return EmulatedRecord(
            dead.destination,
            dead_letter_cloudevent(dead, type_prefix=self.type_prefix),
            dead_letter=True,
            error=message,
        )

    def run_source(
        self,
        spec: SourceSpec,
        *,
        start: str | BinlogPosition = "latest",
        idle_timeout: float | None = None,
        replica_id: int | None = None,
    ) -> Iterator[EmulatedRecord]:
        """Records for the changes of a live binlog, read with the capture code.

        Reads from ``start`` (``latest``, ``earliest``, ``snapshot`` or a position) until
        ``idle_timeout`` seconds pass without a change (``None``: until stopped).
        The reader replicates with a ``replica_id`` (server_id) of its own, so it never
        collides with a runtime reading the same server.
        """
        from dbus_fn.capture import BinlogReader, replica_id_for

        reader = BinlogReader(
            spec,
            replica_id=replica_id
            or replica_id_for(f"emulator/{self.deployment.name}/{uuid.uuid4()}"),
        )
        try:
            for item in reader.read(start, idle_timeout=idle_timeout):
                if isinstance(item, RowChange):
                    yield from self.run_change(item)
                elif isinstance(item, UndecodedRows):
                    if self.deployment.subscribes(item.qualified_table):
                        yield self._undecoded(item)
                else:
                    self.report.markers += 1
        finally:
            reader.close()

    def run_file(self, path: str | Path) -> Iterator[EmulatedRecord]:
        """Records for a JSONL file of CloudEvents."""
        file = Path(path)
        if not file.is_file():
            raise EventFormatError(
                f"{file}: no such events file; expected JSONL, one CloudEvent per line "
                "(record some with `dbus source record`)",
                problems=("missing file",),
                where=str(file),
            )
        return self.run_events(read_jsonl(file))

    def _count(self, outcome: Outcome) -> None:
        report = self.report
        report.events += 1
        report.deliveries += len(outcome.deliveries)
        report.dead_letters += len(outcome.dead_letters)
        report.filtered += outcome.filtered

    def close(self) -> EmulationReport:
        """Stop the pipeline; the report, with the pipeline's stats."""
        self.report.stats = self.pipeline.stats()
        self.pipeline.close()
        return self.report
