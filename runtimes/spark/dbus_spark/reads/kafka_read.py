"""A ``KafkaRange`` read on an executor (``dbus_spark.config.kafka_source``): one partition
of one topic, in order, every change through the function stage to the sinks as it
is read; Spark gets its counts."""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from dbus_fn.errors import DbusError, SourceUnreachableError
from dbus_fn.events import RowChange
from dbus_fn.kafka_binding import change_from_kafka_message
from dbus_spark.config.kafka_source import KAFKA, OUTAGE_SECONDS, KafkaSource, consumer, ranges
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.reads.history_chunks import ReplayRange, replay_lane
from dbus_spark.reads.replay_window import ReplayWindow
from dbus_spark.reads.task import ReadTask
from dbus_spark.stage.functions import FunctionStage, StageRecord
from dbus_spark.state.history import ReplayPart


@dataclass(frozen=True)
class KafkaRange(InputPartition):  # type: ignore[misc]
    """One partition of one topic of a Kafka source, from ``first`` up to ``end``."""

    shipment: Any
    source: str
    topic: str
    partition: int
    first: int
    end: int
    shard: int = 0
    shards: int = 1
    """This task keeps the messages whose key hashes to ``shard`` of ``shards``."""

    def keeps(self, key: bytes | None) -> bool:
        return self.shards == 1 or zlib.crc32(key or b"") % self.shards == self.shard


_consumers: dict[str, Any] = {}
"""Per Kafka source (and its settings), this worker's consumer: kept across tasks, as
a binlog reader is (``worker.worker_reader``); each task assigns it its partition."""


def _consumer(source: KafkaSource) -> Any:
    key = json.dumps(source.to_json(), sort_keys=True, default=str)
    found = _consumers.get(key)
    if found is None:
        found = _consumers[key] = consumer(source)
    return found


def _drop(source: KafkaSource) -> None:
    key = json.dumps(source.to_json(), sort_keys=True, default=str)
    found = _consumers.pop(key, None)
    if found is not None:
        found.close()


QUIET_SECONDS = 60.0
"""How long a read waits for a partition whose cluster answers but that gives nothing
(its planned messages gone) before it fails. A cluster that does not answer is waited
for up to ``OUTAGE_SECONDS``, as the planner waits for it, and the partition has this
long again from when it answers."""
AWAY_CHECK_SECONDS = 2.0
"""A partition that gave nothing this long has its cluster asked whether it answers."""


def _away(reader: Any, part: KafkaRange) -> bool:
    """Whether the cluster does not answer at all (the client connects again itself)."""
    from confluent_kafka import KafkaException

    try:
        reader.list_topics(part.topic, timeout=2)
    except KafkaException:
        return True
    return False


