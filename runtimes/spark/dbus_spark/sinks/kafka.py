"""Kafka sink: an idempotent producer whose flush means "acknowledged by all replicas".

One producer per Python worker process serves every task that runs there (a
producer is expensive to start and holds connections). Ordering: with
``enable.idempotence`` the broker keeps per-partition order even with several
requests in flight, and the key is the row's primary key, so one row's changes
stay in order.

Fenced writes (a cluster member's, ``WriteFence``): the producer is transactional
and a task's messages go out in transactions of at most ``CHUNK_SECONDS`` /
``CHUNK_RECORDS``. Before committing one, the sink confirms with ZooKeeper that
its runtime still holds the source at the epoch the batch was read under (a
confirmation serves ``hold_seconds``). A transaction left open longer than its
timeout, as by a runtime paused past its session, is aborted by the broker, so
whatever it wrote becomes visible no later than ``hold_seconds`` + transaction
timeout + the broker's abort scan after the last confirmation: the cluster's
leader hands the source to a new owner only after that long (``handoff``), so a
paused runtime can never put older changes after the new owner's. Consumers read
with ``isolation.level=read_committed``. A hold found lost drops the rest of the
task's messages (the new owner re-sends from the committed position); a hold
that cannot be confirmed (ZooKeeper away) waits, and so does a broker that is down.

Writes are counted per deployment (``write(record, deployment)``): ``settle`` waits up
to a bound and names the deployments whose messages the broker refused or did not take
in time, so those alone are detached (``dbus_spark.state.progress``) while the others'
positions are committed. Fenced, a transaction not committed in time is aborted and
names every deployment in it: deployments sharing a producer share its fate.

Exactly once (fenced writes): a record written with its lane and order (``write``) is
dropped when its lane's mark committed in the cluster is at or past it, and each
transaction carries the new marks of the lanes it writes
(``dbus_spark.sinks.kafka_positions``). A transaction is committed only between two
changes, never between two records of one change (a change's records share its
order). The marks are read again for each task (``refresh_marks``): another worker may
have written a lane since, and a task's records left open by a task that failed are
aborted, not committed by the next one (its read is made again).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from tenacity import RetryCallState, Retrying, retry_if_exception_type

from dbus_fn.errors import KafkaSinkError, ServiceError
from dbus_spark.config.logs import kafka_config
from dbus_spark.sinks.kafka_admin import MAX_MESSAGE_BYTES, create_missing_topics
from dbus_spark.sinks.kafka_positions import (
    POSITIONS_TOPIC,
    Lane,
    MarkReader,
    ensure_positions_topic,
    mark_record,
)
from dbus_spark.sinks.kafka_reports import (
    LOST_BROKER,
    PURGED,
    REFUSED,
    TIMED_OUT,
    not_delivered,
)
from dbus_spark.state.records import KafkaRecord
from dbus_spark.state.sink_activity import SinkActivity

log = logging.getLogger(__name__)

# Tuned on the local broker with tests/bench/bench_runtime.py: lz4 costs little CPU
# and a few milliseconds of linger fills batches without hurting latency much.
PRODUCER_DEFAULTS: Mapping[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 512 * 1024,
    "compression.type": "lz4",
    # The local queue holds what the broker has not acknowledged yet; bounded so a
    # 1M-row transaction streams through in bounded memory (produce() then waits).
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 64 * 1024,
    # A broker that is down is waited for this long before a delivery fails and the
    # task (and so the micro-batch) is retried; nothing is acknowledged before.
    "message.timeout.ms": 300_000,
    "message.max.bytes": MAX_MESSAGE_BYTES,
    # A broker that is down is retried at most once a second, not five times.
    "reconnect.backoff.ms": 1000,
    "reconnect.backoff.max.ms": 10000,
}


# A fenced task commits its messages at least this often, so a transaction stays
# well inside its timeout and a failed one is re-sent from memory.
CHUNK_SECONDS = 0.5
CHUNK_RECORDS = 20_000
_RETRY_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class WriteFence:
    """How a cluster member's writes are fenced; see the module docstring."""

    transactional_id: str
    """One per producer (so per worker process): a transaction never waits on another's."""
    transaction_timeout: float
    hold_seconds: float
    confirm: Callable[[str, int], float | None]
    """``(source, epoch)`` -> the monotonic time the hold was confirmed at, ``None``
    when it is gone; raises ``ServiceError`` when ZooKeeper cannot say."""


