"""How the driver plans a Kafka source's batches (``config.kafka_source`` is the source):
its cluster asked for topics, partitions and offsets (``KafkaPlanner``), where a
source's first batch starts, and how many tasks share a partition's range."""

from __future__ import annotations

import logging

from dbus_fn.errors import ConfigError, PositionError, SourceUnreachableError
from dbus_spark.config.kafka_source import KafkaSource, Offsets, consumer

log = logging.getLogger("dbus_spark.planning.kafka_planner")

TOPICS_WAIT = 5.0
"""Seconds the cluster has to name its topics and partitions."""
OFFSETS_WAIT = 10.0
"""Seconds the cluster has to give one partition's offsets."""


class KafkaPlanner:
    """Asks a Kafka source's cluster for its topics and offsets (the driver's side)."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        self._consumer = consumer(source, planning=True)

    def close(self) -> None:
        self._consumer.close()

    def _unreachable(self, why: object) -> SourceUnreachableError:
        return SourceUnreachableError(
            f"source {self.source.name!r}: Kafka at {self.source.bootstrap} does not answer "
            f"({why}); check that the brokers run and the URL's hosts and ports",
            source=self.source.name,
        )

    def partitions(self, timeout: float = TOPICS_WAIT) -> dict[str, list[int]]:
        """Per topic the patterns match now, its partitions."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._consumer.list_topics(timeout=timeout)
        except KafkaException as exc:
            raise self._unreachable(exc.args[0].str() if exc.args else exc) from None
        return {
            name: sorted(topic.partitions)
            for name, topic in metadata.topics.items()
            if self.source.matches(name) and not name.startswith("__") and topic.error is None
        }

    def check_topics(self) -> None:
        """Every topic named without a pattern exists (``ConfigError`` naming it)."""
        found = self.partitions()
        for topic in self.source.topics:
            if "*" not in topic and "?" not in topic and topic not in found:
                raise ConfigError(
                    f"source {self.source.name!r}: topic {topic!r} does not exist on "
                    f"{self.source.bootstrap}; create it, or name a pattern (orders.*) to "
                    "read the topics it matches as they appear",
                    setting="source",
                )
        if not found:
            log.warning(
                "source %s: no topic on %s matches %s yet; read as they appear",
                self.source.name,
                self.source.bootstrap,
                ",".join(self.source.topics),
            )

    def _watermarks(
        self, topic: str, partition: int, timeout: float = OFFSETS_WAIT
    ) -> tuple[int, int]:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as exc:
            raise self._unreachable(exc.args[0].str() if exc.args else exc) from None
        return int(low), int(high)

    def offsets(self, at: str) -> Offsets:
        """Every partition's first (``earliest``) or next (``latest``) offset now."""
        which = 0 if at == "earliest" else 1
        return {
            topic: {str(p): self._watermarks(topic, p)[which] for p in partitions}
            for topic, partitions in self.partitions().items()
        }

    def at_time(self, moment: float) -> Offsets:
        """Per partition, the first offset of a message at or after ``moment`` (epoch
        seconds; its end when none is)."""
        from confluent_kafka import KafkaException, TopicPartition

        wanted = [
            TopicPartition(topic, p, int(moment * 1000))
            for topic, partitions in self.partitions().items()
            for p in partitions
        ]
        try:
            found = self._consumer.offsets_for_times(wanted, timeout=10) if wanted else []
        except KafkaException as exc:
            raise self._unreachable(exc.args[0].str() if exc.args else exc) from None
        offsets: Offsets = {}
        for part in found:
            offset = part.offset if part.offset >= 0 else self._watermarks(
                part.topic, part.partition)[1]  # fmt: skip
            offsets.setdefault(part.topic, {})[str(part.partition)] = offset
        return offsets

    def replay_bounds(
        self, since: float | None, position: str | None, until: float | None
    ) -> tuple[Offsets, Offsets]:
        """Where a replay of this source starts and ends: from the messages of time
        ``since``, or from ``TOPIC:PARTITION:OFFSET`` (that partition alone), up to the
        messages of time ``until`` or the end now."""
        end = self.at_time(until) if until is not None else self.latest(None)
        if position is None:
            return self.at_time(since or 0.0), end
        topic, _, rest = position.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        if not topic or not partition.isdigit() or not rest.isdigit():
            raise ConfigError(
                f"--from {position!r} is not a time nor TOPIC:PARTITION:OFFSET of Kafka "
                f"source {self.source.name!r}; write dbus.shop.orders:0:1200 or an ISO time",
                setting="from",
            )
        if partition not in end.get(topic, {}):
            raise ConfigError(
                f"--from {position!r}: source {self.source.name!r} reads no partition "
                f"{partition} of a topic {topic!r}; name one it reads",
                setting="from",
            )
        return {topic: {partition: int(rest)}}, {topic: {partition: end[topic][partition]}}

    def latest(self, previous: Offsets | None, *, timeout: float | None = None) -> Offsets:
        """Where each partition ends now (its last stable offset: what a committed read
        sees). A partition the last offsets lacked starts at its first message; one
        they hold below its first (retention deleted what was not read) is refused.
        ``timeout``: at most this long for each answer (else ``TOPICS_WAIT`` and
        ``OFFSETS_WAIT``)."""
        ends: Offsets = {}
        for topic, partitions in self.partitions(timeout or TOPICS_WAIT).items():
            ends[topic] = {}
            for p in partitions:
                low, high = self._watermarks(topic, p, timeout or OFFSETS_WAIT)
                known = (previous or {}).get(topic, {}).get(str(p))
                if known is not None and known < low:
                    raise PositionError(
                        f"source {self.source.name!r}: topic {topic} partition {p} no longer "
                        f"holds offset {known} (its first is {low}): retention deleted "
                        "messages not read yet; start again with a new checkpoint --from "
                        "earliest, and backfill the tables at the origin (dbus fn backfill)",
                        source=self.source.name,
                        position=f"{topic}:{p}@{known}",
                    )
                ends[topic][str(p)] = high
        return ends


def start_offsets(source: KafkaSource, planner: KafkaPlanner) -> Offsets:
    """The offsets a source's first batch starts at: pinned, or what its start means now."""
    if isinstance(source.start, dict):
        return source.start
    return planner.offsets(source.start)


SHARD_MIN_MESSAGES = 2000
"""A partition's range this long or longer may be read by several tasks, each
keeping the messages of its keys (``kafka_shards``)."""


def kafka_shards(messages: int, partitions: int, cores: int) -> int:
    """How many tasks read one partition's range of ``messages``, each keeping its share
    of the keys (a key's messages all in one task, in order): one per core while the
    partitions with messages are too few to keep every core busy alone."""
    if messages < SHARD_MIN_MESSAGES or partitions >= 4 * cores:
        return 1
    return cores
