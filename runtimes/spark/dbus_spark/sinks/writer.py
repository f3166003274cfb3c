"""The sinks of a worker: where a read task's records go, and how the task settles them.

One path leads from a read to the sinks: each read task of the ``dbus_binlog``
source (the shared read, a catch-up read, a history chunk, a replay part) hands
its records to its worker's sinks as it reads (``Output``) and settles them before
it ends: every deployment's records acknowledged, or, where deployments go at
their own pace, within the detach bound or that deployment named (its position
holds). A cluster member's Kafka writes commit in transactions fenced by the
source's hold (``dbus_spark.sinks.kafka``). The task hands Spark only its counts,
which the ``dbus_functions`` sink's writer sums and commits
(``dbus_spark.sinks.batch_commit``).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dbus_fn.coordination import HoldCheck
from dbus_fn.errors import DbusError
from dbus_spark.config.routes import KafkaCluster, Routes, elasticsearch_cluster, kafka_cluster
from dbus_spark.config.runtime import RuntimeConfig, WriteFencing
from dbus_spark.sinks.batch_commit import TaskReport
from dbus_spark.sinks.elasticsearch import ElasticsearchSink
from dbus_spark.sinks.kafka import KafkaSink, WriteFence
from dbus_spark.sinks.kafka_positions import Lane, scope_of
from dbus_spark.sinks.write_slots import WriteSlot
from dbus_spark.stage.functions import FunctionStage, StageRecord, refusal_dead_letter
from dbus_spark.stage.worker import Batcher
from dbus_spark.state.live_counters import SinkPublisher
from dbus_spark.state.records import IndexAction, KafkaRecord
from dbus_spark.state.sink_activity import SinkActivity


class WorkerSinks:
    """The sinks of one Python worker process, kept between tasks.

    Each deployment writes to Elasticsearch through a sink of its own (its own
    buffer), and is counted apart in the Kafka producer's acknowledgments, so one
    deployment's sink that does not answer names that deployment alone
    (``settle``). A deployment whose manifest names its own cluster writes there
    (``route``, ``dbus_spark.config.routes``); deployments on one cluster with the
    same settings share its producer."""

    def __init__(self, config: RuntimeConfig, label: str = "") -> None:
        """``label``: told apart from the worker's other sinks in its metrics files."""
        self.config = config
        self._check: HoldCheck | None = None
        self._fence = None
        self._slot: WriteSlot | None = None
        """Standalone, the write slot of its exactly-once producers (taken with the first)."""
        if config.fencing is not None:
            self._check = HoldCheck(config.fencing.zookeeper, config.fencing.runtime_id)
            self._fence = _write_fence(config.fencing, self._check, next(_SINKS_MADE))
        self._kafka_activity = SinkActivity(
            in_flight=lambda: sum(s.in_flight for s in list(self._producers.values()))
        )
        self.kafka = KafkaSink(
            config.kafka_bootstrap,
            topic_partitions=config.topic_partitions,
            fence=self._fence,
            activity=self._kafka_activity,
        )
        """The runtime's own Kafka: every deployment's that names no cluster."""
        self._producers: dict[str, KafkaSink] = {"": self.kafka}
        """Per cluster and settings (``KafkaCluster.key``; "" the runtime's), its sink;
        standalone, the exactly-once deployments' apart (the key, then ``once``)."""
        self._routes: Routes = {}
        self._kafka_of: dict[str, KafkaSink] = {}
        self.detach_seconds = config.detach_seconds
        """How long a deployment's sinks may take before it is detached (0: never)."""
        self.within: float | None = None
        """This task's bound on a deployment's writes (None: wait; see ``pace``)."""
        self._elasticsearch: dict[str, ElasticsearchSink] = {}
        self._es_activity = SinkActivity(
            in_flight=lambda: sum(s.in_flight for s in list(self._elasticsearch.values()))
        )
        self.failed: dict[str, str] = {}
        """Per deployment, why its sinks did not take what it was given in this task."""
        self._refused: list[tuple[str, KafkaRecord, tuple[Lane, int] | None]] = []
        self.publisher = SinkPublisher(
            {"kafka": self._kafka_activity, "elasticsearch": self._es_activity}, label
        )
        self._lane: str | None = None
        self._lanes: dict[tuple[str, str], Lane] = {}
        self._scope = scope_of(
            config.checkpoint_dir,
            config.fencing and config.fencing.zookeeper.cluster,
            config.incarnation,
        )
        self.order: int | None = None
        """The order of the change whose records ``deliver`` is given now (exactly once:
        ``start``'s read is in lanes), else None."""

    def start(self, lane: str | None) -> None:
        """A read task begins with these sinks. With a ``lane`` ("" for a source's
        changes, else the part of the source it reads), it reads in order and its records
        go in lanes, a deployment's each, and what a lane's cluster already has is not
        sent again (fenced writes; ``dbus_spark.sinks.kafka_positions``)."""
        self._lane = lane if self.config.exactly_once else None
        self._lanes.clear()
        self.order = None
        for producer in self._producers.values():
            producer.refresh_marks()

    def move_to(self, lane: str) -> None:
        """The read begun (``start``) in a lane goes on in ``lane``, another part of its
        source it reads in order (a Kafka replay's next partition)."""
        if self._lane is not None:
            self._lane = lane
            self._lanes.clear()

    @property
    def in_lanes(self) -> bool:
        """Whether the read begun (``start``) hands its changes' orders (``order``)."""
        return self._lane is not None

    def _mark(self, deployment: str, source: str) -> tuple[Lane, int] | None:
        """The lane and order of ``deployment``'s record given now (None: none)."""
        if self.order is None:
            return None
        return self._lane_of(deployment, source), self.order

    def _lane_of(self, deployment: str, source: str, kind: str = "") -> Lane:
        """``deployment``'s lane of ``source`` in the read begun; ``kind``: a lane of its
        own beside it (the dead letters of documents Elasticsearch refused)."""
        lane = self._lanes.get((deployment, kind))
        if lane is None:
            assert self._lane is not None
            part = f"{self._lane}/{kind}" if kind else self._lane
            lane = self._lanes[deployment, kind] = Lane(self._scope, deployment, source, part)
        return lane

    def read_at(self, deployment: str, source: str, at: dict[str, Any]) -> None:
        """The read begun (``start``) read ``deployment``'s changes of ``source`` at
        position ``at`` (a history chunk's, whose records share one order): its lane's
        mark names it, so a read again can report where its changes were read."""
        if self._lane is not None:
            self.kafka_for(deployment).read_at(self._lane_of(deployment, source), at)

    def committed_at(self, deployment: str, source: str) -> dict[str, Any] | None:
        """Where the committed records of ``deployment``'s lane of ``source`` were read
        (``read_at``): None when none are committed, or the read is in no lane."""
        if self._lane is None:
            return None
        return self.kafka_for(deployment).committed_at(self._lane_of(deployment, source))

    def pace(self, detaching: bool, bound: float | None = None) -> None:
        """Set this task's writes to be bounded by the detach bound, or by ``bound`` if
        that is shorter (a deployment whose sinks take longer is named in ``failed``),
        or waited for as long as it takes (``detaching`` False: when detaching would
        help no other deployment)."""
        self.within = self.detach_seconds if detaching and self.detach_seconds else None
        if self.within is not None and bound is not None:
            self.within = min(self.within, bound)
        for producer in self._producers.values():
            producer.block_for = self.within

    def route(self, routes: Routes) -> None:
        """Where each deployment writes from now on: per deployment that declares them,
        its manifest's sink tables (the others write to the runtime's clusters)."""
        if routes == self._routes:
            return
        changed = {
            name for name in {*routes, *self._routes} if routes.get(name) != self._routes.get(name)
        }
        self._routes = {name: dict(options) for name, options in routes.items()}
        for name in changed:
            self._kafka_of.pop(name, None)  # what it sent is flushed with its producer
            sink = self._elasticsearch.get(name)
            if sink is not None and not sink.in_flight:  # else moved once it is sent
                del self._elasticsearch[name]
                sink.close()

    def kafka_for(self, deployment: str) -> KafkaSink:
        """``deployment``'s Kafka sink: its own cluster's, or the runtime's."""
        sink = self._kafka_of.get(deployment)
        if sink is None:
            cluster = kafka_cluster(deployment, self._routes)
            once = self._fence is None and self.config.writes_once(deployment)
            key = "/".join(k for k in (cluster and cluster.key, once and "once") if k)
            sink = self._producers.get(key)
            if sink is None:
                sink = self._producers[key] = self._producer(cluster, key, once)
            self._kafka_of[deployment] = sink
        return sink

    def _producer(self, cluster: KafkaCluster | None, key: str, once: bool) -> KafkaSink:
        """A new sink for ``cluster`` (None: the runtime's), under ``key``: a cluster
        member's fenced, a standalone runtime's exactly-once (``once``) transactional
        under its write slot's id."""
        fence = self._fence
        if once:
            if self._slot is None:
                self._slot = WriteSlot(self.config.checkpoint_dir)
            fence = _slot_fence(self._slot)
        fence = fence and replace(fence, transactional_id=f"{fence.transactional_id}/{key}")
        sink = KafkaSink(
            (cluster and cluster.bootstrap) or self.config.kafka_bootstrap,
            topic_partitions=self.config.topic_partitions,
            settings=cluster.settings if cluster else None,
            fence=fence,
            activity=self._kafka_activity,
        )
        sink.block_for = self.within
        if self.kafka.held is not None:  # fenced by the task's hold too
            sink.hold(*self.kafka.held)
        return sink

    def elasticsearch(self, deployment: str) -> ElasticsearchSink:
        """``deployment``'s Elasticsearch sink: its own cluster's, or the runtime's."""
        sink = self._elasticsearch.get(deployment)
        if sink is None:

            def refused(action: IndexAction, reason: str) -> None:
                letter = refusal_dead_letter(action, reason, type_prefix=self.config.type_prefix)
                self._refused.append((deployment, letter, action.refusal_mark))

            cluster = elasticsearch_cluster(deployment, self._routes)
            sink = ElasticsearchSink(
                cluster.hosts if cluster else self.config.elasticsearch_url,
                options=cluster.options if cluster else None,
                on_refused=refused,
                activity=self._es_activity,
            )
            self._elasticsearch[deployment] = sink
        return sink

    def release(self) -> None:
        """These sinks write no more: their write slot (standalone, exactly once) is
        free for the runtime's next sinks."""
        if self._slot is not None:
            self._slot.release()

    def _fail(self, deployment: str, reason: str) -> None:
        """Drop what ``deployment`` still has buffered: it is detached, and its own read
        sends it all again."""
        self.failed.setdefault(deployment, reason)
        sink = self._elasticsearch.get(deployment)
        if sink is not None:
            sink.drop()

    def hold(self, source: str, epoch: int) -> None:
        """The records that follow were read from ``source`` held at ``epoch`` (a cluster
        member's): their Kafka transactions commit only while that hold lasts."""
        for producer in self._producers.values():
            producer.hold(source, epoch)

    def deliver(self, record: StageRecord, source: str, report: TaskReport) -> None:
        """Write one record of the function stage straight away (a read task's own).

        With a detach bound, a deployment whose sink did not take a write within it
        is noted in ``failed`` and given nothing more in this task."""
        name = record.deployment
        if name in self.failed:
            return
        out = record.record
        within = self.within
        try:
            if type(out) is KafkaRecord:
                mark = self._mark(name, source) if self._lane is not None else None
                self.kafka_for(name).write(out, name if within else None, mark)
            else:
                assert type(out) is IndexAction
                if out.document is not None and not out.size:
                    out = replace(out, size=len(json.dumps(out.document)))
                if self.order is not None and self._lane is not None:
                    # A refusal's dead letter goes in a lane of its own, in this order.
                    refusals = self._lane_of(name, source, "refused")
                    out = replace(out, refusal_mark=(refusals, self.order))
                self.elasticsearch(name).write(out, within=within)
        except DbusError as exc:
            if within is None:
                raise
            self._fail(name, str(exc))
            return
        report.records += 1
        report.per_source[source] += 1

    def settle(
        self, report: TaskReport, started: float, within: float | None = None
    ) -> dict[str, str]:
        """``finish`` for what ``deliver`` wrote, waiting at most ``within`` seconds in
        all (default: the detach bound): per deployment whose sinks did not take all
        of it, why (those deployments are detached; the others' writes are all
        acknowledged). Unbounded (``pace``), it is ``finish``."""
        if self.within is None:
            self.finish(report, started)
            return {}
        deadline = time.monotonic() + (self.within if within is None else within)
        self._send_buffered(report, lambda: max(0.5, deadline - time.monotonic()))
        failed, self.failed = self.failed, {}
        for producer in list(self._producers.values()):
            sent, late = producer.settle(max(0.5, deadline - time.monotonic()))
            report.kafka += sent
            self._count_dropped(producer, report)
            for name, reason in late.items():
                failed.setdefault(name, reason)
        report.seconds = time.monotonic() - started
        return failed

    def acknowledged(self, report: TaskReport, wait: float) -> bool:
        """Whether every record delivered so far is acknowledged by its sinks, with no
        deployment refused: what Elasticsearch buffers is sent (as a full buffer is, within
        the task's bound), then Kafka is given ``wait`` seconds. It judges no deployment
        for a slow Kafka (``settle`` does), and says no for fenced writes (they commit in
        transactions, at ``settle``)."""
        if self._fence is not None:
            return False
        self._send_buffered(report, lambda: self.within)
        if self.failed:
            return False
        deadline = time.monotonic() + wait
        return all(
            producer.acknowledged(max(0.0, deadline - time.monotonic()))
            for producer in list(self._producers.values())
        )

    def _send_buffered(self, report: TaskReport, within: Callable[[], float | None]) -> None:
        """Send what each deployment's Elasticsearch sink buffers (each within ``within()``
        seconds), then to Kafka the dead letters of the documents it refused: first,
        since a refused document becomes a dead letter. Paced, a deployment whose sink
        fails is noted in ``failed`` (and what it buffers dropped); unpaced, it raises."""
        for name, sink in list(self._elasticsearch.items()):
            if name in self.failed:
                sink.drop()
                continue
            try:
                report.elasticsearch += sink.flush(within=within())
            except DbusError as exc:
                if self.within is None:
                    raise
                self._fail(name, str(exc))
        # In the order of the changes they are of (bulk requests answer in any order):
        # a lane's letters go in order, like its records.
        self._refused.sort(key=lambda refused: refused[2][1] if refused[2] else 0)
        for name, letter, mark in self._refused:
            if name not in self.failed:
                try:
                    self.kafka_for(name).write(
                        letter, name if self.within is not None else None, mark
                    )
                except DbusError as exc:
                    if self.within is None:
                        raise
                    self._fail(name, str(exc))
        self._refused.clear()

    def finish(self, report: TaskReport, started: float) -> TaskReport:
        """Wait until every record written is acknowledged; ``report`` with the counts."""
        self._send_buffered(report, lambda: None)
        for producer in list(self._producers.values()):
            report.kafka += producer.flush()
            self._count_dropped(producer, report)
        report.seconds = time.monotonic() - started
        return report

    @staticmethod
    def _count_dropped(producer: KafkaSink, report: TaskReport) -> None:
        """Move what ``producer`` dropped (a hold lost, a lane's mark past) to ``report``."""
        report.fenced += producer.fenced
        report.already += producer.already
        producer.fenced = producer.already = 0


