"""The measurements the runtime benches share: COMMIT→Kafka latency under a steady
insert rate, messages counted in a topic (by its watermarks, or read committed), peak
memory of a process tree, the CPU each part of the machine took, and the CPU a
process's descendants took."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Self

import psutil
import pymysql
from support import kafka_consumer


def percentile(ordered: list[float], fraction: float) -> float:
    """The value ``fraction`` of the way up ``ordered`` (nearest rank, as the benches
    have always reported p99: ``ordered[int(len * 0.99) - 1]``)."""
    if not ordered:
        raise ValueError("no values")
    return ordered[max(int(len(ordered) * fraction) - 1, 0)]


@dataclass(frozen=True, slots=True)
class SteadyLoad:
    """What one steady-rate run measured: milliseconds from each row's COMMIT
    (client side, after it returned) to its message being readable in Kafka."""

    latencies_ms: list[float]
    committed: int
    achieved_rate: float
    missing: tuple[int, ...] = ()
    """Rows committed whose message the consumer never saw."""
    missing_in_topic: tuple[int, ...] = ()
    """Of those, the ones a fresh read of the whole topic finds: late to the
    consumer, not lost."""

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)

    def describe(self) -> str:
        text = (
            f"p50 {self.p50:.0f} ms, p99 {self.p99:.0f} ms "
            f"({len(self.latencies_ms)} of {self.committed} rows, "
            f"inserted at {self.achieved_rate:,.0f} rows/s)"
        )
        if self.missing:
            shown = list(self.missing[:10])
            text += (
                f"; MISSING ids {shown}{' ...' if len(self.missing) > 10 else ''}, of which "
                f"{len(self.missing_in_topic)} are in the topic when it is read again"
            )
        return text


def steady_load(
    bootstrap: str,
    dsn_settings: dict[str, Any],
    database: str,
    table: str,
    topic: str,
    rate: int,
    seconds: float,
    row_id: Callable[[bytes], int],
    writers: int = 0,
) -> SteadyLoad:
    """Insert ``rate`` rows/s into ``table`` (``id INT PRIMARY KEY, v VARCHAR``), one
    row per transaction, ids from 0, while a consumer of ``topic`` notes when each
    row's message arrives (``row_id`` reads the row's id from a message key).

    One connection waits for each COMMIT to be made durable (about 700 a second
    here), so ``writers`` connections (default: one per 200 rows/s) take turns on
    one schedule, and the server commits them in groups.
    """
    committed: dict[int, float] = {}
    received: dict[int, float] = {}
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
    consumer.subscribe([topic])
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is not None and not msg.error() and msg.key() is not None:
                received.setdefault(row_id(msg.key()), time.monotonic())

    total = int(rate * seconds)
    writers = writers or -(-rate // 200)
    began = time.monotonic() + 0.5  # every writer connected

    def write(first: int) -> None:
        conn = pymysql.connect(**dsn_settings, database=database, autocommit=True)
        with conn.cursor() as cur:
            for n in range(first, total, writers):
                pause = began + n / rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                cur.execute(f"INSERT INTO {table} (id, v) VALUES (%s, %s)", (n, "x"))
                committed[n] = time.monotonic()
        conn.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        achieved = len(committed) / (max(committed.values()) - began)
        deadline = time.monotonic() + 60
        while any(n not in received for n in committed) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop.set()
        reader.join()
        consumer.close()
    latencies = sorted((received[n] - t) * 1000 for n, t in committed.items() if n in received)
    missing = tuple(sorted(n for n in committed if n not in received))
    found = topic_ids(bootstrap, topic, row_id) & set(missing) if missing else set()
    return SteadyLoad(latencies, len(committed), achieved, missing, tuple(sorted(found)))


def topic_ids(bootstrap: str, topic: str, row_id: Callable[[bytes], int]) -> set[int]:
    """The row ids of every message of ``topic``, read from its start to its end."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = kafka_consumer(bootstrap, {"enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        ids: set[int] = set()
        ended: set[int] = set()
        deadline = time.monotonic() + 60
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                ended.add(msg.partition())
            elif msg.key() is not None:
                ids.add(row_id(msg.key()))
        return ids
    finally:
        consumer.close()


class CommittedCount:
    """Messages a ``read_committed`` consumer reads from Kafka topics: for transactional
    writers, whose partitions also hold commit markers and messages not committed yet,
    so their watermarks overcount (``TopicCount``). Each call reads on from the last."""

    def __init__(self, bootstrap: str) -> None:
        self._consumer = kafka_consumer(bootstrap, {"isolation.level": "read_committed"})
        self._topic: str | None = None
        self._count = 0

    def __call__(self, topic: str) -> int:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if self._topic != topic:
            topics = self._consumer.list_topics(topic, timeout=10).topics
            if topic not in topics or topics[topic].error is not None:
                return 0
            self._consumer.assign(
                [TopicPartition(topic, p, OFFSET_BEGINNING) for p in topics[topic].partitions]
            )
            self._topic, self._count = topic, 0
        while batch := self._consumer.consume(10_000, timeout=0.05):
            self._count += sum(1 for message in batch if message.error() is None)
        return self._count