def read_messages(source: KafkaSource, part: KafkaRange) -> Iterator[Any]:
    """The messages of ``part``, in order, up to its end (a producer's aborted
    transactions and markers skipped by the committed read)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    reader = _consumer(source)
    ended = False
    try:
        reader.assign([TopicPartition(part.topic, part.partition, part.first)])
        position, idle_since = part.first, time.monotonic()
        away_at = 0.0  # when the cluster last did not answer (0: it did)
        while position < part.end:
            messages = reader.consume(500, timeout=1.0)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise SourceUnreachableError(
                        f"source {source.name!r}: reading {part.topic}[{part.partition}] "
                        f"on {source.bootstrap}: {error.str()}",
                        source=source.name,
                    )
                if message.offset() >= part.end:
                    ended = True
                    return
                yield message
            [where] = reader.position([TopicPartition(part.topic, part.partition)])
            if where.offset >= 0:
                position = max(position, where.offset)
            now = time.monotonic()
            if messages:
                idle_since = now
            elif now - idle_since > AWAY_CHECK_SECONDS and _away(reader, part):
                away_at = now  # the client connects again itself: wait for it
            if now - max(idle_since, away_at) > QUIET_SECONDS or (
                now - idle_since > OUTAGE_SECONDS
            ):
                raise SourceUnreachableError(
                    f"source {source.name!r}: {part.topic}[{part.partition}] gave nothing "
                    f"for {now - idle_since:.0f} s at offset {position} (planned up to "
                    f"{part.end}); check the brokers at {source.bootstrap}",
                    source=source.name,
                )
        ended = True
    except KafkaException as exc:
        raise SourceUnreachableError(
            f"source {source.name!r}: Kafka at {source.bootstrap}: {exc}", source=source.name
        ) from None
    finally:
        if ended:
            reader.unassign()
        else:  # a fault, or a read given up: the next task starts from a fresh consumer
            _drop(source)


def change_of(source: str, message: Any) -> RowChange | None:
    """The row change a message holds, named after the input; None for a schema change or
    a commit (not a row). ``DbusError`` when it is not a dbus CloudEvent."""
    item = change_from_kafka_message(message.key(), message.value(), message.headers(),
                                     source=source)  # fmt: skip
    return item if isinstance(item, RowChange) else None


def read_kafka_range(
    part: KafkaRange, config: RuntimeConfig, stage: FunctionStage
) -> Iterator[pa.RecordBatch]:
    """Read one partition's range through the function stage to the sinks; Spark gets
    the read's counts (as a binlog range's, ``range_read``)."""
    source = config.kafka_source(part.source)
    task = ReadTask(part.source)
    counts = task.counts
    # Its partition is its lane (read whole when writes are exactly once), and a
    # message's offset its order.
    lane = f"{part.topic}/{part.partition}" if part.shards == 1 else None
    task.deliver_to(config, stage, paced=False, lane=lane)
    counts.positions[part.source] = f"{part.topic}[{part.partition}]@{part.end}"

    def records(message: Any) -> Iterable[StageRecord]:
        if not part.keeps(message.key()):
            return ()
        try:
            change = change_of(part.source, message)
        except DbusError as exc:
            counts.rows += 1
            return stage.input_dead_letters(part.source, message, exc, counts)
        if change is None:
            return ()
        counts.last_commit[part.source] = change.commit_time.timestamp()
        return stage.process(change, counts)

    task.deliver(read_messages(source, part), records, order=_offset)
    task.read_done()
    task.settle()  # unpaced: every deployment's writes acknowledged
    yield from task.rows()


def _offset(message: Any) -> int:
    return int(message.offset())


def read_kafka_replay(
    part: ReplayRange, config: RuntimeConfig, stage: FunctionStage
) -> Iterator[pa.RecordBatch]:
    """A part of a replay of a Kafka source (``dbus fn replay``): what its topics keep
    from the replay's cursor, partition after partition, each in order, through one
    deployment (to ``--route`` when given), up to ``REPLAY_ROWS`` rows; the cursor it
    reached goes back with the counts (``HistoryStore.record_replays``)."""
    source = config.kafka_source(part.source)
    task = ReadTask(part.source)
    if stage.has_deployment(part.deployment):
        counts = task.counts
        sinks = task.deliver_to(config, stage, paced=False, lane=replay_lane(part)).sinks
        window = ReplayWindow(stage, part.deployment, counts, route=part.route,
                              since=part.since, until=part.until)  # fmt: skip
        cursor = {topic: dict(offsets) for topic, offsets in part.start[KAFKA].items()}
        end = part.stop[KAFKA]

        def records(message: Any) -> Iterable[StageRecord] | None:
            if window.full():
                return None  # read up to here: the cursor stays before this one
            cursor.setdefault(message.topic(), {})[str(message.partition())] = (
                message.offset() + 1
            )
            try:
                change = change_of(part.source, message)
            except DbusError:
                return ()  # a dead letter when the stream read it
            return () if change is None else window.records(change)

        for topic, partition, first, last in ranges(cursor, end):
            if window.full():
                break
            read = KafkaRange(None, part.source, topic, partition, first, last)
            # Each partition its lane, its offsets the order (as the stream's read).
            sinks.move_to(replay_lane(part, f"{topic}/{partition}"))
            if not task.deliver(read_messages(source, read), records, order=_offset):
                break
            cursor.setdefault(topic, {})[str(partition)] = last
        task.read_done()
        task.settle()
        ended = not ranges(cursor, end)
        counts.replays.append(ReplayPart(
            part.source, part.deployment, part.run, part.start, {KAFKA: cursor}, window.rows,
            ended,
        ))  # fmt: skip
    yield from task.rows()