_SINKS_MADE = itertools.count()
"""Numbers this process's ``WorkerSinks``: each producer's transactional id is its own."""


def _write_fence(fencing: WriteFencing, check: HoldCheck, made: int) -> WriteFence:
    """The fence of the ``made``-th sinks of this worker process. Every producer has a
    transactional id of its own (two producers sharing one would abort each other's
    open transactions as each starts): the process, these sinks, and for a
    deployment's own cluster, that cluster (``WorkerSinks.kafka_for``)."""
    zk = fencing.zookeeper
    return WriteFence(
        # Its transactions never wait on another producer's.
        transactional_id=(
            f"dbus/{zk.cluster}/{fencing.runtime_id}/{socket.gethostname()}/{os.getpid()}/{made}"
        ),
        transaction_timeout=fencing.transaction_timeout,
        hold_seconds=fencing.hold_seconds,
        confirm=check.confirm,
    )


STANDALONE_TRANSACTION_TIMEOUT = 10.0
"""Seconds a standalone runtime's Kafka transaction may stay open: the longest a
``read_committed`` consumer waits behind one whose runtime was paused (one that was
killed is aborted by the runtime that follows, ``dbus_spark.sinks.write_slots``)."""


def _slot_fence(slot: WriteSlot) -> WriteFence:
    """The fence of a standalone runtime's exactly-once writes: no hold to confirm
    (no other runtime reads its sources), a stable transactional id per write slot."""
    return WriteFence(
        transactional_id=slot.transactional_id,
        transaction_timeout=STANDALONE_TRANSACTION_TIMEOUT,
        hold_seconds=float("inf"),
        confirm=lambda _source, _epoch: time.monotonic(),
    )


