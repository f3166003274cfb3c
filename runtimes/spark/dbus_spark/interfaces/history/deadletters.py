"""Dead letters of a deployment: list them, and redrive them through its current version.

A dead letter (``dbus_fn.deadletter``) records a change a function could not
process: the function, the stage, the error, the key, the position and the
deployment's version. `dbus fn deadletters` lists what the deployment's
dead-letter topic holds.

`dbus fn redrive` sends the dead-lettered rows through the deployment's current
version by the same path as `verify --repair`: the running runtime reads each
dead-lettered key's row as it is now, in a consistent snapshot merged with the
live stream, so a redriven row never lands after a newer change of its key; a
dead-lettered delete whose row is still gone is delivered as a delete where the
current version routes it. Rows that fail again go to the dead letters again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from dbus_fn.cloudevent import from_cloudevent
from dbus_fn.deadletter import original_from_dead_letter
from dbus_fn.errors import DbusError, HistoryError
from dbus_fn.events import Operation
from dbus_fn.kafka_binding import from_kafka_message
from dbus_fn.pipeline import Pipeline
from dbus_fn.registry import LoadedDeployment
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.history.target import deployment_named, runtime_at
from dbus_spark.state.checkpoint import progress_path


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    time: datetime
    function: str
    stage: str
    error: str
    key: str
    position: str
    version: str
    event: Any
    """The dead letter's CloudEvent."""

    def line(self) -> str:
        return (f"{self.time:%Y-%m-%d %H:%M:%S} {self.version or '-'} {self.function} "
                f"[{self.stage}] key={self.key} at {self.position}: {self.error}")  # fmt: skip


def _entries(config: RuntimeConfig, deployment: LoadedDeployment) -> Iterator[DeadLetterEntry]:
    """Every dead letter of the deployment's dead-letter topic, oldest first."""
    from confluent_kafka import Consumer, TopicPartition

    topic = deployment.manifest.dead_letter_route.name
    consumer = Consumer({
        "bootstrap.servers": config.kafka_bootstrap, "group.id": f"dbus-dlq-{time.time_ns()}",
        "enable.auto.commit": False, "isolation.level": "read_committed",
    })  # fmt: skip
    try:
        metadata = consumer.list_topics(timeout=10).topics.get(topic)
        if metadata is None:
            return
        for number in sorted(metadata.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, number), timeout=10)
            if low >= high:
                continue
            consumer.assign([TopicPartition(topic, number, low)])
            offset = low
            while offset < high:
                for msg in consumer.consume(1000, 1.0):
                    if msg.error():
                        continue
                    offset = msg.offset() + 1
                    try:
                        event = from_kafka_message(msg.key(), msg.value(), msg.headers())
                    except DbusError:
                        continue  # not a dead letter of ours
                    yield _entry(event)
    finally:
        consumer.close()


def _entry(event: Any) -> DeadLetterEntry:
    data = event.get_data() if isinstance(event.get_data(), dict) else {}
    error = data.get("error") or {}
    position = data.get("position") or {}
    message = str(error.get("message", "")).splitlines()[0] if error.get("message") else ""
    return DeadLetterEntry(
        time=datetime.fromisoformat(str(event.get_attributes().get("time")).replace("Z",
                                                                                     "+00:00")),
        function=str(data.get("function", "")),
        stage=str(data.get("stage", "")),
        error=f"{error.get('type', '')}: {message}".strip(": "),
        key=str(event.get_attributes().get("subject", "-")),
        position=f"{position.get('file')}:{position.get('pos')}",
        version=str(data.get("version") or ""),
        event=event,
    )  # fmt: skip


def dead_letters(
    deployment_name: str,
    *,
    checkpoint: str | None = None,
    since: datetime | None = None,
    out: IO[str],
) -> list[DeadLetterEntry]:
    """Print the deployment's dead letters (since ``since``), one line each."""
    folder, config = runtime_at(checkpoint)
    deployment = deployment_named(folder, config, deployment_name)
    found = [e for e in _entries(config, deployment) if since is None or e.time >= since]
    topic = deployment.manifest.dead_letter_route
    print(f"{len(found)} dead letter(s) of {deployment_name} in {topic}", file=out)
    for entry in found:
        print(entry.line(), file=out)
    return found


