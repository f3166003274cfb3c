"""A source's open read goes on between micro-batches (``dbus_spark.reads.open_read``).

The driver's planning and the tasks are run as Spark runs them, on the real
MariaDB and Kafka: a change committed after a task ended reaches Kafka with no task
running; the next task, planned from where the last one cut, takes the read over
(in this process, or answered from it in another, as Spark's workers take turns)
and counts that change once; a task planned from elsewhere ends it and reads again
from its own start (at least once); a read still starting when another asks for its
source hands it over once it listens; a read no task takes ends by itself, at once if it
delivered nothing, else after a longer bound, waiting meanwhile for the next task
however late (nothing sent again); a task of a query that stopped starts none; a run
killed between batches starts its next past what its read noted as delivered, not at
its last batch; and a task planned at a binlog file the server just rotated to ends on
time while the server idles (MariaDB and MySQL, each a server of the module's own)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from pyspark import cloudpickle
from scratch import scratch_database
from support import kafka_ids, relay_table

from dbus_fn.capture import coordinates, position_from_json
from dbus_fn.errors import DbusError
from dbus_spark.planning.source import BinlogSourceReader
from dbus_spark.reads import open_read, open_read_control
from dbus_spark.reads.range_read import SourceRange
from dbus_spark.sinks.batch_commit import SinkWriter, TaskReport, task_counts
from dbus_spark.state.checkpoint import ProgressFolder

pytestmark = [pytest.mark.e2e]

TASK = textwrap.dedent("""
    import json, sys
    from pyspark import cloudpickle
    from dbus_spark.sinks.batch_commit import task_counts
    reader, partition = cloudpickle.loads(sys.stdin.buffer.read())
    report = task_counts(reader.read(partition))
    print(json.dumps({"rows": report.stage.rows, "reached": report.stage.reached}))
""")


KEPT_READING = textwrap.dedent("""
    import base64, sys, time
    from pyspark import cloudpickle
    from dbus_spark.sinks.batch_commit import task_counts
    reader, partition = cloudpickle.loads(sys.stdin.buffer.read())
    report = task_counts(reader.read(partition))
    print(base64.b64encode(cloudpickle.dumps(report)).decode(), flush=True)
    time.sleep(600)  # its open read goes on in this process until it is killed
""")


class Batches:
    """Plans, reads and commits micro-batches of one source as Spark does."""

    def __init__(self, path: Path, run: str | None = None) -> None:
        self.path = path
        self.planner = BinlogSourceReader(str(path), run=run)
        self.writer = SinkWriter(str(path))
        self.offset = self.planner.initialOffset()
        self.batch = 0

    def plan(self) -> SourceRange:
        end = self.planner.latestOffset(self.offset)
        [partition] = self.planner.partitions(self.offset, end)
        assert isinstance(partition, SourceRange)
        self.offset = end
        return partition

    def commit(self, report: TaskReport) -> TaskReport:
        self.writer.commit([report], self.batch)
        self.batch += 1
        return report


def _insert(scratch: Scratch, *ids: int) -> None:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s)", (i,))


def _batches_of(
    scratch: Scratch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[float], Batches]]:
    """Batches of a relayed table, made with the open read's time (in seconds)."""
    monkeypatch.setenv(open_read_control.LOCAL_ENV, "1")  # as on a local master
    folder, _table = relay_table(
        scratch.fresh_database, scratch.function_folder, f"kafka://{scratch.kafka_topic}",
        initial="none",
    )  # fmt: skip
    made: list[Batches] = []

    def make(seconds: float) -> Batches:
        config = replace(
            scratch.runtime_config(folder),
            checkpoint_dir=str(tmp_path / "cp"),
            open_read_seconds=seconds,
            detach_seconds=0.0,
        )
        made.append(Batches(config.save(tmp_path / "cp.config.json")))
        return made[-1]

    yield make
    for key in [k for k in open_read._reads if k[0] == str(tmp_path / "cp")]:
        open_read._reads.pop(key).end()
    for run in made:
        run.planner.stop()


@pytest.fixture
def open_batches(
    scratch: Scratch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[float], Batches]]:
    """Batches of a relayed table on the shared server (``_batches_of``)."""
    yield from _batches_of(scratch, tmp_path, monkeypatch)


@pytest.fixture
def private_batches(
    scratch: Scratch,
    private_database: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Scratch, Callable[[float], Batches]]]:
    """Batches of a relayed table on a server of this module's own (``_batches_of``),
    whose binlog the test may rotate: with the scratch that writes to it."""
    own = scratch._replace(fresh_database=private_database)
    for make in _batches_of(own, tmp_path, monkeypatch):
        yield own, make