class TopicCount:
    """Messages readable in Kafka topics: the sum of their partitions' high watermarks
    (the writers measured here are idempotent, not transactional, so every offset
    below the watermark is one message)."""

    def __init__(self, bootstrap: str) -> None:
        self._consumer = kafka_consumer(bootstrap)

    def __call__(self, topic: str) -> int:
        from confluent_kafka import KafkaException, TopicPartition

        topics = self._consumer.list_topics(topic, timeout=10).topics
        if topic not in topics or topics[topic].error is not None:
            return 0
        try:
            return sum(
                self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in topics[topic].partitions
            )
        except KafkaException:  # a topic just made, whose leader is not elected yet
            return 0

    def span(self, topic: str) -> float:
        """Seconds from the first message's timestamp to the last's, over the topic's
        partitions: how long the writer took once it was writing (each producer stamps
        a message when it is handed over, Java's as librdkafka's)."""
        from confluent_kafka import TopicPartition

        stamps = []
        for partition in self._consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=10
            )
            for offset in {low, high - 1} if high > low else ():
                self._consumer.assign([TopicPartition(topic, partition, offset)])
                message = self._consumer.consume(1, timeout=30)
                if not message or message[0].error() is not None:
                    raise RuntimeError(f"{topic}[{partition}]@{offset}: no message read")
                stamps.append(message[0].timestamp()[1] / 1000)
        self._consumer.unassign()
        if len(stamps) < 2:
            raise RuntimeError(f"{topic}: fewer than two messages to time")
        return max(stamps) - min(stamps)

    def seconds_until(
        self,
        topic: str,
        count: int,
        began: float,
        failure: Callable[[], str | None] = lambda: None,
        timeout: float = 1800,
    ) -> float:
        """Seconds from ``began`` (``time.monotonic()``) until ``topic`` holds ``count``
        messages; ``failure()``, asked every second, says why the writer stopped."""
        deadline = time.monotonic() + timeout
        asked = time.monotonic()
        while (now := self(topic)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {now} of {count} messages in {timeout:g} s")
            if time.monotonic() - asked > 1:
                asked = time.monotonic()
                if (why := failure()) is not None:
                    raise RuntimeError(f"{topic}: {now} of {count} messages, then: {why}")
            time.sleep(0.05)
        return time.monotonic() - began

    def close(self) -> None:
        self._consumer.close()


class Sampler:
    """What a subclass measures, taken every ``every`` seconds in a thread while a
    ``with`` block runs (``take``), the first time at once."""

    def __init__(self, every: float) -> None:
        self._every = every
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.take()
            if self._done.wait(self._every):
                return

    def take(self) -> None:
        raise NotImplementedError


class PeakMemory(Sampler):
    """Peak memory (MiB) of a set of processes, sampled every 0.2 s in a thread.

    RSS sums count a page once per process that maps it, and Spark's Python workers
    are forked from daemons, so they share most of their pages; PSS (proportional
    set size) splits each shared page among its sharers, so the PSS sum is the
    memory the processes really hold. Peaks: ``jvm`` (RSS of Java processes),
    ``python_rss`` and ``python_pss`` (the others), ``total_pss``.
    """

    def __init__(self, processes: Callable[[], Iterable[psutil.Process]]) -> None:
        super().__init__(0.2)
        self._processes = processes
        self.peaks = dict.fromkeys(("jvm", "python_rss", "python_pss", "total_pss"), 0.0)

    def take(self) -> None:
        now = dict.fromkeys(self.peaks, 0.0)
        try:
            processes = list(self._processes())
        except psutil.Error:  # one ended while the list was made: the next sample
            return
        for process in processes:
            try:
                memory = process.memory_full_info()
                name = process.name()
            except psutil.Error:
                continue
            if "java" in name:
                now["jvm"] += memory.rss / 2**20
            else:
                now["python_rss"] += memory.rss / 2**20
                now["python_pss"] += memory.pss / 2**20
            now["total_pss"] += memory.pss / 2**20
        for key, value in now.items():
            self.peaks[key] = max(self.peaks[key], value)


class CpuShare(Sampler):
    """The CPU each part of the machine took while it runs (cores: CPU seconds over
    wall seconds), sampled every 0.5 s in a thread so a process that ends meanwhile
    still counts up to its last sample: the runtime's Spark (this process's children,
    its JVM and its Python workers apart), each local service (by its command line),
    the bench itself, the rest; and how busy the machine was."""

    PARTS = ("Spark's Python workers", "Spark's JVM", "MariaDB/MySQL", "Kafka",
             "Elasticsearch", "ZooKeeper", "the bench", "the rest")  # fmt: skip

    def __init__(self) -> None:
        super().__init__(0.5)
        self._me = psutil.Process()
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self.cores: dict[str, float] = {}
        self.busy = 0.0

    def __enter__(self) -> Self:
        self._began = time.monotonic()
        self._machine = psutil.cpu_times()
        self._take(first=True)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._take(first=False)
        seconds = time.monotonic() - self._began
        spent = dict.fromkeys(self.PARTS, 0.0)
        for pid, (part, cpu) in self._last.items():
            spent[part] += cpu - self._first.get(pid, 0.0)
        self.cores = {part: cpu / seconds for part, cpu in spent.items()}
        now = psutil.cpu_times()
        total = sum(now) - sum(self._machine)
        idle = (now.idle + now.iowait) - (self._machine.idle + self._machine.iowait)
        self.busy = 1.0 - idle / total if total > 0 else 0.0

    def take(self) -> None:
        self._take(first=False)

    def _take(self, *, first: bool) -> None:
        children = {p.pid for p in tree(self._me)} - {self._me.pid}
        for process in psutil.process_iter(["cmdline", "cpu_times"]):
            times = process.info["cpu_times"]
            if times is None:
                continue
            cpu = times.user + times.system
            if first:
                self._first[process.pid] = cpu
            part = self._part(process.pid, " ".join(process.info["cmdline"] or ()), children)
            self._last[process.pid] = (part, cpu)

    def _part(self, pid: int, command: str, children: set[int]) -> str:
        if pid == self._me.pid:
            return "the bench"
        if pid in children:
            jvm = "/java" in command.split(" ", 1)[0]
            return "Spark's JVM" if jvm else "Spark's Python workers"
        for marker, part in (("mariadbd", "MariaDB/MySQL"), ("mysqld", "MariaDB/MySQL"),
                             ("kafka.Kafka", "Kafka"), ("elasticsearch", "Elasticsearch"),
                             ("zookeeper", "ZooKeeper")):  # fmt: skip
            if marker in command:
                return part
        return "the rest"

    def text(self) -> str:
        taken = [(part, cores) for part, cores in self.cores.items() if cores >= 0.005]
        parts = ", ".join(f"{part} {cores:.2f}" for part, cores in taken)
        return f"{parts} cores; the machine {self.busy:.0%} busy ({psutil.cpu_count()} cores)"


def adopt_orphans() -> None:
    """Become the reaper of this process's orphaned descendants (Linux), so each of them
    stays in this process's tree, where ``TreeCpu`` samples its CPU (a service or a Spark
    process detaches from the command that started it)."""
    pr_set_child_subreaper = 36
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def cache_bytecode() -> None:
    """Let this process's descendants write Python's bytecode caches, as a user's
    runtime does (tox and a plain shell alike): with ``PYTHONDONTWRITEBYTECODE`` set, a
    module that has no cache yet (this checkout's own, before anything wrote them) is
    compiled from source in each Python process Spark starts, and a runtime's CPU comes
    out seconds higher than a user's."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        print("PYTHONDONTWRITEBYTECODE unset for this bench's processes", file=sys.stderr)


class TreeCpu(Sampler):
    """The CPU seconds this process's descendants spend while it runs, sampled every
    ``every`` seconds in a thread: each process counts up to its last sample, so one
    that lives less than that may be missed. ``RUSAGE_CHILDREN`` cannot count them:
    Spark's worker daemons ignore SIGCHLD, so the kernel reaps their forked workers
    and their CPU is added to no parent's children. A process whose parent ends before
    it stays in the tree only when this process adopts orphans (``PR_SET_CHILD_SUBREAPER``)."""

    def __init__(self, every: float = 0.1) -> None:
        super().__init__(every)
        self._me = psutil.Process()
        self._cpu: dict[tuple[int, float], float] = {}
        self.seconds = 0.0

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.seconds = sum(self._cpu.values(), 0.0)

    def take(self) -> None:
        self._cpu.update(cpu_so_far(self._me))


def cpu_so_far(root: psutil.Process) -> dict[tuple[int, float], float]:
    """The CPU seconds each process under ``root`` has spent so far, by its pid and its
    start (a pid may be used again: a process is its pid and its start)."""
    spent = {}
    for process in tree(root)[1:]:
        try:
            key = (process.pid, process.create_time())
            times = process.cpu_times()
        except psutil.Error:
            continue
        spent[key] = times.user + times.system
    return spent


def tree(root: psutil.Process) -> list[psutil.Process]:
    """``root`` and every process under it (those that are gone are left out)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