class KafkaSink:
    """Sends ``KafkaRecord``s; ``flush()`` returns once all are acknowledged."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic_partitions: int = 3,
        create_topics: bool = True,
        settings: Mapping[str, Any] | None = None,
        fence: WriteFence | None = None,
        activity: SinkActivity | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._client_settings = dict(settings or {})
        """The settings given (a deployment's own: security, for the admin client too)."""
        self._config = kafka_config(
            {"bootstrap.servers": bootstrap, **PRODUCER_DEFAULTS, **self._client_settings}
        )
        self._fence = fence
        if fence is not None:
            timeout_ms = int(fence.transaction_timeout * 1000)
            self._config |= {
                "transactional.id": fence.transactional_id,
                "transaction.timeout.ms": timeout_ms,
                # A message not delivered within the transaction's time fails it; the
                # chunk is then sent again in a new transaction.
                "message.timeout.ms": timeout_ms,
            }
        self._topic_partitions = topic_partitions
        self._create_topics = create_topics
        self._known_topics: set[str] = set()
        self._errors: list[str] = []
        # Per deployment: messages handed over and not yet acknowledged, the broker's
        # refusals, and the delivery callback that counts them.
        self._waiting_for: Counter[str] = Counter()
        self._refused: dict[str, str] = {}
        self._callbacks: dict[str, Callable[[KafkaError | None, Any], None]] = {}
        self.block_for: float | None = None
        """How long ``write`` waits for room in a full local queue before it raises
        (None: as long as it takes)."""
        self._pending = 0
        self._sent = 0
        self._timed_out = False
        """A message of the open transaction timed out (fenced writes: see ``_commit_once``)."""
        self._lock = threading.Lock()
        self.activity = activity or SinkActivity(in_flight=lambda: self._pending)
        self._producer = self._new_producer()
        # Fenced writes: the hold the records belong to, the open transaction's
        # records (sent again if it fails), and when each hold was last confirmed.
        self._hold: tuple[str, int] | None = None
        self._lost = False
        self.fenced = 0
        """Records dropped because their source's hold was lost (reset by ``flush``)."""
        self._chunk: list[KafkaRecord] = []
        self._chunk_of: Counter[str] = Counter()
        """Per deployment, its messages in the open transaction (bounded writes)."""
        self._gave_up: dict[str, str] = {}
        """Per deployment, why a transaction with its messages was given up (bounded
        writes; ``settle`` reports them and they get nothing more in this task)."""
        self._abort_due = False
        """A transaction given up whose abort the broker has not confirmed yet."""
        self._resend_due = False
        """The open transaction was aborted: the chunk goes again in a new one."""
        self._chunk_began = 0.0
        self._committed = 0
        self._confirmed: dict[tuple[str, int], float] = {}
        # Exactly once: each lane's committed mark (None: read it before the next
        # lane's record), the marks of the open transaction, whether those went into
        # it, the lane and order of its last record (no commit before its change's
        # next record), the position a lane's open records were read at where their
        # order does not say it (``read_at``), and the change a commit came inside of
        # (its records that follow are not dropped for it: ``write``).
        self._marks: dict[bytes, int] | None = None
        self._mark_reader: MarkReader | None = None
        self._open_marks: dict[Lane, int] = {}
        self._marks_sent = False
        self._last_mark: tuple[Lane, int] | None = None
        self._open_at: dict[Lane, dict[str, Any]] = {}
        self._carried: tuple[Lane, int] | None = None
        self.already = 0
        """Records dropped because their lane's mark was committed past them (reset by
        ``flush`` and ``settle``)."""

    def _new_producer(self) -> Producer:
        """A producer; fenced, its transactions are set up by the first ``_begin``."""
        self._ready = self._fence is None
        return Producer({**self._config, "error_cb": self._client_error})

    def _client_error(self, err: KafkaError) -> None:
        """The client's own errors (it retries them itself): a lost connection counts
        as a retry at once, so an outage shows before any flush has waited."""
        if err.code() in LOST_BROKER:
            self.activity.retried()

    def _callback(self, deployment: str) -> Callable[[KafkaError | None, Any], None]:
        found = self._callbacks.get(deployment)
        if found is None:

            def delivered(err: KafkaError | None, msg: Any) -> None:
                why = not_delivered(err, msg)
                with self._lock:
                    if self._waiting_for[deployment] > 0:  # not one ``settle`` gave up on
                        self._waiting_for[deployment] -= 1
                    if why is not None:
                        self._refused.setdefault(deployment, f"{msg.topic()}: {why}")
                self._count_delivery(err, msg, why)

            found = self._callbacks[deployment] = delivered
        return found

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        self._count_delivery(err, msg, not_delivered(err, msg))

    def _count_delivery(self, err: KafkaError | None, msg: Any, why: str | None) -> None:
        """Count one delivery report; ``why``: ``not_delivered``'s answer for it."""
        with self._lock:
            self._pending -= 1
            if err is not None and err.code() in PURGED:
                return  # given up on by ``settle``: its deployment sends it again
            if why is not None:
                self._errors.append(f"{msg.topic()}: {why}")
                if err is not None and err.code() in TIMED_OUT:
                    self._timed_out = True
            else:
                self._sent += 1
        if why is not None:
            self.activity.failed()
        else:
            self.activity.acknowledged(msg.topic(), len(msg.value() or b"") + len(msg.key() or b""))

    @property
    def in_flight(self) -> int:
        """Messages handed over and not yet acknowledged."""
        return self._pending

    def ensure_topics(self, topics: Iterable[str]) -> None:
        """Create missing topics explicitly, so partition counts are ours, not the broker's."""
        missing = set(topics) - self._known_topics
        if not missing:
            return
        create_missing_topics(
            {**self._client_settings, "bootstrap.servers": self._bootstrap},
            missing,
            partitions=self._topic_partitions,
            create=self._create_topics,
            timeout=min(30.0, self.block_for or 30.0),
        )
        self._known_topics |= missing

    @property
    def transactional_id(self) -> str | None:
        """Its producer's transactional id (fenced writes; None: not fenced)."""
        return None if self._fence is None else self._fence.transactional_id

    @property
    def held(self) -> tuple[str, int] | None:
        """The hold the records written now belong to (fenced writes; None: none yet)."""
        return self._hold

    def hold(self, source: str, epoch: int) -> None:
        """The records that follow were read from ``source`` while held at ``epoch``."""
        self._hold = (source, epoch)
        self._lost = False

    def refresh_marks(self) -> None:
        """A task begins: what a task before it left open is aborted (its read is made
        again), and the lanes' marks are read again before the next ordered record."""
        if self._fence is None:
            return
        if self._chunk:
            self._drop_chunk(self._deadline())
        self._marks = None
        self._carried = None
        self._open_at.clear()

    def read_at(self, lane: Lane, at: dict[str, Any]) -> None:
        """``lane``'s records in this task were read at source position ``at``: its
        marks say so (``committed_at``)."""
        self._open_at[lane] = at

    def committed_at(self, lane: Lane) -> dict[str, Any] | None:
        """The position ``lane``'s committed records were read at (``read_at``), None
        when it has no such mark (fenced writes only)."""
        if self._fence is None:
            return None
        self._committed_marks()
        assert self._mark_reader is not None
        return self._mark_reader.at.get(lane.key)

    def write(
        self,
        record: KafkaRecord,
        deployment: str | None = None,
        mark: tuple[Lane, int] | None = None,
    ) -> None:
        """Send ``record``; ``deployment``: count it as that deployment's (see ``settle``);
        ``mark``: its lane and its change's order (exactly once, fenced writes only)."""
        if self._fence is None:
            self._produce(record, deployment)
            return
        if self._lost:
            self.fenced += 1
            return
        if deployment is not None and deployment in self._gave_up:
            return  # its own read sends it again
        if mark is not None and mark != self._carried and self._has(*mark):
            self.already += 1
            return
        if self._chunk and mark != self._last_mark and self._chunk_due():
            self._commit_chunk(self._deadline())
            if deployment is not None and deployment in self._gave_up:
                return
        if not self._chunk:
            if not self._begin(self._deadline()):
                if deployment is not None:
                    self._gave_up.setdefault(deployment, self._late("no transaction began"))
                return
            self._chunk_began = time.monotonic()
            self._marks_sent = False
        self._chunk.append(record)
        if deployment is not None:
            self._chunk_of[deployment] += 1
        if mark is not None:
            self._open_marks[mark[0]] = mark[1]
        self._last_mark = mark
        try:
            self._produce(record)
        except KafkaException as exc:
            # Not handed over, so the open transaction must not commit without it: the
            # chunk, this record included, goes again in a new one.
            self._waiting("a message was not handed over", exc.args[0].str())
            self._abort(self._deadline())
            self._commit_chunk(self._deadline(), resend=True)
            return
        except KafkaSinkError as exc:  # its topic cannot be made, the queue stayed full,
            if self.block_for is None:  # or the record is refused
                # The task fails and is tried again: nothing is dropped unsaid, and
                # nothing of it stays open for the worker's next task to commit.
                self._drop_chunk()
                raise
            self._give_up(str(exc))
            return
        if mark is None and self._chunk_due():
            self._commit_chunk(self._deadline())

    def _chunk_due(self) -> bool:
        """Whether the open transaction is due to commit (fenced writes)."""
        return (
            len(self._chunk) >= CHUNK_RECORDS
            or time.monotonic() - self._chunk_began >= CHUNK_SECONDS
        )

    def _has(self, lane: Lane, order: int) -> bool:
        """Whether ``lane``'s change at ``order`` is committed already, or was put in the
        open transaction before a later one (a change's own records are not: they share
        its order and come one after another)."""
        if order <= self._committed_marks().get(lane.key, -1):
            return True
        open_mark = self._open_marks.get(lane)
        return open_mark is not None and order < open_mark

    def _committed_marks(self) -> dict[bytes, int]:
        """The lanes' committed marks, read once per task (``refresh_marks`` forgets them)."""
        if self._marks is None:
            self._marks = self._read_marks()
        return self._marks

    def _read_marks(self) -> dict[bytes, int]:
        """The lanes' committed marks in this cluster, its positions topic made first."""
        assert self._fence is not None
        settings = {**self._client_settings, "bootstrap.servers": self._bootstrap}
        # Past a transaction left open by a runtime killed mid-write: its timeout and
        # the broker's abort scan, with room.
        timeout = self._fence.transaction_timeout * 5 + 15.0
        if self.block_for is not None:
            timeout = min(timeout, max(1.0, self.block_for))
        if self._mark_reader is None:
            ensure_positions_topic(settings, timeout=min(30.0, timeout))
            self._known_topics.add(POSITIONS_TOPIC)
            self._mark_reader = MarkReader(settings)
        if not self._ready:
            # First: a producer with this transactional id aborts what the last one
            # left open, and the marks are read past it at once.
            with contextlib.suppress(KafkaException):  # else ``_begin`` tries again
                self._producer.init_transactions(self._wait_at_most(self._deadline()))
                self._ready = True
        return self._mark_reader.read(timeout=timeout)

    def _deadline(self) -> float | None:
        return None if self.block_for is None else time.monotonic() + self.block_for

    def _begin(self, deadline: float | None = None) -> bool:
        """Open a transaction (fenced writes), once the abort of one given up is done;
        False when the broker did not let one begin by ``deadline``."""
        assert self._fence is not None
        try:
            for attempt in _retrying(deadline, waiting=self._waiting):
                with attempt:
                    self._begin_once(deadline)
        except _Again:
            return False
        return True

    def _begin_once(self, deadline: float | None) -> None:
        assert self._fence is not None
        try:
            if not self._ready:
                self._producer.init_transactions(self._wait_at_most(deadline))
                self._ready = True
            if self._abort_due:
                self._abort_once(deadline)
            self._producer.begin_transaction()
        except KafkaException as exc:
            error = exc.args[0]
            if not self._ready and not error.retriable():
                raise KafkaSinkError(
                    f"Kafka refused a transactional producer: {error.str()}; "
                    "check the broker's transaction settings and ACLs"
                ) from exc
            if error.fatal():
                self._producer = self._new_producer()
                self._abort_due = False
                raise _Again(error.str(), at_once=True) from exc
            raise _Again(
                error.str(), pause=_RETRY_SECONDS if deadline is None else 0.1,
                waits_for="no transaction could begin",
            ) from exc  # fmt: skip

    def _wait_at_most(self, deadline: float | None) -> float:
        assert self._fence is not None
        longest = self._fence.transaction_timeout * 5
        return longest if deadline is None else max(0.1, min(longest, deadline - time.monotonic()))

    def _late(self, why: str) -> str:
        within = self.block_for or 0
        return (
            f"Kafka at {self._bootstrap} did not commit a transaction within {within:.2g}s ({why})"
        )

    def _give_up(self, why: str) -> None:
        """Bounded fenced writes: abort the open transaction and name every deployment
        with messages in it (their own reads send them again)."""
        reason = why if why.startswith("Kafka at") else self._late(why)
        for deployment in self._chunk_of:
            self._gave_up.setdefault(deployment, reason)
        names = ", ".join(sorted(self._chunk_of))
        log.warning(
            "kafka: %d message(s) given up: %s; detached: %s", len(self._chunk), reason, names
        )
        self._drop_chunk(time.monotonic() + 1.0)

    def _drop_chunk(self, deadline: float | None = None) -> None:
        """Forget the open transaction's records and abort it."""
        self._clear_chunk()
        self._abort(deadline)

    def _produce(self, record: KafkaRecord, deployment: str | None = None) -> None:
        if record.topic not in self._known_topics:
            self.ensure_topics([record.topic])
        callback = self._on_delivery if deployment is None else self._callback(deployment)
        full_since = 0.0
        while True:
            try:
                self._producer.produce(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    headers=list(record.headers),
                    on_delivery=callback,
                )
                break
            except KafkaException as exc:
                if exc.args[0].code() in REFUSED:
                    raise KafkaSinkError(
                        f"Kafka cannot take a message of {len(record.value or b'')} bytes "
                        f"for topic {record.topic}: {exc.args[0].str()}; raise the "
                        "producer's message.max.bytes (and the topic's max.message.bytes) "
                        "in the deployment's Kafka settings, or leave the large columns "
                        "out in the function",
                        topic=record.topic,
                    ) from None
                raise
            except BufferError:
                # Back pressure: the local queue is full; let deliveries drain.
                full_since = full_since or time.monotonic()
                if self.block_for is not None and time.monotonic() - full_since > self.block_for:
                    raise KafkaSinkError(
                        f"Kafka at {self._bootstrap} took nothing for {self.block_for:g}s "
                        "(the local queue stayed full)",
                        topic=record.topic,
                    ) from None
                self._serve(0.1)
        with self._lock:
            self._pending += 1
            if deployment is not None:
                self._waiting_for[deployment] += 1
        self._serve(0)

    def _serve(self, wait: float, *, flush: bool = False) -> int:
        """The producer's ``poll`` (or ``flush``) for ``wait`` seconds: the delivery
        reports it served (with ``flush``: the messages it left queued). A fatal error
        of a transactional producer (the broker fenced it: a transaction left open past
        its timeout) comes out of these as the bare ``KafkaError``, which is no
        ``Exception``; it is raised here as the ``KafkaException`` every caller
        handles."""
        try:
            return self._producer.flush(wait) if flush else self._producer.poll(wait)
        except KafkaError as error:
            raise KafkaException(error) from None

    def _drain(self, deadline: float | None = None) -> list[str]:
        """Wait until every message handed over is delivered or failed (``_Late`` past
        ``deadline``); the failures."""
        started = time.monotonic()
        while True:
            wait = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
            remaining = self._serve(max(0.0, wait), flush=True)
            if remaining == 0:
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise _Late(f"{remaining} message(s) not acknowledged")
            self.activity.retried()
            log.warning(
                "kafka: %d message(s) not yet acknowledged after %.0fs (broker %s); waiting",
                remaining,
                time.monotonic() - started,
                self._bootstrap,
            )
        with self._lock:
            errors, self._errors = self._errors, []
        return errors

    def flush(self) -> int:
        if self._fence is not None:
            if self._chunk:
                self._commit_chunk()
            sent, self._committed = self._committed, 0
            with self._lock:
                self._sent = 0
            return sent
        errors = self._drain()
        with self._lock:
            sent, self._sent = self._sent, 0
        if errors:
            raise KafkaSinkError(
                f"Kafka refused {len(errors)} message(s), first: {errors[0]}; "
                "the batch will be retried"
            )
        return sent

    def acknowledged(self, within: float) -> bool:
        """Whether every message handed over so far is acknowledged, none refused,
        waiting at most ``within`` seconds. It judges nothing: a message late or refused
        stays for ``settle`` (or ``flush``) to report."""
        if self._fence is not None:
            return False  # its messages are readable once its transaction commits
        self._serve(within, flush=True)
        with self._lock:
            return self._pending == 0 and not self._errors and not self._refused

    def settle(self, within: float) -> tuple[int, dict[str, str]]:
        """Wait up to ``within`` seconds for every message handed over: the number
        acknowledged and, per deployment, why some of its messages were not (refused,
        or no answer in time). Messages still unanswered at the bound are purged from
        the producer, so they never hold a later ``settle``; their deployments send
        them again from their own position. Fenced, the open transaction commits by
        then or is given up (``_give_up``)."""
        deadline = time.monotonic() + within
        if self._fence is not None:
            if self._chunk:
                self._commit_chunk(deadline)
            sent, self._committed = self._committed, 0
            failed, self._gave_up = self._gave_up, {}
            with self._lock:
                self._sent = 0
            return sent, failed
        while True:
            remaining = self._serve(max(0.0, min(1.0, deadline - time.monotonic())), flush=True)
            if remaining == 0 or time.monotonic() >= deadline:
                break
            self.activity.retried()
        with self._lock:
            late = {name: count for name, count in self._waiting_for.items() if count > 0}
        if late:
            log.warning(
                "kafka: %d message(s) not acknowledged within %.2gs (broker %s); their "
                "deployments are detached",
                sum(late.values()),
                within,
                self._bootstrap,
            )
            self._producer.purge(in_queue=True, in_flight=True)
            self._serve(1.0, flush=True)  # their delivery reports, failed as purged
        with self._lock:
            failed = {
                name: f"Kafka at {self._bootstrap} did not acknowledge {count} "
                f"message(s) within {within:.2g}s"
                for name, count in late.items()
            }
            for name, reason in self._refused.items():
                failed.setdefault(name, f"Kafka refused a message ({reason})")
            self._refused.clear()
            self._waiting_for.clear()
            self._errors.clear()
            sent, self._sent = self._sent, 0
        return sent, failed

    def _commit_chunk(self, deadline: float | None = None, *, resend: bool = False) -> None:
        """Commit the open transaction once the hold is confirmed; on any failure send
        the chunk again in a new one (nothing is acknowledged before it commits). Past
        ``deadline`` (bounded writes), the transaction is given up instead. ``resend``:
        the open transaction is already aborted; start with a new one."""
        assert self._fence is not None
        why = "no answer"
        self._resend_due = resend
        try:
            for attempt in _retrying(deadline):
                with attempt:
                    try:
                        self._commit_once(deadline)
                    except _Again as again:
                        why = again.why or why
                        raise
        except _Again:
            self._give_up(why)

    def _commit_once(self, deadline: float | None) -> None:
        """One try of ``_commit_chunk``; ``_Again`` says why it failed and how long to
        wait before the next (``_resend_due``: whether that one starts a new
        transaction, a moment later)."""
        if deadline is not None and time.monotonic() >= deadline:
            raise _Again(None)  # none begins past the deadline: it is given up
        try:
            if self._resend_due:
                time.sleep(_RETRY_SECONDS if deadline is None else 0.1)
                if not self._begin(deadline):
                    raise _Again(None)
                self._chunk_began = time.monotonic()
                self._marks_sent = False
                for record in self._chunk:
                    self._produce(record)
                self._resend_due = False
            if not self._marks_sent:
                # How far each lane goes, visible with its records or not at all.
                for lane, order in self._open_marks.items():
                    self._produce(mark_record(lane, order, self._open_at.get(lane)))
                self._marks_sent = True
            errors = self._drain(deadline)
            if errors:
                raise _Resend(f"Kafka refused {len(errors)} message(s), first: {errors[0]}")
            if not self._holds():
                self._producer.abort_transaction(self._wait_at_most(None))
                self._drop_lost()
                return
            self._producer.commit_transaction(self._wait_at_most(deadline))
        except _Late as exc:
            raise _Again(str(exc)) from exc
        except KafkaException as exc:
            error = exc.args[0]
            self._waiting("a transaction failed", error.str())
            if error.fatal():
                # Fenced: the broker aborted a transaction left open past its
                # timeout (this process was paused or starved). Start over.
                self._producer = self._new_producer()
                self._resend_due = True
            elif not error.retriable() or error.txn_requires_abort():
                self._abort(deadline)
                self._resend_due = True
            # else a commit that may still succeed: ask again
            raise _Again(error.str()) from exc
        except (_Resend, KafkaSinkError) as exc:
            self._waiting("a transaction failed", str(exc))
            if self._timed_out:
                # A message the client gave up on may still reach the broker, and land
                # in the next transaction of this producer (librdkafka lacks the
                # broker's protection against it, KIP-890): a new producer, whose
                # start aborts this one's transaction, fences it out.
                self._producer = self._new_producer()
                self._timed_out = False
            else:
                self._abort(deadline)
            self._resend_due = True
            raise _Again(str(exc)) from exc
        except ServiceError as exc:
            # The hold cannot be confirmed: wait (the open transaction may time
            # out meanwhile; the chunk is then sent again).
            self._waiting("the source's hold cannot be confirmed", str(exc))
            pause = 0.0 if deadline is None else min(
                _RETRY_SECONDS, max(0.0, deadline - time.monotonic())
            )  # fmt: skip
            raise _Again(str(exc), pause=pause) from exc
        self._committed += len(self._chunk)
        if self._marks is not None:
            self._marks.update({lane.key: order for lane, order in self._open_marks.items()})
        if self._mark_reader is not None:
            read_at = self._open_at
            self._mark_reader.at.update(
                {lane.key: read_at[lane] for lane in self._open_marks if lane in read_at}
            )
        # Committed inside a change (a send that failed): its next records still go.
        self._carried = self._last_mark
        self._clear_chunk()

    def _clear_chunk(self) -> None:
        """Forget the open transaction's records and marks (committed or dropped)."""
        self._chunk.clear()
        self._chunk_of.clear()
        self._open_marks.clear()
        self._last_mark = None

    def _holds(self) -> bool:
        """Whether the current hold was confirmed recently enough to commit now."""
        assert self._fence is not None and self._hold is not None
        confirmed = self._confirmed.get(self._hold)
        if confirmed is not None and time.monotonic() - confirmed <= self._fence.hold_seconds:
            return True
        at = self._fence.confirm(*self._hold)
        if at is None:
            self._confirmed.pop(self._hold, None)
            return False
        self._confirmed = {self._hold: at}
        return True

    def _drop_lost(self) -> None:
        assert self._hold is not None
        self.fenced += len(self._chunk)
        self._clear_chunk()
        self._marks = None  # whoever holds the source now writes its lanes
        self._lost = True
        log.warning(
            "kafka: %s is no longer held by this runtime at epoch %d; its uncommitted "
            "messages are dropped (the new owner sends them from the committed position)",
            *self._hold,
        )

    def _abort(self, deadline: float | None = None) -> None:
        assert self._fence is not None
        try:
            self._abort_once(deadline)
        except KafkaException as exc:
            if exc.args[0].fatal():
                self._producer = self._new_producer()
            else:
                self._abort_due = True  # finished before the next transaction begins
        with self._lock:
            self._errors.clear()

    def _abort_once(self, deadline: float | None) -> None:
        """Abort the open transaction. One whose abort went through after its call
        timed out (librdkafka ends it in the background) is done: asked again, the
        producer answers that no transaction is open (``_STATE``), and that is not an
        error to wait on until the bound."""
        try:
            self._producer.abort_transaction(self._wait_at_most(deadline))
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE:
                raise
        self._abort_due = False

    def _waiting(self, what: str, why: str) -> None:
        self.activity.retried()
        log.warning("kafka: %s (%s; broker %s); trying again", what, why, self._bootstrap)

    def close(self) -> None:
        if self._fence is not None and self._chunk:
            self._abort()
        self._producer.flush(30)
        if self._mark_reader is not None:
            self._mark_reader.close()


class _Resend(Exception):
    """The open transaction cannot commit; send its chunk again."""


class _Again(Exception):
    """A try to begin or commit a transaction failed: ``why`` (None: for the reason
    the one before failed); the next waits ``pause`` seconds, saying so when
    ``waits_for`` is given, and is made even past the deadline when ``at_once`` (a
    new producer)."""

    def __init__(
        self, why: str | None, *, pause: float = 0.0, waits_for: str = "",
        at_once: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(why)
        self.why = why
        self.pause = pause
        self.waits_for = waits_for
        self.at_once = at_once


def _retrying(
    deadline: float | None, waiting: Callable[[str, str], None] | None = None
) -> Retrying:
    """Tries until one does not raise ``_Again``: with ``_Again``'s own pause between
    them, told to ``waiting`` before it, and none begun past ``deadline`` (never, when
    None) unless it says ``at_once``."""

    def failed(state: RetryCallState) -> _Again:
        assert state.outcome is not None
        again = state.outcome.exception()
        assert isinstance(again, _Again)
        return again

    def past(state: RetryCallState) -> bool:
        late = deadline is not None and time.monotonic() >= deadline
        return late and not failed(state).at_once

    def told(state: RetryCallState) -> None:
        again = failed(state)
        if waiting is not None and again.waits_for:
            waiting(again.waits_for, again.why or "")

    return Retrying(
        retry=retry_if_exception_type(_Again),
        stop=past,
        wait=lambda state: failed(state).pause,
        before_sleep=told,
        reraise=True,
    )


class _Late(Exception):
    """A bounded wait for acknowledgments reached its deadline."""
