"""A source's open read, carried across micro-batches.

A read task of ``dbus_spark.planning.source`` that alone reads a source, with every deployment
with the stream, no history merging and no fence, reads in a thread of its worker
(``OpenRead``) that outlives the task. The task owns what the thread delivers for a
while (a ``Span``: its counts, its sinks' acknowledgments), then *cuts* it at a
transaction boundary: the thread waits while the task settles its span, and goes on
at once in a new span that no task owns yet. Changes committed while Spark commits
the batch and plans the next are delivered as they come instead of waiting for the
next task: between micro-batches nothing stops reading.

Spark hands a source's tasks to its Python workers in turn, so the next task is
usually in another process: it asks the reading process, over a local socket named
after the checkpoint and the source, to take the span over for it (``ask``): if
the span begins where the task's range does, the reading process runs the task's
part (waits, cuts, settles) and answers with the task's rows (counts and
acknowledgments). Otherwise the task ends that read, wherever it runs (``quiet``),
and starts one from its range's start in its own process: the changes the old one
delivered past its cut are delivered again (at least once, as after a crash), never
interleaved with the new read's. Any other read of the source (a shard, a history
merge, a deployment left out) ends it first too. A span no task takes for a while
ends if it delivered nothing (an idle source: ``ALIVE_SECONDS``); one that delivered
changes waits for the task the server's move plans (a query that stops ends it from
the driver; ``ORPHANED_SECONDS`` bound the wait). A worker that ends takes its threads
along.

As it reads, about every second at a transaction boundary, the read has its sinks
acknowledge all it delivered and notes that position beside the checkpoint
(``checkpoint.record_delivered``): a runtime killed before its batch commits starts
its next run there, so it sends again about a second of changes, not all since
its last batch.

A lock file per source (under the host's temporary folder: ``_files``) is held by
the process whose thread reads it, so no two reads of a source run at once. There
is one way to end a read from outside: ask it over its socket to hand its source
over (``quiet``), then wait for its lock. A read that took the lock but does not
listen yet (it is starting) is asked again until it does.

Whether reads are carried at all, and how the driver ends them, is
``dbus_spark.reads.open_read_control``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import logging
import queue
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, cast

import pyarrow as pa

from dbus_fn.capture import (
    BinlogReader,
    coordinates,
    position_from_json,
    position_to_json,
)
from dbus_fn.errors import DbusError
from dbus_fn.events import (
    BinlogPosition,
    ReadItem,
    TransactionCommit,
)
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.reads.open_read_socket import (
    LISTEN_WAIT,
    address,
    ask,
    digest,
    error_from_json,
    error_to_json,
    listen,
    rows_from_json,
    rows_to_json,
)
from dbus_spark.reads.shared_read import SharedItems, change_order, read_events
from dbus_spark.reads.task import ReadTask
from dbus_spark.sinks.writer import own_sinks, paces
from dbus_spark.stage.functions import FunctionStage, StageRecord
from dbus_spark.stage.worker import Batcher, drop_reader, offset_to_position
from dbus_spark.state.checkpoint import record_delivered
from dbus_spark.state.progress import Admission

log = logging.getLogger(__name__)

FOLDER = ".open-reads"
CATCH_UP = 5
"""A read behind the server at its time (``dbus_fn.capture.behind``) goes on, up to
this many times its time, before it is cut: a batch costs cores a backlog needs."""
ALIVE_SECONDS = 10.0
"""A span that delivered nothing and no task took for this long (more the trigger
interval, when the runtime has one) ends: its source idles (the next change starts a
read)."""
ORPHANED_SECONDS = 300.0
"""How long a span that delivered changes waits for a task, instead of
``ALIVE_SECONDS``: past that its query must have stopped without its driver ending
its reads (a Spark query stopped directly); the span then ends, and whoever reads the
source next sends its changes again (at least once)."""
QUIET_WAIT = 60.0
"""How long a read waits for another process's open read of its source to end."""
RECORD_SECONDS = 1.0
"""How often a read notes how far its sinks acknowledged everything
(``checkpoint.record_delivered``), by the clock or by the commit times it read
(``NoteClock``): a runtime killed between two batches sends again about this much of
changes, not all since its last batch."""
ACK_WAIT = 0.5
"""How long a read waits for Kafka's acknowledgments before it notes that (longer,
it notes nothing this time, and reads on)."""
_FAR = float("inf")
STOPPED_KEPT = 86400.0
"""How long a stopped query's mark is kept (``mark_stopped``): far longer than Spark
takes to kill its tasks."""

