"""Verify: does what a deployment's sinks hold equal what its functions make of its
tables now? And repair: send again exactly what differs.

The truth is derived, not assumed: every row of each table, read in chunks of its
key (consistent snapshots, as a bootstrap reads them), goes through the
deployment's own functions (filters, projections, routes), which say what each
destination should hold. Elasticsearch is asked chunk by chunk (``mget`` of the
chunk's documents); a Kafka topic's last message per key is read once. A key
found missing, extra (a lost delete) or differing is checked a second time after
the runtime has had a moment to deliver what was in flight, so only drift that
stays is reported.

``--repair`` asks the running runtime to read only the drifted keys again through
its history path (chunks in a consistent snapshot, merged with the live stream,
versions from the snapshot position) and to delete the extra ones as of that
position, so a newer change always wins over a repair.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from dbus_fn.capture import (
    BinlogReader,
    ChunkedTable,
    ChunkRead,
    chunked_table,
    key_to_json,
    next_boundary,
    read_chunk,
    replica_id_for,
)
from dbus_fn.capture._snapshot import snapshot_tables
from dbus_fn.cloudevent import image_digest
from dbus_fn.errors import DbusError, HistoryError
from dbus_fn.events import RowChange
from dbus_fn.kafka_binding import to_kafka_message
from dbus_fn.pipeline import Pipeline
from dbus_fn.registry import LoadedDeployment
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.history.target import deployment_named, runtime_at
from dbus_spark.stage.documents import IndexActions
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history.queries import keys_where

RECHECK_AFTER = 3.0
SAMPLE = 10


class DriftError(DbusError, RuntimeError):
    """A sink does not hold what the deployment's functions make of its tables."""

    exit_code = 6


@dataclass(frozen=True, slots=True)
class Bad:
    """One drifted key of one destination."""

    destination: str
    kind: str  # "missing" | "extra" | "differing"
    source: str
    table: str
    key: tuple[Any, ...]
    key_text: str


@dataclass
class DestinationCount:
    expected: int = 0
    found: int = 0


@dataclass
class Report:
    deployment: str
    rows: int = 0
    tables: list[str] = field(default_factory=list)
    destinations: dict[str, DestinationCount] = field(default_factory=dict)
    bad: list[Bad] = field(default_factory=list)
    seconds: float = 0.0
    feeds: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    """Per destination, the (source, table)s whose rows the functions send there."""

    def counts(self, destination: str) -> Counter[str]:
        return Counter(b.kind for b in self.bad if b.destination == destination)

    def lines(self) -> Iterator[str]:
        rate = self.rows / self.seconds if self.seconds else 0.0
        yield (f"verify {self.deployment}: {self.rows} rows of {len(self.tables)} table(s) in "
               f"{self.seconds:.1f}s ({rate:.0f} rows/s)")  # fmt: skip
        for destination in sorted(self.destinations):
            counts = self.counts(destination)
            state = ", ".join(f"{counts[k]} {k}" for k in ("missing", "extra", "differing")
                              if counts[k]) or "in sync"  # fmt: skip
            expected = self.destinations[destination].expected
            yield f"  {destination}: {expected} expected, {state}"
            for kind in ("missing", "extra", "differing"):
                keys = [b.key_text for b in self.bad if b.destination == destination
                        and b.kind == kind]  # fmt: skip
                if keys:
                    more = f" (and {len(keys) - SAMPLE} more)" if len(keys) > SAMPLE else ""
                    yield f"    {kind}: {', '.join(keys[:SAMPLE])}{more}"


def _digest(value: Any) -> bytes:
    return hashlib.blake2b(json.dumps(value, sort_keys=True).encode(), digest_size=16).digest()


class _Expected:
    """What the deployment's functions make of rows: per destination, key → content."""

    def __init__(self, deployment: LoadedDeployment) -> None:
        self._pipeline = Pipeline(deployment)
        self._actions = IndexActions()

    def of(self, change: RowChange) -> Iterator[tuple[str, str, Any]]:
        """(destination, key text, content digest source) for each delivery."""
        outcome = self._pipeline.process(change)
        for delivery in outcome.deliveries:
            projected = delivery.projected()
            destination = delivery.destination
            if destination.scheme == "es":
                action = self._actions.build(projected, destination.name, original=change)
                yield str(destination), action.doc_id, action.document
            else:
                message = to_kafka_message(projected)
                for key, after in kafka_rows(message.key, message.value, message.headers):
                    yield str(destination), key, after