_sinks: dict[str, WorkerSinks] = {}


def sink_settings(config: RuntimeConfig) -> str:
    """What a worker's sinks are made from: the configuration without its sources and
    functions (those come and go; the sinks stay)."""
    return json.dumps(replace(config, sources=(), deployments=()).to_json(), sort_keys=True)


def worker_sinks(settings: str, routes: Routes | None = None) -> WorkerSinks:
    """This worker process's sinks. They outlive micro-batches and configuration
    changes that do not touch them (sources and functions come and go in a cluster):
    a producer, above all a transactional one, is slow to start. ``routes``: where
    the deployments that name their own clusters write (``WorkerSinks.route``)."""
    sinks = _sinks.get(settings)
    if sinks is None:
        _sinks.clear()
        sinks = _sinks[settings] = WorkerSinks(RuntimeConfig.from_json(json.loads(settings)))
    if routes is not None:
        sinks.route(routes)
    return sinks


def own_sinks(config: RuntimeConfig, routes: Routes, label: str) -> WorkerSinks:
    """Sinks apart from the worker's (``worker_sinks``), for a read that outlives its
    task (``dbus_spark.reads.open_read``): what they hold is settled by that read alone,
    never by another task of the worker."""
    sinks = WorkerSinks(RuntimeConfig.from_json(json.loads(sink_settings(config))), label)
    sinks.route(routes)
    return sinks