_reads: dict[tuple[str, str], OpenRead] = {}
"""This worker's open reads, per (checkpoint, source)."""


def _files(checkpoint: str, source: str) -> Path:
    """Where a source's lock and stopped-query marks are, on this host (never the driver's
    folder: an executor may run elsewhere)."""
    return Path(tempfile.gettempdir()) / "dbus-open-reads" / digest(checkpoint, source)


def _stopped_file(checkpoint: str, source: str, run: str) -> Path:
    path = _files(checkpoint, source)
    return path.with_name(f"{path.name}.{run}.stopped")


def mark_stopped(checkpoint: str, source: str, run: str) -> None:
    """The query ``run`` stopped: no task of it starts a read of ``source`` any more.
    Spark kills a stopped query's Python tasks seconds later, not at once; a task
    still on its way to its read would otherwise start one, and send the changes
    committed meanwhile, which the next run sends again from the committed position.
    Marks older than ``STOPPED_KEPT`` are swept."""
    path = _stopped_file(checkpoint, source, run)
    with contextlib.suppress(OSError):
        path.parent.mkdir(exist_ok=True)
        path.touch()
        old = time.time() - STOPPED_KEPT
        for mark in path.parent.glob("*.stopped"):
            with contextlib.suppress(OSError):
                if mark.stat().st_mtime < old:
                    mark.unlink()


def refuse_if_stopped(checkpoint: str, source: str, run: str | None) -> None:
    """Raise if the query ``run`` (None: not known) stopped (``mark_stopped``)."""
    if run is not None and _stopped_file(checkpoint, source, run).exists():
        raise DbusError(
            f"source {source!r}: the query that planned this batch stopped; the batch "
            "is read from its committed position when the runtime runs again"
        )