def kafka_rows(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
) -> list[tuple[str, Any]]:
    """What one message of a topic says about rows: (row key, its row now, ``None``
    once deleted). A row is named by its message key, or, for a table without a
    primary key (no subject; the key is the table), by the digest of its image: an
    update there retires its old image (when it carries one) and adds the new one."""
    data = json.loads(value) if value else None
    found = dict(headers)
    deleted = found.get("ce_type", b"").endswith(b".row.deleted")
    if "ce_subject" in found or not isinstance(data, dict):
        return [((key or b"").decode(), None if deleted or data is None else data.get("after"))]
    before, after = data.get("before"), data.get("after")
    rows: list[tuple[str, Any]] = []
    if before is not None:
        rows.append((image_digest(before), None))
    if after is not None and not deleted:
        rows.append((image_digest(after), after))
    return rows


class _Elasticsearch:
    def __init__(self, url: str) -> None:
        from elasticsearch import Elasticsearch

        self.client = Elasticsearch(url, request_timeout=60)
        self._indexes: dict[str, bool] = {}

    def exists(self, index: str) -> bool:
        """Whether the index exists (asked once per verify, not once per chunk)."""
        found = self._indexes.get(index)
        if found is None:
            found = self._indexes[index] = bool(self.client.indices.exists(index=index))
        return found

    def documents(self, index: str, ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for begin in range(0, len(ids), 1000):
            reply = self.client.mget(index=index, ids=list(ids[begin : begin + 1000]))
            for doc in reply["docs"]:
                if doc.get("found"):
                    found[doc["_id"]] = _digest(doc["_source"])
        return found

    def count(self, index: str) -> int:
        self.client.indices.refresh(index=index)
        return int(self.client.count(index=index)["count"])

    def ids(self, index: str) -> Iterator[str]:
        pit = self.client.open_point_in_time(index=index, keep_alive="2m")["id"]
        after: list[Any] | None = None
        try:
            while True:
                page = self.client.search(
                    pit={"id": pit, "keep_alive": "2m"}, size=5000, source=False,
                    sort=[{"_shard_doc": "asc"}], search_after=after,
                )["hits"]["hits"]  # fmt: skip
                if not page:
                    return
                for hit in page:
                    yield hit["_id"]
                after = page[-1]["sort"]
        finally:
            self.client.close_point_in_time(id=pit)

    def close(self) -> None:
        self.client.close()


class _Topic:
    """A topic's last message per key (as digests), read to its end and re-readable."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.topic = topic
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"dbus-verify-{time.time_ns()}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        })  # fmt: skip
        self.last: dict[str, bytes | None] = {}
        self._next: dict[int, int] = {}
        self.exists = topic in self._consumer.list_topics(timeout=10).topics

    def read_to_end(self) -> None:
        if not self.exists:
            return
        from confluent_kafka import TopicPartition

        partitions = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        for number in partitions.partitions:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self.topic, number), timeout=10
            )
            start = self._next.get(number, low)
            if start >= high:
                continue
            self._consumer.assign([TopicPartition(self.topic, number, start)])
            while start < high:
                for msg in self._consumer.consume(10000, 1.0):
                    if msg.error():
                        continue
                    start = msg.offset() + 1
                    for key, after in kafka_rows(msg.key(), msg.value(), msg.headers() or []):
                        self.last[key] = None if after is None else _digest(after)
            self._next[number] = start

    def close(self) -> None:
        self._consumer.close()


def verify(
    deployment_name: str,
    tables: Sequence[str] = (),
    *,
    checkpoint: str | None = None,
    sources: Sequence[str] = (),
    functions: Sequence[str] = (),
    kafka: str | None = None,
    elasticsearch: str | None = None,
    repair: bool = False,
    out: IO[str],
    recheck_after: float = RECHECK_AFTER,
    token: str | None = None,
) -> Report:
    """Compare the deployment's sinks with its tables; with ``repair``, send the
    drifted keys again through the running runtime. Raises ``DriftError`` when drift
    remains.

    What to compare comes from the configuration of the runtime at ``checkpoint``,
    its DSNs asked of that runtime unless ``sources`` (``NAME=DSN``) gives them; or,
    with ``functions`` (deployment folders), from these, ``sources`` and the local
    services, as ``dbus runtime start`` would take them. ``kafka`` and
    ``elasticsearch``, when given, are the sinks to read. Either way no runtime need
    run but for a repair."""
    folder, config = _configuration(checkpoint, sources, functions, kafka, elasticsearch)
    deployment = deployment_named(folder, config, deployment_name)
    report = _compare(config, deployment, tables, recheck_after)
    for line in report.lines():
        print(line, file=out, flush=True)
    if report.bad and repair:
        _repair(folder, report, out, token)
        report = _compare(config, deployment, tables, recheck_after)
        for line in report.lines():
            print(line, file=out, flush=True)
    if report.bad:
        raise DriftError(
            f"{len(report.bad)} key(s) of deployment {deployment_name!r} drifted from its "
            "tables (listed above); run again with --repair to send them again"
        )
    return report


def _configuration(
    checkpoint: str | None,
    sources: Sequence[str],
    functions: Sequence[str],
    kafka: str | None,
    elasticsearch: str | None,
) -> tuple[str, RuntimeConfig]:
    from dataclasses import replace

    from dbus_spark.interfaces.settings import named_sources, runtime_config

    if functions:
        config = runtime_config(
            sources=tuple(sources), deployments=tuple(functions), kafka=kafka,
            elasticsearch=elasticsearch, checkpoint=checkpoint,
        )  # fmt: skip
        return config.checkpoint_dir, config
    dsns = dict(named_sources(tuple(sources)))
    folder, config = runtime_at(checkpoint, with_secrets=True, dsns=dsns)
    return folder, replace(
        config,
        kafka_bootstrap=kafka or config.kafka_bootstrap,
        elasticsearch_url=elasticsearch or config.elasticsearch_url,
    )


def _tables_of(
    reader: BinlogReader, deployment: LoadedDeployment, wanted: Sequence[str]
) -> list[ChunkedTable]:
    existing = [f"{t.database}.{t.table}" for t in snapshot_tables(reader)]
    chosen = [t for t in existing if deployment.subscribes(t)]
    for table in wanted:
        if not deployment.subscribes(table):
            raise HistoryError(
                f"deployment {deployment.manifest.name!r} does not subscribe to {table}; name "
                "one of its tables",
                table=table,
            )
    if wanted:
        chosen = [t for t in chosen if t in wanted]
    # A table without a key is compared whole (one consistent read), by row images.
    return [chunked_table(reader, *t.split(".", 1), unchunked=True) for t in chosen]


def _compare(
    config: RuntimeConfig,
    deployment: LoadedDeployment,
    wanted: Sequence[str],
    recheck_after: float,
) -> Report:
    began = time.monotonic()
    report = Report(deployment.manifest.name)
    expected = _Expected(deployment)
    es = _Elasticsearch(config.elasticsearch_url)
    topics: dict[str, _Topic] = {}
    seen: dict[str, set[str]] = {}
    owner: dict[tuple[str, str], tuple[str, str, tuple[Any, ...]]] = {}
    readers: dict[str, BinlogReader] = {}
    try:
        for binding in config.sources:
            manifest = deployment.manifest
            if not manifest.captures(binding.spec.name):
                continue
            reader = readers[binding.spec.name] = BinlogReader(
                binding.spec, replica_id=replica_id_for(f"{binding.spec.name}/verify")
            )
            chosen = _tables_of(reader, deployment, wanted)
            for chunked in chosen:
                report.tables.append(chunked.name)
                for rows in _chunks(reader, chunked, config.chunk_rows):
                    report.rows += len(rows)
                    _check_rows(rows, expected, es, topics, config, report, seen, owner,
                                binding.spec.name, chunked)  # fmt: skip
        missing_tables = [t for t in wanted if t not in report.tables]
        if missing_tables:
            raise HistoryError(
                f"no source of this runtime has table {missing_tables[0]}; name an existing "
                "table",
                table=missing_tables[0],
            )
        if not wanted:  # extras can only be told when every table was read
            _extras(es, topics, seen, report)
        if report.bad:
            time.sleep(recheck_after)
            report.bad = _recheck(report.bad, readers, deployment, es, topics, config)
    finally:
        es.close()
        for topic in topics.values():
            topic.close()
        for reader in readers.values():
            reader.close()
    report.seconds = time.monotonic() - began
    return report


def _chunks(reader: BinlogReader, chunked: ChunkedTable, rows: int) -> Iterator[list[RowChange]]:
    lower = None
    while True:
        upper = next_boundary(reader, chunked, lower, rows)
        yield [c for c in read_chunk(reader, chunked, lower, upper) if not isinstance(c, ChunkRead)]
        if upper is None:
            return
        lower = upper


def _check_rows(
    rows: list[RowChange],
    expected: _Expected,
    es: _Elasticsearch,
    topics: dict[str, _Topic],
    config: RuntimeConfig,
    report: Report,
    seen: dict[str, set[str]],
    owner: dict[tuple[str, str], tuple[str, str, tuple[Any, ...]]],
    source: str,
    chunked: ChunkedTable,
) -> None:
    want: dict[str, dict[str, bytes]] = {}
    for change in rows:
        for destination, key, content in expected.of(change):
            want.setdefault(destination, {})[key] = _digest(content)
            owner[(destination, key)] = (source, chunked.name, chunked.key_of(change))
    for destination, docs in want.items():
        report.feeds.setdefault(destination, set()).add((source, chunked.name))
        count = report.destinations.setdefault(destination, DestinationCount())
        count.expected += len(docs)
        seen.setdefault(destination, set()).update(docs)
        scheme, name = destination.split("://", 1)
        if scheme == "es":
            have = es.documents(name, list(docs)) if es.exists(name) else {}
        else:
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = _Topic(config.kafka_bootstrap, name)
                topic.read_to_end()
            have = {k: v for k in docs if (v := topic.last.get(k)) is not None}
        count.found += len(have)
        for key, digest in docs.items():
            kind = "missing" if key not in have else "differing" if have[key] != digest else ""
            if kind:
                src, table, values = owner[(destination, key)]
                report.bad.append(Bad(destination, kind, src, table, values, key))


def _extras(
    es: _Elasticsearch, topics: dict[str, _Topic], seen: dict[str, set[str]], report: Report
) -> None:
    for destination, keys in seen.items():
        scheme, name = destination.split("://", 1)
        if scheme == "es":
            count = report.destinations[destination]
            if not es.exists(name) or es.count(name) <= count.found:
                continue
            extra = (i for i in es.ids(name) if i not in keys)
        else:
            topic = topics[name]
            extra = (k for k, v in topic.last.items() if v is not None and k not in keys)
        # An extra key is told apart by the one table that feeds the destination.
        feeds = report.feeds.get(destination, set())
        source, table = next(iter(feeds)) if len(feeds) == 1 else ("", "")
        report.bad += [Bad(destination, "extra", source, table, (), key) for key in extra]


def _recheck(
    bad: list[Bad],
    readers: Mapping[str, BinlogReader],
    deployment: LoadedDeployment,
    es: _Elasticsearch,
    topics: dict[str, _Topic],
    config: RuntimeConfig,
) -> list[Bad]:
    """The drift that is still there after the runtime had time to deliver."""
    for topic in topics.values():
        topic.read_to_end()
    expected = _Expected(deployment)
    still = []
    for item in bad:
        scheme, name = item.destination.split("://", 1)
        if item.kind == "extra":
            present = (
                bool(es.documents(name, [item.key_text])) if scheme == "es"
                else topics[name].last.get(item.key_text) is not None
            )  # fmt: skip
            if present:
                still.append(item)
            continue
        reader = readers[item.source]
        chunked = chunked_table(reader, *item.table.split(".", 1))
        where = keys_where(chunked.key, [item.key]) if chunked.key else None
        rows = [c for c in read_chunk(reader, chunked, None, None, where=where)
                if not isinstance(c, ChunkRead)]  # fmt: skip
        want = {
            key: _digest(content)
            for change in rows
            for destination, key, content in expected.of(change)
            if destination == item.destination
        }
        if scheme == "es":
            have = es.documents(name, [item.key_text])
        else:
            value = topics[name].last.get(item.key_text)
            have = {} if value is None else {item.key_text: value}
        if want.get(item.key_text) != have.get(item.key_text):
            still.append(item)
    return still


def _repair(folder: str, report: Report, out: IO[str], token: str | None) -> None:
    from dbus_spark.interfaces.history.follow import ANSWER_TIMEOUT, ask, follow
    from dbus_spark.planning.request_models import Delete, RepairItem, RepairRequest
    from dbus_spark.state.history.tasks import HistoryStore

    keys: dict[tuple[str, str], list[Any]] = {}
    deletes: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for item in report.bad:
        if not item.table:
            raise HistoryError(
                f"{item.destination} holds key {item.key_text} that no table of the deployment "
                "sends there, and several tables feed it, so it cannot be told which table to "
                "check; delete it by hand"
            )
        if item.kind == "extra":
            deletes.setdefault((item.source, item.table), []).append(
                (item.destination, item.key_text)
            )
        else:
            keys.setdefault((item.source, item.table), []).append(key_to_json(item.key))
    request = RepairRequest(
        report.deployment,
        tuple(
            RepairItem(source, table, tuple(keys.get((source, table), ())),
                       tuple(Delete(*d) for d in deletes.get((source, table), ())))
            for source, table in dict.fromkeys([*keys, *deletes])
        ),
    )  # fmt: skip
    reply = ask(folder, request, "repair", answer_timeout=ANSWER_TIMEOUT, token=token)
    print(f"repair of {report.deployment}: {reply.message}", file=out, flush=True)
    follow(HistoryStore(progress_path(folder)), reply.tasks, out=out)


__all__ = ["Bad", "DriftError", "Report", "verify"]
