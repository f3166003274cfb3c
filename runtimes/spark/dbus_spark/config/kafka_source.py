"""Kafka topics of CloudEvents as a source, beside the binlog sources.

``--source dc2=kafka://broker1:9092,broker2:9092/dbus.shop.*,orders`` names a
source whose changes are the row-change CloudEvents (Kafka binding, binary or
structured: what dbus writes, or anything that writes them) in the topics the
patterns match, on that cluster. Query parameters are the consumer's librdkafka
settings (``?security.protocol=SASL_SSL&sasl.password_env=DC2_PASSWORD``; a key
ending ``_env`` takes its value from that environment variable of the process
that reads; a login before the brokers, ``user:password@``, is refused). dbus keeps
the group, commits and isolation to itself.

The same functions run over those events: a deployment subscribes to the source
by name (``sources = ["dc2"]`` in ``dbus.toml``) and to its tables as always. An
event keeps its id, position and row; its source becomes the input's name.

Positions are the topics' offsets, one per partition, kept in the batch's offset
(``{"dc2": {"kafka": {"topic": {"0": 120}}}}``) and committed with it, so a batch
replayed after a crash reads the same messages again (at least once, as the
binlog). One task reads one partition in order (a busy partition, while
the partitions are few, is read by several tasks, each keeping the messages of its
share of the keys, told apart by the key's bytes before any decoding): a key's
changes, in one partition, stay in order. Messages are read ``read_committed``: a producer's
aborted transaction is never a change. A topic a pattern matches later is read
from its start. A message that is not a row-change CloudEvent goes to the dead
letters of every deployment subscribed to the source, with its topic, partition
and offset; the read goes on.

Here the source, its consumer and the ranges of offsets between two positions;
``planning.kafka_planner`` asks its cluster for offsets on the driver, and
``reads.kafka_read`` reads on the executors.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import field
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import parse_qsl, unquote

from pydantic.dataclasses import dataclass

from dbus_fn.capture import redact_dsn
from dbus_fn.errors import ConfigError
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.config.logs import kafka_config

SCHEME = "kafka://"
KAFKA = "kafka"
"""The key of a Kafka source's offsets in a batch's offset (module docstring)."""
OUTAGE_SECONDS = 300.0
"""How long a source's brokers may not answer, its planning and its reads waiting for
them, before the runtime stops: as long as a binlog source's reader reconnects."""
OWNED_SETTINGS = frozenset(
    {"bootstrap.servers", "group.id", "enable.auto.commit", "isolation.level",
     "enable.partition.eof", "auto.offset.reset", "enable.auto.offset.store"}
)  # fmt: skip
"""Consumer settings dbus sets itself: offsets live in the runtime's checkpoint."""

Offsets = dict[str, dict[str, int]]
"""Per topic, per partition (as text, JSON's keys), the next offset to read."""


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class KafkaSource(JsonForm):
    """A source of CloudEvents in Kafka topics (module docstring)."""

    name: str
    bootstrap: str
    topics: tuple[str, ...]
    """Topic names and ``*`` patterns."""
    settings: Mapping[str, str] = field(default_factory=dict)
    start: str | Offsets = "latest"
    """``earliest``, ``latest`` or, once a runtime pinned it, the offsets it meant."""

    def matches(self, topic: str) -> bool:
        return any(fnmatchcase(topic, pattern) for pattern in self.topics)

    def consumer_settings(self) -> dict[str, Any]:
        """The librdkafka settings to read with, each ``KEY_env`` resolved here."""
        settings: dict[str, Any] = {}
        for key, value in self.settings.items():
            if key.endswith("_env"):
                found = os.environ.get(value)
                if found is None:
                    raise ConfigError(
                        f"source {self.name!r}: setting {key} names the environment variable "
                        f"{value}, which is not set; export it where the runtime runs",
                        setting="source",
                    )
                settings[key.removesuffix("_env")] = found
            else:
                settings[key] = value
        return {
            **settings,
            "bootstrap.servers": self.bootstrap,
            "group.id": f"dbus-source-{self.name}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }


def is_kafka_url(dsn: str) -> bool:
    return dsn.strip().lower().startswith(SCHEME)


def parse_kafka_source(name: str, url: str, start: str = "latest") -> KafkaSource:
    """``kafka://HOST:PORT[,HOST:PORT]/TOPIC[,TOPIC][?SETTING=VALUE&...]`` as a source
    (``--source NAME=URL``); a mistake is a ``ConfigError`` quoting the URL without its
    password and query."""
    shown = redact_dsn(url.strip())

    def fail(problem: str, fix: str) -> ConfigError:
        return ConfigError(
            f"--source {name + '=' + shown!r}: {problem}; {fix} "
            f"(kafka://host:9092/topic-or-pattern,other?security.protocol=SSL)",
            setting="source",
        )

    rest = url.strip()[len(SCHEME):]
    rest, _, query = rest.partition("?")
    # Brokers, topics and settings' names hold no '@': one is a login's end (a value
    # may hold one, an e-mail address say).
    if "@" in rest or any("@" in part.partition("=")[0] for part in query.split("&")):
        raise fail(
            "a user and password in the URL are not read",
            "give them as settings after '?', the password by naming the environment "
            "variable that holds it: ?security.protocol=SASL_SSL&sasl.mechanism=PLAIN"
            "&sasl.username=USER&sasl.password_env=VARIABLE",
        )
    hosts, slash, patterns = rest.partition("/")
    if not hosts:
        raise fail("no broker", "name the cluster's bootstrap servers")
    for host in hosts.split(","):
        address, colon, port = host.rpartition(":")
        if not colon or not address or not port.isdigit() or not 0 < int(port) < 65536:
            # A password holding '?' and '=' may still lie in the brokers: not quoted then.
            broker = "a broker" if "@" in url else f"broker {host!r}"
            raise fail(f"{broker} is not host:port", "write each broker as host:port")
    topics = tuple(unquote(t).strip() for t in patterns.split(",")) if slash else ()
    if not topics or not all(topics):
        raise fail("no topic (or an empty one)", "name the topics after a slash, comma-separated")
    settings = dict(parse_qsl(query, keep_blank_values=True))
    owned = sorted(OWNED_SETTINGS & {k.removesuffix("_env") for k in settings})
    if owned:
        raise fail(f"setting {owned[0]} is dbus's own", "leave it out")
    return KafkaSource(name, hosts, topics, settings, start)


def consumer(source: KafkaSource, *, planning: bool = False) -> Any:
    """A consumer of ``source``'s cluster (the driver's planner's, ``planning``, or a
    read task's); a setting librdkafka refuses is a
    ``ConfigError`` naming it."""
    from confluent_kafka import Consumer, KafkaException

    settings = source.consumer_settings()
    if planning:
        settings.pop("enable.partition.eof")
    try:
        return Consumer(kafka_config(settings))  # its log lines through Python logging
    except KafkaException as exc:
        raise ConfigError(
            f"source {source.name!r}: the Kafka consumer refuses its settings "
            f"({exc.args[0].str() if exc.args else exc}); fix the URL's query",
            setting="source",
        ) from None


def ranges(begin: Offsets, end: Offsets) -> list[tuple[str, int, int, int]]:
    """(topic, partition, first offset, end offset) of each partition with messages
    between ``begin`` and ``end``; a partition ``begin`` lacks starts at 0."""
    found = []
    for topic, partitions in sorted(end.items()):
        for p, upto in sorted(partitions.items(), key=lambda kv: int(kv[0])):
            first = begin.get(topic, {}).get(p, 0)
            if upto > first:
                found.append((topic, int(p), first, upto))
    return found