class NoteClock:
    """When a carried read notes how far it delivered: ``every`` seconds after its last
    note, by the clock or by the commit times of what it read since, whichever comes
    first. A read catching up a backlog reads many seconds of changes in one of the
    clock's; noted by the clock alone, a kill then sent all of them again (after a
    restart, a backlog's second of reading held 20 s of changes). A commit time that
    goes back (a server's clock set back) waits for the clock."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._next = time.monotonic() + every
        self._next_commit: float | None = None

    def due(self, commit_time: float) -> bool:
        """Whether the read notes at the transaction committed at ``commit_time``."""
        if self._next_commit is None:
            self._next_commit = commit_time + self._every
        return time.monotonic() >= self._next or commit_time >= self._next_commit

    def tried(self, commit_time: float) -> None:
        """The read noted (or tried to) at the transaction committed at ``commit_time``."""
        self._next = time.monotonic() + self._every
        self._next_commit = commit_time + self._every


class Span(SharedItems):
    """The shared read's items an open read delivers between two cuts, with its
    counts and its sinks' acknowledgments, owned by one task (or, between tasks, by
    none yet)."""

    def __init__(self, read: OpenRead, start: BinlogPosition) -> None:
        self.start = start
        self.task = ReadTask(read.source)
        self.task.deliver_to(read.config, read.stage, paced=read.paced, sinks=read.sinks,
                             lane="")  # fmt: skip
        super().__init__(
            read.source, read.stage, self.task.counts, start,
            admission=Admission(), paced=read.paced, began=self.task.began,
        )  # fmt: skip
        self.owned = False

    @property
    def delivered(self) -> bool:
        """Whether the span read anything its deployments see (a row or schema change
        of their tables, rows it could not decode): read again, its records would be
        sent again."""
        return bool(self.counts.rows or self.counts.ddl or self.counts.dead)


class OpenRead:
    """One source's read in a thread of this worker, from ``start`` on, delivering
    into the current ``Span`` until it is ended."""

    def __init__(
        self,
        config: RuntimeConfig,
        stage: FunctionStage,
        shipment: str,
        reader: BinlogReader,
        source: str,
        start: BinlogPosition,
        stop: BinlogPosition,
        lock: IO[bytes],
    ) -> None:
        self.config, self.stage, self.shipment = config, stage, shipment
        self.source = source
        self.paced = paces(config, stage)
        self.sinks = own_sinks(config, stage.routes, f"-open-{source}")
        self._reader = reader
        self._lock_file = lock
        self._turn = threading.Condition()
        self._in_transaction = False
        self._cutting = False
        self._held = False
        """Cut: the thread waits at the next transaction while the task settles."""
        self._ending = False
        self._hurried = False
        """Its query is stopping: a task's span is cut as soon as it reaches its end."""
        self.done = False
        self.error: BaseException | None = None
        self.span: Span | None = Span(self, start)
        self._notes = NoteClock(RECORD_SECONDS)
        self._deployments = [d.manifest.name for d in stage.deployments]
        self._alive_for = ALIVE_SECONDS + config.trigger_seconds
        self._listener = listen(address(config.checkpoint_dir, source), source)
        self._requests: queue.Queue[tuple[socket.socket, dict[str, Any]] | None]
        self._requests = queue.Queue()
        self._server = threading.Thread(
            target=self._serve, name=f"dbus-open-read-{source}-asks", daemon=True
        )
        self._server.start()
        threading.Thread(
            target=self._work, name=f"dbus-open-read-{source}-tasks", daemon=True
        ).start()
        self._thread = threading.Thread(
            target=self._run, args=(start, stop), name=f"dbus-open-read-{source}", daemon=True
        )
        self._thread.start()

    def _until(self) -> float:
        """When the read ends (asked at boundaries and heartbeats, by the thread that
        delivers): never, unless it is ended (``end``, a hand-over) or no task took a
        span that delivered nothing for ``ALIVE_SECONDS``. A span that delivered
        changes waits for its task up to ``ORPHANED_SECONDS``: the server moved, so a
        batch is planned from where the span begins, however late on a loaded
        machine, and ended alone its changes would be read and sent again. A query
        that stops ends it sooner (``open_read_control.end_all``)."""
        if not self._ending:
            span = self.span
            age = 0.0 if span is None or span.owned else time.monotonic() - span.task.began
            if age > (ORPHANED_SECONDS if span is not None and span.delivered else self._alive_for):
                self._ending = True
        return 0.0 if self._ending else _FAR

    def _run(self, start: BinlogPosition, stop: BinlogPosition) -> None:
        """Deliver the source's items into one span after another (``ReadTask.deliver``,
        as every read does), each up to the transaction boundary where it was cut;
        the item that begins the next span's first transaction goes first into it."""
        try:
            items = cast(
                Generator[ReadItem, None, None],
                self._reader.read(start, stop=stop, until=self._until),
            )
            first: list[ReadItem] = []
            while (span := self.span) is not None and not self._ending:
                taken = itertools.chain(first, items)
                first = []
                if span.task.deliver(taken, self._into(span, first), order=change_order):
                    break  # the items ended (the read was ended at a heartbeat)
            items.close()
        except BaseException as exc:  # the task that owns the span raises it
            self.error = exc
            drop_reader(self._reader)
        finally:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()  # tasks now find no read, and start their own
            # The socket's name is free once no thread is in its accept(); the next
            # read of the source (it may go once the lock is released) takes it.
            self._server.join(timeout=LISTEN_WAIT)
            with self._turn:
                self.done, self._ending, self._in_transaction = True, True, False
                left = self.span if self.span is not None and not self.span.owned else None
                self._turn.notify_all()
                if left is not None:
                    # Delivered again by whoever reads on: only let it all out first.
                    with contextlib.suppress(Exception):
                        left.task.settle(max(1.0, self.config.detach_seconds))
                self.sinks.release()
                self._lock_file.close()  # the next reader of the source may go

    def _into(
        self, span: Span, first: list[ReadItem]
    ) -> Callable[[ReadItem], Iterable[StageRecord] | None]:
        """What each item is to ``span`` (``SharedItems``), until a transaction begins
        after ``span`` was cut: then the read waits while the span settles, and that
        item goes back into ``first`` for the next span (none if the read ends). At
        each commit, the read notes how far it delivered when that is due, before a
        cut settles."""

        def records(item: ReadItem) -> Iterable[StageRecord] | None:
            if not self._in_transaction:
                with self._turn:
                    while self._held and not self._ending:  # the span just cut settles
                        self._turn.wait()
                    self._in_transaction = not self._ending and self.span is span
                if not self._in_transaction:
                    first.append(item)
                    return None
            produced = span(item)
            if type(item) is TransactionCommit:  # span(item) read its commit time
                if self._notes.due(span.committed_at):
                    self._note_delivered(span)
                with self._turn:
                    self._in_transaction = False
                    if self._cutting:
                        self._turn.notify_all()
            return produced

        return records

    def _note_delivered(self, span: Span) -> None:
        """Note how far ``span`` delivered (the commit just read) once its sinks
        acknowledged all of it, every deployment given everything
        (``checkpoint.record_delivered``)."""
        self._notes.tried(span.committed_at)
        if span.admission or not span.task.out.acknowledged(ACK_WAIT):
            return
        record_delivered(self.config.checkpoint_dir, self.source,
                         position_to_json(span.reached), self._deployments)  # fmt: skip

    def take(self, start: BinlogPosition | None) -> Span | None:
        """The span not yet owned, for a task planned from ``start`` (None: wherever
        it begins): None if it begins elsewhere (or the read ended)."""
        with self._turn:
            span = self.span
            if (
                self.done
                or self._ending
                or span is None
                or span.owned
                or (start is not None and coordinates(span.start) != coordinates(start))
            ):
                return None
            span.owned = True
            return span

    def cut(self, go_on: bool) -> tuple[Span, bool]:
        """End the owned span at the next transaction boundary; the thread waits while
        ``settle`` runs, then goes on in a new span (``go_on``) or ends. The span, and
        whether the read still goes on."""
        with self._turn:
            self._cutting = True
            while self._in_transaction and not self.done:
                self._turn.wait(0.1)
            self._cutting = False
            self._held = True
            span = self.span
            assert span is not None and span.owned
            return span, go_on and not self.done and not self._ending

    def hand_on(self, after: Span | None) -> None:
        """After ``cut``: the next span (None: the read ends)."""
        with self._turn:
            self.span = after
            self._held = False
            if after is None:
                self._ending = True
            self._turn.notify_all()

    def end(self) -> None:
        """End the read (at its next boundary or heartbeat) and wait for it."""
        with self._turn:
            self._ending = True
            self._turn.notify_all()
        self._thread.join()

    def hurry(self) -> None:
        """Its query is stopping: the span a task owns is cut as soon as it reaches
        the task's planned end, and so is every span after it."""
        self._hurried = True

    def _serve(self) -> None:
        """Take the source's requests, wherever they come from (``ask``): ``hurry``
        at once (while a task's span runs), the others in turn (``_work``)."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                self._requests.put(None)
                return  # the read ended
            try:
                request = json.loads(conn.makefile("rb").readline())
            except (OSError, ValueError):
                conn.close()
                continue
            if request.get("hurry"):
                self.hurry()
                with conn, contextlib.suppress(OSError):
                    conn.sendall(b'{"hurried": true}\n')
                continue
            self._requests.put((conn, request))

    def _work(self) -> None:
        """Answer the source's tasks (and hand-overs), one at a time."""
        while True:
            asked = self._requests.get()
            if asked is None:
                return
            conn, request = asked
            with conn, contextlib.suppress(OSError):
                try:
                    answer = self._task(request)
                except Exception as exc:  # a request this read cannot run: the task's own
                    answer = {"taken": False, "why": str(exc)}
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def _task(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run a task's part of the read (``request``: its range and shipment): its
        rows, or that it cannot be run here (the read begins elsewhere)."""
        if request.get("hand_over"):
            return self._hand_over()
        start = position_from_json(request["start"])
        span = self.take(start) if request["shipment"] == self.shipment else None
        if span is None:
            return {"taken": False}
        if request.get("reports"):
            self.sinks.publisher.use(request["reports"])
        try:
            rows = self._own(span, position_from_json(request["end"]))
        except BaseException as exc:
            return {"taken": True, **error_to_json(exc)}
        return {"taken": True, "rows": rows_to_json(rows)}

    def _own(self, span: Span, planned_end: BinlogPosition) -> list[tuple[str, bytes]]:
        """Own ``span`` for a task: for ``open_read_seconds`` and at least up to the
        planned end, then cut it; the task's rows."""
        seconds = self.config.open_read_seconds
        window = time.monotonic() + seconds
        longest = window + (CATCH_UP - 1) * seconds
        target = coordinates(planned_end)
        while not self.done:
            self._reach_idle_end(span, planned_end)
            now = time.monotonic()
            # Behind: the last commit was old when read, and the server has sent more
            # since (a heartbeat after it says the read is at the server's end).
            behind = span.behind and not self._reader.caught_up
            if coordinates(span.reached) >= target and (
                self._hurried or now >= longest or (now >= window and not behind)
            ):
                break
            time.sleep(0.01)
        return self._close(*self.cut(go_on=True), planned_end)

    def _reach_idle_end(self, span: Span, planned_end: BinlogPosition) -> None:
        """A server idle at or past ``planned_end`` where no transaction ends there (a
        binlog file it just rotated to, FLUSH BINARY LOGS or ``max_binlog_size``): the
        span reached the planned end, as a read that stops there does, so the task ends
        on time rather than wait for the server's next commit."""
        target = coordinates(planned_end)
        if coordinates(span.reached) >= target:
            return  # the common case: no lock taken
        with self._turn:  # the thread starts no transaction meanwhile
            idle = self._reader.idle_at
            if (
                idle is not None
                and idle >= target
                and not self._in_transaction
                and coordinates(span.reached) < target
            ):
                span.reached = planned_end

    def _close(
        self, span: Span, go_on: bool, planned_end: BinlogPosition | None
    ) -> list[tuple[str, bytes]]:
        """Settle a span just cut, and go on in a new one (``go_on``) or end the read;
        the span's rows (its counts, what its sinks took, how far it delivered). With
        ``planned_end``, the span must have reached it."""
        try:
            if self.error is not None:
                raise self.error
            target = coordinates(planned_end or span.start)
            if coordinates(span.reached) < target:
                raise DbusError(
                    f"source {self.source!r}: its open read ended at {span.reached} before "
                    f"the batch's end {planned_end}; the batch is read again"
                )
            counts = span.counts
            span.task.read_done()
            bound = self.config.detach_seconds - (time.monotonic() - span.task.began)
            failed = span.task.settle(max(1.0, bound))
            ranged = SimpleNamespace(source=self.source, start=position_to_json(span.start))
            counts.progress += read_events(ranged, span.admission, failed, counts)
            go_on = go_on and not failed and not span.admission
            counts.positions[self.source] = str(
                max(span.reached, planned_end or span.reached, key=coordinates)
            )
            if coordinates(span.reached) > target:
                counts.reached[self.source] = position_to_json(span.reached)
            self.hand_on(Span(self, span.reached) if go_on else None)
        except BaseException:
            self.hand_on(None)
            raise
        return span.task.take()

    def _hand_over(self) -> dict[str, Any]:
        """End the read for another read of the source (``quiet``): the span no task
        owns, cut and settled, as rows that read reports with its own (what was
        delivered past the last cut then counts once, and is not read again)."""
        span = self.take(None)
        if span is None:  # a task's (it fails, and is read again) or none: end
            with self._turn:
                self._ending = True
                self._turn.notify_all()
            return {"ended": False}
        try:
            rows = self._close(*self.cut(go_on=False), None)
        except BaseException:  # nothing to hand over: that read reads it again
            return {"ended": False}
        return {
            "ended": True,
            "reached": position_to_json(span.reached),
            "rows": rows_to_json(rows),
        }


@dataclass(frozen=True)
class Handed:
    """What an open read ended by ``quiet`` had delivered past its last cut: its rows
    (the quieting task hands them to Spark with its own) and how far it got."""

    rows: tuple[tuple[str, bytes], ...] = ()
    reached: BinlogPosition | None = None

    def then(self, later: Handed) -> Handed:
        """This hand-over and a ``later`` one (a read started meanwhile, ended too)."""
        if later.reached is None:
            return self
        if self.reached is None:
            return later
        reached = max(self.reached, later.reached, key=coordinates)
        return Handed(self.rows + later.rows, reached)

    def past(self, start: BinlogPosition) -> BinlogPosition:
        """Where a read of the source from ``start`` goes on: past what was delivered."""
        if self.reached is not None and coordinates(self.reached) > coordinates(start):
            return self.reached
        return start

    def add_to(self, batcher: Batcher) -> None:
        for kind, value in self.rows:
            batcher.add(kind, value)


def quiet(checkpoint: str, source: str) -> Handed:
    """Before another read of ``source``: no open read of it goes on, in this worker or
    any other (their deliveries past their cut come before this read's); what the
    ended one delivered past its last cut."""
    handed = _hand_over(checkpoint, source)
    found = _reads.pop((checkpoint, source), None)
    if found is not None:
        found.end()
    lock, later = _claim(checkpoint, source)
    if lock is not None:
        lock.close()
    return handed.then(later)


def _hand_over(checkpoint: str, source: str, timeout: float | None = None) -> Handed:
    """Ask the source's open read, wherever it runs, to end and hand the source over
    (``OpenRead._hand_over``): what it delivered past its last cut (nothing when no
    read answers within ``timeout``, or none had a span to hand over)."""
    answer = ask(checkpoint, source, {"hand_over": True}, timeout=timeout)
    if answer is None or not answer.get("ended"):
        return Handed()
    return Handed(
        rows_from_json(answer["rows"]),
        position_from_json(answer["reached"]),
    )


def _claim(checkpoint: str, source: str) -> tuple[IO[bytes] | None, Handed]:
    """The source's lock, once no open read holds it; with what a read that holds it
    handed over meanwhile. A holder that did not answer the hand-over (it was still
    starting, not listening yet) is asked again until its lock is free. None where
    there is no folder to hold the lock in."""
    path = _files(checkpoint, source)
    try:
        path.parent.mkdir(exist_ok=True)
        lock = open(path.with_suffix(".lock"), "wb")  # noqa: SIM115 (held while reading)
    except OSError:
        return None, Handed()
    handed = Handed()
    deadline = time.monotonic() + QUIET_WAIT
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock, handed
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                lock.close()
                raise DbusError(
                    f"source {source!r}: another worker's open read did not end within "
                    f"{QUIET_WAIT:.0f}s; the batch is read again"
                ) from None
        handed = handed.then(_hand_over(checkpoint, source, timeout=left))
        time.sleep(0.02)


def read_open(
    partition: Any,
    config: RuntimeConfig,
    stage: FunctionStage,
    reader: BinlogReader,
    reports: str | None,
    run: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """A ``SourceRange`` read by the source's open read: the one going on, if it
    reads on from where the range starts, else one started here from there. A task
    of a query that stopped (``run``: the query's, ``mark_stopped``) starts none."""
    checkpoint, source = config.checkpoint_dir, partition.source
    refuse_if_stopped(checkpoint, source, run)
    request = {
        "start": partition.start,
        "end": partition.end,
        "shipment": partition.shipment.key,
        "reports": reports,
    }
    answer = ask(checkpoint, source, request)
    if answer is None or not answer["taken"]:
        quiet(checkpoint, source)
        # What a read started meanwhile (and ended here) delivered is read again.
        lock, _ = _claim(checkpoint, source)
        if lock is None:
            raise DbusError(
                f"source {source!r}: cannot make {_files(checkpoint, source).parent} "
                "for its open read; make the temporary folder writable"
            )
        start = offset_to_position(partition.start)
        try:
            # Marked while this task waited for the lock: the stop ended every read
            # of the source it found, and this one would outlive it.
            refuse_if_stopped(checkpoint, source, run)
            _reads[(checkpoint, source)] = OpenRead(
                config, stage, partition.shipment.key, reader, source, start,
                offset_to_position(partition.end), lock,
            )  # fmt: skip
        except BaseException:
            lock.close()  # never held by a read that did not start
            raise
        answer = ask(checkpoint, source, request)
        if answer is None or not answer["taken"]:
            read = _reads.pop((checkpoint, source))
            read.end()
            if read.error is not None:
                raise read.error  # it failed before it could answer
            raise DbusError(f"source {source!r}: its open read ended as it started")
    if "error" in answer:
        raise error_from_json(answer)
    batcher = Batcher(source)
    for kind, value in rows_from_json(answer["rows"]):
        batcher.add(kind, value)
    last = batcher.flush()
    if last is not None:
        yield last