@pytest.fixture
def batches(open_batches: Callable[[float], Batches]) -> Batches:
    return open_batches(0.5)


def test_the_read_goes_on_between_batches_and_the_next_task_takes_it_over(
    scratch: Scratch, batches: Batches
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    _insert(scratch, 1)
    first = batches.commit(task_counts(batches.planner.read(batches.plan())))
    assert first.stage.rows == 1
    # No task runs: the read that outlived the first delivers the next change.
    _insert(scratch, 2)
    assert kafka_ids(bootstrap, scratch.kafka_topic, 2) == [1, 2]
    second = batches.plan()
    report = batches.commit(task_counts(batches.planner.read(second)))
    assert report.stage.rows == 1, "the change delivered between batches counts in the next"
    # A third batch's task runs in another process (Spark's workers take turns): this
    # process's read answers it; the change is read and sent once.
    _insert(scratch, 3)
    third = batches.plan()
    task = subprocess.run(
        [sys.executable, "-c", TASK], input=cloudpickle.dumps((batches.planner, third)),
        capture_output=True, timeout=120, check=False, env=dict(os.environ),
    )  # fmt: skip
    assert task.returncode == 0, task.stderr.decode()[-3000:]
    answered = json.loads(task.stdout.decode().strip().splitlines()[-1])
    assert answered["rows"] == 1
    _insert(scratch, 4)
    # Each once: no task read again what the read before it had sent.
    assert kafka_ids(bootstrap, scratch.kafka_topic, 5, within=10) == [1, 2, 3, 4]


def test_a_task_planned_from_elsewhere_ends_the_read_and_reads_from_its_start(
    scratch: Scratch, batches: Batches
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    _insert(scratch, 1)
    planned = batches.plan()
    batches.commit(task_counts(batches.planner.read(planned)))
    _insert(scratch, 2)
    assert kafka_ids(bootstrap, scratch.kafka_topic, 2) == [1, 2]
    # The first batch again (as after a crash before its commit): from its own start.
    again = task_counts(batches.planner.read(planned))
    assert again.stage.rows >= 1
    assert kafka_ids(bootstrap, scratch.kafka_topic, 4) == [1, 1, 2, 2]


def test_a_read_no_task_takes_ends_by_itself_and_lets_the_source_go(
    scratch: Scratch, batches: Batches
) -> None:
    _insert(scratch, 1)
    batches.commit(task_counts(batches.planner.read(batches.plan())))
    key = (str(batches.planner._config.checkpoint_dir), "src")
    read = open_read._reads[key]
    assert not read.done
    deadline = time.monotonic() + open_read.ALIVE_SECONDS + 30
    while not read.done and time.monotonic() < deadline:
        time.sleep(0.1)
    assert read.done, f"the read went on {open_read.ALIVE_SECONDS + 30:.0f}s with no task"
    lock_path = open_read._files(*key).with_suffix(".lock")
    with open(lock_path, "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while still held
    assert os.path.exists(lock_path)


def test_a_read_that_delivered_changes_no_task_took_yet_waits_for_the_next_task(
    scratch: Scratch, batches: Batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_read, "ALIVE_SECONDS", 2.0)
    bootstrap = scratch.services.kafka.bootstrap_servers
    _insert(scratch, 1)
    batches.commit(task_counts(batches.planner.read(batches.plan())))
    cut = time.monotonic()  # the span no task owns yet begins
    _insert(scratch, 2)
    assert kafka_ids(bootstrap, scratch.kafka_topic, 2) == [1, 2]
    # The next batch is late (its planning held up on a loaded machine): past the
    # read's time alone, the read that sent 2 still waits for the task.
    time.sleep(max(0.0, cut + 2.0 * open_read.ALIVE_SECONDS - time.monotonic()))
    read = open_read._reads[(str(batches.planner._config.checkpoint_dir), "src")]
    assert not read.done, "a read that delivered a change ended before a task took it"
    report = batches.commit(task_counts(batches.planner.read(batches.plan())))
    assert report.stage.rows == 1, "the change delivered between batches counts in the next"
    assert kafka_ids(bootstrap, scratch.kafka_topic, 3, within=10) == [1, 2], "sent once"


def test_a_read_whose_delivered_changes_no_task_takes_ends_after_its_longer_bound(
    scratch: Scratch, batches: Batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(open_read, "ALIVE_SECONDS", 1.0)
    monkeypatch.setattr(open_read, "ORPHANED_SECONDS", 4.0)
    bootstrap = scratch.services.kafka.bootstrap_servers
    _insert(scratch, 1)
    batches.commit(task_counts(batches.planner.read(batches.plan())))
    _insert(scratch, 2)
    assert kafka_ids(bootstrap, scratch.kafka_topic, 2) == [1, 2]
    # No batch comes (a query stopped without its driver ending its reads): the read
    # ends, and lets its source go.
    read = open_read._reads[(str(batches.planner._config.checkpoint_dir), "src")]
    deadline = time.monotonic() + open_read.ORPHANED_SECONDS + 30
    while not read.done and time.monotonic() < deadline:
        time.sleep(0.1)
    assert read.done, "a read no task took went on past its bound"
    # Whoever reads the source next reads it from the batch's start: at least once.
    report = batches.commit(task_counts(batches.planner.read(batches.plan())))
    assert report.stage.rows == 1
    assert kafka_ids(bootstrap, scratch.kafka_topic, 3) == [1, 2, 2]


def test_a_read_still_starting_when_its_source_is_asked_for_hands_it_over_once_it_listens(
    scratch: Scratch, batches: Batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    _insert(scratch, 1)
    planned = batches.plan()
    checkpoint = str(batches.planner._config.checkpoint_dir)
    lock_path = open_read._files(checkpoint, "src").with_suffix(".lock")
    listen = open_read.listen
    starts = threading.Event()

    def slow_listen(name: str, source: str) -> Any:
        starts.set()
        time.sleep(1.0)  # the read holds its source's lock, but no socket answers yet
        return listen(name, source)

    monkeypatch.setattr(open_read, "listen", slow_listen)
    failed: list[BaseException] = []

    def task() -> None:
        try:
            task_counts(batches.planner.read(planned))
        except DbusError as exc:
            failed.append(exc)

    starting = threading.Thread(target=task)
    starting.start()
    assert starts.wait(30), "the task started its read"  # which holds the source's lock
    began = time.monotonic()
    handed = open_read.quiet(checkpoint, "src")
    took = time.monotonic() - began
    starting.join(60)
    # Asked again once it listened, it handed its source over, with how far it read
    # (past the planned end too: it read open, other tests' writes on the server too).
    assert handed.reached is not None
    assert coordinates(handed.reached) >= coordinates(position_from_json(planned.start))
    # Not left to give up after QUIET_WAIT (60 s).
    assert took < 30, f"the source was handed over after {took:.1f}s"
    # Its own task either asked first (and read its range) or found the read ended
    # (and fails: Spark reads the batch again). Nothing holds the source after.
    assert [str(e) for e in failed] in ([], ["source 'src': its open read ended as it started"])
    with open(lock_path, "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while still held
    monkeypatch.setattr(open_read, "listen", listen)
    assert task_counts(batches.planner.read(planned)).stage.rows == 1


def test_a_read_that_fails_in_its_thread_fails_its_task_with_the_reason(
    scratch: Scratch, batches: Batches
) -> None:
    _insert(scratch, 1)
    planned = batches.plan()
    gone = {**planned.start, "file": f"{planned.start['file'].rsplit('.', 1)[0]}.999999"}
    with pytest.raises(DbusError, match=r"999999") as failed:
        task_counts(batches.planner.read(replace(planned, start=gone)))
    assert "\n" not in str(failed.value), "one line, naming the position and what to do"
    # Nothing is left holding the source: the next task reads it.
    assert task_counts(batches.planner.read(planned)).stage.rows == 1


def test_a_read_on_a_master_elsewhere_ends_with_its_task(
    scratch: Scratch, batches: Batches, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(open_read_control.LOCAL_ENV, "0")  # executors may be on other hosts
    _insert(scratch, 1)
    assert task_counts(batches.planner.read(batches.plan())).stage.rows == 1
    assert not open_read._reads, "no read outlives its task"
    _insert(scratch, 2)
    bootstrap = scratch.services.kafka.bootstrap_servers
    assert kafka_ids(bootstrap, scratch.kafka_topic, 2, within=5) == [1]


def _timed_read(batches: Batches, partition: SourceRange) -> tuple[TaskReport, float]:
    began = time.monotonic()
    report = task_counts(batches.planner.read(partition))
    return report, time.monotonic() - began


def test_a_task_at_the_servers_end_ends_on_time_however_old_the_last_commit(
    scratch: Scratch, open_batches: Callable[[float], Batches]
) -> None:
    batches = open_batches(2.0)
    _insert(scratch, 1)
    time.sleep(1.5)  # the commit is old when read: the read looks behind the server
    report, took = _timed_read(batches, batches.plan())
    assert report.stage.rows == 1
    # The server's heartbeat says it has nothing more: not behind, so the task ends at
    # its time (2 s), not after catching up for five times that (10 s).
    assert took < 2.0 * (open_read.CATCH_UP - 1), f"the task read {took:.1f}s"


def test_a_stopping_query_s_task_ends_as_soon_as_it_reaches_its_end(
    scratch: Scratch, open_batches: Callable[[float], Batches]
) -> None:
    batches = open_batches(60.0)
    checkpoint = str(batches.planner._config.checkpoint_dir)
    _insert(scratch, 1)
    planned = batches.plan()
    # The query stops (``job.stop``) 1 s into a task that would own the read 60 s.
    threading.Timer(1.0, open_read_control.hurry_all, (checkpoint, ["src"])).start()
    report, took = _timed_read(batches, planned)
    batches.commit(report)
    assert report.stage.rows == 1
    assert took < 30, f"the task read {took:.1f}s of its 60s"
    # The read goes on (the stop ends it next): a change after the cut is delivered,
    # and counted by the next task, which ends as soon as it reaches its end too.
    _insert(scratch, 2)
    assert kafka_ids(scratch.services.kafka.bootstrap_servers, scratch.kafka_topic, 2) == [1, 2]
    report, took = _timed_read(batches, batches.plan())
    assert report.stage.rows == 1
    assert took < 30, f"the task read {took:.1f}s of its 60s"


def test_a_task_that_outlives_its_query_s_stop_starts_no_read(
    scratch: Scratch, batches: Batches
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    checkpoint = str(batches.planner._config.checkpoint_dir)
    stopped = BinlogSourceReader(str(batches.path), run="stopped")
    _insert(scratch, 1)
    planned = batches.plan()
    # The query stops (``job.stop``) while a task of it is still on its way to its
    # read: Spark kills a stopped query's Python tasks seconds later, not at once.
    open_read_control.end_all(checkpoint, ["src"], "stopped")
    with pytest.raises(DbusError, match=r"'src'.*stopped") as refused:
        task_counts(stopped.read(planned))
    assert "\n" not in str(refused.value), "one line, saying where the batch is read"
    assert not open_read._reads, "no read started for a stopped query"
    _insert(scratch, 2)
    assert kafka_ids(bootstrap, scratch.kafka_topic, 1, within=5) == [], "nothing sent"
    # The next start of the query reads the batch from its start, each change once.
    report = task_counts(BinlogSourceReader(str(batches.path), run="next").read(planned))
    assert report.stage.rows >= 1
    assert kafka_ids(bootstrap, scratch.kafka_topic, 3, within=10) == [1, 2]


def test_a_run_killed_between_batches_starts_past_what_its_read_noted_as_delivered(
    scratch: Scratch, batches: Batches
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    notes = ProgressFolder.of(str(batches.planner._config.checkpoint_dir))
    _insert(scratch, 1)
    first = batches.plan()
    # The batch's task runs in a process of its own, whose read goes on after it.
    reading = subprocess.Popen(
        [sys.executable, "-c", KEPT_READING], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env=dict(os.environ), start_new_session=True,
    )  # fmt: skip
    try:
        assert reading.stdin is not None and reading.stdout is not None
        reading.stdin.write(cloudpickle.dumps((batches.planner, first)))
        reading.stdin.close()
        batches.commit(cloudpickle.loads(base64.b64decode(reading.stdout.readline())))
        # Between batches the read delivers 2 and 3, and notes how far its sinks
        # acknowledged everything (about every second, at a transaction's end).
        _insert(scratch, 2)
        time.sleep(open_read.RECORD_SECONDS + 0.2)
        _insert(scratch, 3)
        assert kafka_ids(bootstrap, scratch.kafka_topic, 3) == [1, 2, 3]
        # The server is shared: other tests' transactions may follow 3 in its binlog,
        # and the read notes at whichever transaction's end comes a second after the
        # last note. So wait for a note at or past 3's end, whatever it is exactly.
        # Others may also write nothing for a while: the test's own transactions, in
        # a database no deployment reads, keep transaction ends coming meanwhile.
        three = batches.planner.latestOffset(batches.offset)["src"]
        deadline = time.monotonic() + 30
        with (
            scratch_database(scratch.services.mariadb) as other,
            other.connect() as conn,
            conn.cursor() as cur,
        ):
            cur.execute("CREATE TABLE ticks (id INT AUTO_INCREMENT PRIMARY KEY)")
            while _at(notes.read("delivered").get("src", {}).get("position")) < _at(three):
                assert time.monotonic() < deadline, f"no note at 3's end: {notes.read('delivered')}"
                cur.execute("INSERT INTO ticks VALUES ()")
                time.sleep(0.2)
    finally:
        os.killpg(reading.pid, signal.SIGKILL)  # as kill -9 of the runtime: no batch commits
        reading.wait()
        if reading.stdout is not None:
            reading.stdout.close()
    noted = notes.read("delivered")["src"]["position"]  # the last note, once killed
    assert _at(noted) >= _at(three)
    _insert(scratch, 4)
    # The next run plans from the last committed batch's end, and starts past 3: at
    # the read's last note.
    after = Batches(batches.path)
    after.offset = batches.offset
    planned = after.plan()
    assert _at(planned.start) == _at(noted)
    assert notes.read("delivered") == {}, "a note is taken once"
    try:
        assert task_counts(after.planner.read(planned)).stage.rows == 1
    finally:
        after.planner.stop()
    assert kafka_ids(bootstrap, scratch.kafka_topic, 5, within=10) == [1, 2, 3, 4], "each once"


def _at(position: dict[str, Any] | None) -> tuple[int, int]:
    """A position's file and offset, in the binlog's order (none: before all)."""
    return coordinates(position_from_json(position)) if position else (-1, -1)


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_task_planned_at_a_fresh_binlog_file_ends_on_an_idle_server(
    private_batches: tuple[Scratch, Callable[[float], Batches]],
) -> None:
    scratch, make = private_batches
    batches = make(0.5)
    _insert(scratch, 1)
    batches.commit(task_counts(batches.planner.read(batches.plan())))
    # The server rotates its binlog (FLUSH BINARY LOGS, max_binlog_size) and then
    # idles: its position is in a file where no transaction ends yet.
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
    planned = batches.plan()
    assert planned.end["file"] != planned.start["file"]
    done: list[TaskReport] = []
    task = threading.Thread(
        target=lambda: done.append(task_counts(batches.planner.read(planned))), daemon=True
    )
    began = time.monotonic()
    task.start()
    task.join(30)
    assert done, f"the task still read {time.monotonic() - began:.0f}s after it began"
    batches.commit(done[0])
    _insert(scratch, 2)
    assert kafka_ids(scratch.services.kafka.bootstrap_servers, scratch.kafka_topic, 2) == [1, 2]


@pytest.mark.parametrize("server", ["mariadb", "mysql"])
def test_a_backlog_read_between_batches_is_noted_at_each_second_of_its_commit_times(
    private_batches: tuple[Scratch, Callable[[float], Batches]],
) -> None:
    """A read catching up a backlog reads many seconds of changes in a moment. Noted a
    second of the clock apart, a kill sent all of them again (after a restart, one
    second of a backlog's reading held 20 s of changes). Noted at each second of their
    commit times too, its notes follow the backlog. The backlog: ten transactions a
    second apart by their commit times (``SET TIMESTAMP``), written and read within a
    moment, on the module's own server, where no later commit brings a note of its own."""
    scratch, make = private_batches
    batches = make(0.5)
    notes = ProgressFolder.of(str(batches.planner._config.checkpoint_dir))
    _insert(scratch, 1)
    batches.commit(task_counts(batches.planner.read(batches.plan())))
    # No task runs: the read that outlived the batch reads the backlog.
    now = int(time.time())
    half: dict[str, Any] = {}
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        for second, i in enumerate(range(2, 12), start=1):
            cur.execute("SET TIMESTAMP = %s", (now + second,))
            cur.execute("INSERT INTO t VALUES (%s)", (i,))
            if i == 6:
                half = batches.planner.latestOffset(batches.offset)["src"]
    bootstrap = scratch.services.kafka.bootstrap_servers
    assert kafka_ids(bootstrap, scratch.kafka_topic, 11) == list(range(1, 12))
    # Each of 2..11 is a note's turn; a note waits for Kafka's acknowledgments (half a
    # second at most, else it is not made), so the assertion asks for half the backlog.
    deadline = time.monotonic() + 10
    while _at(notes.read("delivered").get("src", {}).get("position")) < _at(half):
        assert time.monotonic() < deadline, f"no note past 6: {notes.read('delivered')}"
        time.sleep(0.1)