def redrive(
    deployment_name: str,
    *,
    checkpoint: str | None = None,
    since: datetime | None = None,
    wait: bool = True,
    out: IO[str],
    token: str | None = None,
) -> list[Any]:
    """Send the dead-lettered rows (since ``since``) through the current version."""
    from dbus_spark.interfaces.history.follow import ANSWER_TIMEOUT, ask, follow
    from dbus_spark.planning.request_models import Delete, RepairItem, RepairRequest
    from dbus_spark.state.history.tasks import HistoryStore

    folder, config = runtime_at(checkpoint)
    deployment = deployment_named(folder, config, deployment_name)
    began = datetime.now(UTC)
    pipeline = Pipeline(deployment)
    redriven: set[str] = set()
    keys: dict[tuple[str, str], dict[str, Any]] = {}
    deletes: dict[tuple[str, str], set[tuple[str, str]]] = {}
    count = 0
    for entry in _entries(config, deployment):
        if since is not None and entry.time < since:
            continue
        try:
            change = from_cloudevent(original_from_dead_letter(entry.event))
        except DbusError:
            continue  # recorded by position only: nothing to read it by
        count += 1
        redriven.add(entry.key)
        where = (change.source, change.qualified_table)
        values = list(change.key)
        keys.setdefault(where, {})[json.dumps(values, default=str)] = _key_json(values)
        if change.op is Operation.DELETE:
            for delivery in pipeline.process(change).deliveries:
                document, message = _texts(change)
                text = document if delivery.destination.scheme == "es" else message
                deletes.setdefault(where, set()).add((str(delivery.destination), text))
    if not count:
        print(f"no dead letters of {deployment_name} to redrive", file=out)
        return []
    request = RepairRequest(
        deployment_name,
        tuple(RepairItem(source, table, tuple(keys[(source, table)].values()),
                         tuple(Delete(*d) for d in sorted(deletes.get((source, table), ()))))
              for source, table in keys),
    )
    reply = ask(folder, request, "redrive", answer_timeout=ANSWER_TIMEOUT, token=token)
    print(f"redrive of {deployment_name}: {count} dead letter(s), {reply.message}", file=out)
    if not wait:
        return []
    done = follow(HistoryStore(progress_path(folder)), reply.tasks, out=out)
    # The reads are committed with their batch, after its dead letters were written.
    again = [e for e in _entries(config, deployment) if e.time >= began and e.key in redriven]
    if again:
        raise FailedAgainError(
            f"{len(again)} redriven row(s) of {deployment_name} failed again and are dead "
            f"letters again (first: {again[0].function} [{again[0].stage}] key={again[0].key}: "
            f"{again[0].error}); see `dbus fn deadletters {deployment_name} --since "
            f"{began:%Y-%m-%dT%H:%M:%S}`, fix the function, deploy it, then redrive again",
            count=len(again),
        )
    return done


class FailedAgainError(DbusError, RuntimeError):
    """Rows a redrive sent through the current version failed again (dead letters again)."""

    exit_code = 1

    def __init__(self, message: str, *, count: int) -> None:
        super().__init__(message)
        self.count = count


def _key_json(values: list[Any]) -> Any:
    from dbus_fn.capture import key_to_json

    return key_to_json(tuple(values))


def _texts(change: Any) -> tuple[str, str]:
    from dbus_fn.cloudevent import primary_key_text
    from dbus_spark.stage.documents import IndexActions

    return IndexActions().build(change, "-").doc_id, primary_key_text(change) or ""


def parse_since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise HistoryError(
            f"--since {text!r} is not a time; write it as 2026-11-25T08:00:00 (UTC unless it "
            "says)"
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    if moment > datetime.now(UTC):
        raise HistoryError(
            f"--since {text} is in the future (times are UTC unless they say), so no dead "
            "letter can be that recent; give a time that has passed"
        )
    return moment


__all__ = ["DeadLetterEntry", "FailedAgainError", "dead_letters", "parse_since", "redrive"]