def detaches(config: RuntimeConfig) -> bool:
    """Whether deployments of this runtime go at their own pace (``dbus_spark.state.progress``)."""
    return config.detach_seconds > 0


def paces(config: RuntimeConfig, stage: FunctionStage) -> bool:
    """Whether a read task of this runtime bounds each deployment's writes by the
    detach bound: when one deployment's sink that does not answer could hold another's
    (not with one deployment, whom detaching would free no one)."""
    return detaches(config) and len(stage.deployments) > 1


class Output:
    """Where a read task's records go: to the task's own sinks as it reads, each
    deployment's writes bounded when paced (a deployment whose sinks do not take them
    is ``refused`` the rest, and ``settle`` names it), else waited for as long as it
    takes."""

    def __init__(self, config: RuntimeConfig, batcher: Batcher, routes: Routes,
                 *, paced: bool, bound: float | None = None,
                 sinks: WorkerSinks | None = None, lane: str | None = None) -> None:  # fmt: skip
        """``paced``: bounded by the detach bound, or by ``bound`` if shorter.
        ``sinks``: the read's own (``own_sinks``), else the worker's. ``lane``: the
        read reads in order, in that lane (``WorkerSinks.start``)."""
        self.batcher = batcher
        self.sinks = sinks or worker_sinks(sink_settings(config), routes)
        self.sinks.pace(paced, bound)
        if config.fencing is not None:
            self.sinks.hold(batcher.source, config.source(batcher.source).epoch)
        elif config.exactly_once:
            self.sinks.hold(batcher.source, 0)  # held by this runtime alone
        self.sinks.start(lane)
        self.report = TaskReport(started=time.time())

    def put(self, record: StageRecord) -> None:
        """Hand ``record`` to its deployment's sinks."""
        self.sinks.deliver(record, self.batcher.source, self.report)

    def acknowledged(self, wait: float) -> bool:
        """Whether everything put so far is acknowledged by its sinks, waiting at most
        ``wait`` seconds for Kafka (``WorkerSinks.acknowledged``)."""
        return self.sinks.acknowledged(self.report, wait)

    def refused(self, deployment: str) -> bool:
        """Whether ``deployment``'s sinks stopped taking this task's writes."""
        return deployment in self.sinks.failed

    def settle(self, began: float, within: float | None = None) -> dict[str, str]:
        """Wait for what was put (at most ``within`` seconds, by default the detach
        bound): per deployment whose sinks did not take all of it, why."""
        failed = self.sinks.settle(self.report, began, within)
        self.batcher.add_delivered(self.report.sink_counts())
        return failed
