"""What the chaos tests share: a recorded workload, the runtime as a killable process, checks.

The workload writes a mixed insert/update/delete load, single statements,
multi-row statements and multi-statement transactions (some rolled back), on
several tables. Every row has a ``ver`` column the writer bumps on each change
and never reuses for a key, even across a delete and a re-insert, so every
committed change is known as ``(table, key, ver, op)``. The checks prove what
the runtime promises: every committed change is in Kafka, one key's changes
arrive in commit order (a replay after a crash may repeat a stretch, never
reorder it), and each Elasticsearch index equals its MySQL table.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psutil
import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from elasticsearch import Elasticsearch
from elasticsearch.helpers import scan
from support import kafka_consumer, process_command, process_running, topic_exists

from dbus_fn.columns import row_to_json
from dbus_fn.kafka_binding import from_kafka_message
from dbus_spark.config import logs

Key = tuple[Any, ...]
SEED_ENV = "DBUS_CHAOS_SEED"


def new_seed() -> int:
    """A chaos run's seed: ``DBUS_CHAOS_SEED``'s, or a new random one."""
    raw = os.environ.get(SEED_ENV, "").strip()
    return int(raw) if raw else random.SystemRandom().randrange(2**32)


def say_seed(seed: int) -> None:
    """Print ``seed`` and how to replay it (pytest shows it with a failure)."""
    print(f"chaos seed: {seed} (replay with {SEED_ENV}={seed})")


CALL_FAILED = pytest.StashKey[bool]()
"""Set on a chaos test's item once its call ran: whether it failed (``conftest.py``). A
module fixture that outlives its tests (``test_cluster_chaos.SharedCluster``) reads it
to know whether what a test left behind can serve the next."""


# Order of one key's changes: by version, and a delete after the change it deletes.
_RANK = {"inserted": 0, "updated": 0, "deleted": 1}


@dataclass(frozen=True)
class Table:
    """One workload table: its DDL, key columns and how to make a row's other values."""

    name: str
    ddl: str
    key_columns: tuple[str, ...]
    new_key: Callable[[random.Random, int], Key]
    values: Callable[[random.Random], dict[str, Any]]


def _name(rng: random.Random) -> str:
    return rng.choice(["ada", "grace", "linus", "émilie", "søren", "李", "o'brien"]) + str(
        rng.randrange(1000)
    )


def _moment(rng: random.Random) -> datetime:
    return datetime(2026, 1, 1) + timedelta(
        seconds=rng.randrange(10**8), microseconds=rng.randrange(10**6)
    )


TABLES: tuple[Table, ...] = (
    Table(
        "accounts",
        """CREATE TABLE accounts (
            id INT PRIMARY KEY, ver INT NOT NULL, name VARCHAR(64) NOT NULL,
            balance DECIMAL(12, 2) NOT NULL, state ENUM('new', 'active', 'closed') NOT NULL,
            touched DATETIME(6) NOT NULL)""",
        ("id",),
        lambda rng, n: (n,),
        lambda rng: {
            "name": _name(rng),
            "balance": Decimal(rng.randrange(-(10**6), 10**8)) / 100,
            "state": rng.choice(["new", "active", "closed"]),
            "touched": _moment(rng),
        },
    ),
    Table(
        "orders",
        """CREATE TABLE orders (
            id BIGINT PRIMARY KEY, ver INT NOT NULL, account INT NOT NULL,
            total DECIMAL(10, 2), note TEXT, tags SET('gift', 'rush', 'fragile'))""",
        ("id",),
        lambda rng, n: (10**10 + n,),
        lambda rng: {
            "account": rng.randrange(10**6),
            "total": None if rng.random() < 0.1 else Decimal(rng.randrange(10**7)) / 100,
            "note": None if rng.random() < 0.3 else "note " * rng.randrange(1, 40),
            "tags": ",".join(t for t in ("gift", "rush", "fragile") if rng.random() < 0.4),
        },
    ),
    Table(
        "stock",
        """CREATE TABLE stock (
            region CHAR(2) NOT NULL, id INT NOT NULL, ver INT NOT NULL, qty INT NOT NULL,
            price DOUBLE, PRIMARY KEY (region, id))""",
        ("region", "id"),
        lambda rng, n: (rng.choice(["eu", "us", "ap"]), n),
        lambda rng: {"qty": rng.randrange(-50, 10**5), "price": rng.random() * 1000},
    ),
)


@dataclass(frozen=True)
class Change:
    table: str
    key: Key
    ver: int
    op: str  # inserted | updated | deleted


@dataclass
class _TableState:
    live: dict[Key, int] = field(default_factory=dict)  # key -> current ver
    last: dict[Key, int] = field(default_factory=dict)  # key -> highest ver ever written
    counter: int = 0


class Workload:
    """A writer thread over ``tables`` that records every change it commits."""

    def __init__(
        self,
        connect: Callable[..., Any],
        *,
        seed: int,
        tables: Sequence[Table] = TABLES,
        pause: float = 0.02,
        target_rows: int = 120,
    ) -> None:
        self._connect = connect
        self.seed = seed
        self._rng = random.Random(seed)
        self.tables = {t.name: t for t in tables}
        self._state = {t.name: _TableState() for t in tables}
        self._pause = pause
        self._target = target_rows
        self.committed: list[Change] = []
        self.transactions = 0
        self.rolled_back = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def create_tables(self) -> None:
        with self._connect().cursor() as cur:
            for table in self.tables.values():
                cur.execute(table.ddl)

    # One transaction --------------------------------------------------------------

    def _match(self, table: Table, keys: Sequence[Key]) -> tuple[str, list[Any]]:
        if len(table.key_columns) == 1:
            column = table.key_columns[0]
            return f"{column} IN ({', '.join(['%s'] * len(keys))})", [k[0] for k in keys]
        tuples = ", ".join("(" + ", ".join(["%s"] * len(k)) + ")" for k in keys)
        return f"({', '.join(table.key_columns)}) IN ({tuples})", [v for k in keys for v in k]

    def _insert(self, cur: Any, table: Table, state: _TableState, count: int) -> list[Change]:
        rows: list[tuple[Key, int, dict[str, Any]]] = []
        dead = [k for k in state.last if k not in state.live]
        for _ in range(count):
            if dead and self._rng.random() < 0.25:
                key = dead.pop(self._rng.randrange(len(dead)))
            else:
                state.counter += 1
                key = table.new_key(self._rng, state.counter)
                if key in state.live or key in state.last or key in [r[0] for r in rows]:
                    continue
            rows.append((key, state.last.get(key, 0) + 1, table.values(self._rng)))
        if not rows:
            return []
        columns = [*table.key_columns, "ver", *rows[0][2]]
        placeholders = "(" + ", ".join(["%s"] * len(columns)) + ")"
        cur.execute(
            f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES "
            + ", ".join([placeholders] * len(rows)),
            [v for key, ver, values in rows for v in (*key, ver, *values.values())],
        )
        for key, ver, _ in rows:
            state.live[key] = state.last[key] = ver
        return [Change(table.name, key, ver, "inserted") for key, ver, _ in rows]

    def _update(self, cur: Any, table: Table, state: _TableState, count: int) -> list[Change]:
        keys = self._rng.sample(sorted(state.live, key=repr), min(count, len(state.live)))
        if not keys:
            return []
        values = table.values(self._rng)
        # Change a random subset of the other columns, and always the version.
        chosen = {c: v for c, v in values.items() if self._rng.random() < 0.6}
        where, params = self._match(table, keys)
        assignments = ["ver = ver + 1", *(f"{c} = %s" for c in chosen)]
        cur.execute(
            f"UPDATE {table.name} SET {', '.join(assignments)} WHERE {where}",
            [*chosen.values(), *params],
        )
        changes = []
        for key in keys:
            state.live[key] = state.last[key] = state.live[key] + 1
            changes.append(Change(table.name, key, state.live[key], "updated"))
        return changes

    def _delete(self, cur: Any, table: Table, state: _TableState, count: int) -> list[Change]:
        keys = self._rng.sample(sorted(state.live, key=repr), min(count, len(state.live)))
        if not keys:
            return []
        where, params = self._match(table, keys)
        cur.execute(f"DELETE FROM {table.name} WHERE {where}", params)
        return [Change(table.name, key, state.live.pop(key), "deleted") for key in keys]

    def _statement(self, cur: Any) -> list[Change]:
        table = self.tables[self._rng.choice(sorted(self.tables))]
        state = self._state[table.name]
        count = 1 if self._rng.random() < 0.7 else self._rng.randrange(2, 12)
        size = len(state.live)
        roll = self._rng.random()
        insert_share = 0.6 if size < self._target else 0.25
        if roll < insert_share or size == 0:
            return self._insert(cur, table, state, count)
        if roll < insert_share + (1 - insert_share) * 0.65:
            return self._update(cur, table, state, count)
        return self._delete(cur, table, state, count)

    def step(self, conn: Any) -> None:
        """Run one transaction: a statement, or several, committed or rolled back."""
        statements = 1 if self._rng.random() < 0.5 else self._rng.randrange(2, 7)
        rollback = statements > 1 and self._rng.random() < 0.08
        saved = (
            {n: (dict(s.live), dict(s.last), s.counter) for n, s in self._state.items()}
            if rollback
            else None
        )
        changes: list[Change] = []
        conn.begin()
        with conn.cursor() as cur:
            for _ in range(statements):
                changes.extend(self._statement(cur))
        if saved is not None:
            conn.rollback()
            for name, (live, last, counter) in saved.items():
                self._state[name] = _TableState(live, last, counter)
            self.rolled_back += 1
            return
        conn.commit()
        self.committed.extend(changes)
        self.transactions += 1

    # The thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            conn = self._connect(autocommit=False)
            while not self._stop.is_set():
                self.step(conn)
                self._stop.wait(self._rng.uniform(0, 2 * self._pause))
        except BaseException as exc:
            self._error = exc

    def start(self) -> None:
        """Write until ``stop``; a stopped workload may start again (and goes on
        recording into ``committed``)."""
        assert self._thread is None or not self._thread.is_alive(), "the workload is running"
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            assert not self._thread.is_alive(), "the workload thread did not stop within 60s"
        if self._error is not None:
            raise AssertionError(f"the workload failed: {self._error!r}") from self._error

    def expected(self, table: str) -> set[Change]:
        return {c for c in self.committed if c.table == table}


# The function folder ------------------------------------------------------------


@dataclass(frozen=True)
class Routes:
    """Where each table goes: one fresh topic and one fresh index per table."""

    database: str
    prefix: str
    tables: tuple[str, ...]

    def topic(self, table: str) -> str:
        return f"{self.prefix}-{table}"

    def index(self, table: str) -> str:
        return f"{self.prefix}-{table}"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}-dead"


def new_routes(database: str, tables: Iterable[str]) -> Routes:
    return Routes(database, f"dbus-chaos-{uuid.uuid4().hex[:12]}", tuple(tables))


def write_function_folder(
    folder: Path,
    routes: Routes,
    delivery: str = "at-least-once",
    *,
    name: str = "chaos",
    source: str | None = None,
) -> Path:
    """Deployment ``name`` that sends each table to its own topic and index, with the
    manifest's ``delivery``; of ``source`` alone when given (else of every source)."""
    folder.mkdir(parents=True)
    db = routes.database
    (folder / "chaos.py").write_text(
        textwrap.dedent(
            f'''
            import dbus_fn as fn

            @fn.route(tables="{db}.*")
            def per_table(event: fn.RowChange) -> list[str]:
                name = "{routes.prefix}-" + event.table
                return ["kafka://" + name, "es://" + name]
            '''
        )
    )
    tables = ", ".join(f'"{db}.{t}"' for t in routes.tables)
    sources = f'sources = ["{source}"]' if source else ""
    (folder / "dbus.toml").write_text(
        textwrap.dedent(
            f"""
            name = "{name}"
            version = "1.0.0"
            module = "chaos.py"
            tables = [{tables}]
            {sources}
            dead_letter_route = "kafka://{routes.dead_letters}"
            delivery = "{delivery}"
            """
        )
    )
    return folder


# The runtime as a process ---------------------------------------------------------


@dataclass
class Run:
    """One life of the runtime process."""

    number: int
    log: Path
    started: float  # wall clock
    pid: int
    killed_after: float | None = None
    resumed_after: float | None = None
    """Seconds from spawn to this run's first committed micro-batch (None: none)."""
    returncode: int | None = None
    """How the run's process ended when it was killed or stopped (-9: by SIGKILL)."""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


class RuntimeProcess:
    """`dbus runtime start` in its own session, killed and restarted at will."""

    def __init__(
        self,
        argv: Sequence[str],
        logs: Path,
        checkpoint: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = list(argv)
        self.logs = logs
        self.checkpoint = checkpoint
        self.env = dict(env or {})
        self.runs: list[Run] = []
        self._process: subprocess.Popen[bytes] | None = None
        logs.mkdir(parents=True, exist_ok=True)

    @classmethod
    def for_runtime(
        cls,
        *,
        source_dsn: str = "",
        sources: Mapping[str, str] | None = None,
        functions: Path | Sequence[Path],
        kafka: str,
        elasticsearch: str,
        checkpoint: Path,
        logs: Path,
        master: str = "local[2]",
        start: str = "earliest",
        options: Sequence[str] = (),
    ) -> RuntimeProcess:
        """The runtime of ``sources`` (name -> DSN; else source ``chaos`` of
        ``source_dsn``) and the function folders ``functions``."""
        dbus = Path(sys.executable).parent / "dbus"
        named = sources if sources is not None else {"chaos": source_dsn}
        folders = [functions] if isinstance(functions, Path) else list(functions)
        return cls(
            [
                str(dbus), "runtime", "start",
                *(a for name, dsn in named.items() for a in ("--source", f"{name}={dsn}")),
                *(a for folder in folders for a in ("--functions", str(folder))),
                "--kafka", kafka,
                "--elasticsearch", elasticsearch,
                "--checkpoint", str(checkpoint),
                "--from", start,
                "--master", master,
                *options,
            ],
            logs,
            checkpoint,
        )  # fmt: skip

    @classmethod
    def for_member(
        cls,
        *,
        runtime_id: str,
        cluster: str,
        zookeeper: str,
        session_timeout: float,
        kafka: str,
        elasticsearch: str,
        folder: Path,
        env: Mapping[str, str],
        master: str = "local[1]",
        start: str = "earliest",
        options: Sequence[str] = (),
    ) -> RuntimeProcess:
        """A cluster member: ZooKeeper gives its sources and functions; ``env`` holds
        what the sources' ``dsn_env`` variables name. Its checkpoint and logs go in
        ``folder``."""
        dbus = Path(sys.executable).parent / "dbus"
        return cls(
            [
                str(dbus), "runtime", "start",
                "--cluster", cluster,
                "--zookeeper", zookeeper,
                "--zk-session-timeout", str(session_timeout),
                "--runtime-id", runtime_id,
                "--kafka", kafka,
                "--elasticsearch", elasticsearch,
                "--checkpoint", str(folder / "checkpoint"),
                "--from", start,
                "--master", master,
                *options,
            ],
            folder / "logs",
            folder / "checkpoint",
            env,
        )  # fmt: skip

    @property
    def current(self) -> Run:
        return self.runs[-1]

    def start(self) -> Run:
        assert self._process is None or self._process.poll() is not None
        number = len(self.runs) + 1
        log = self.logs / f"runtime-{number:02d}.log"
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            **self.env,
        }
        with log.open("wb") as out:
            self._process = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        run = Run(number, log, time.time(), self._process.pid)
        self.runs.append(run)
        return run

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def session_members(self) -> list[psutil.Process]:
        """Every process still in the current run's session (the CLI, the JVM, Python workers)."""
        sid = self.current.pid
        members = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == sid:
                    members.append(proc)
            except (ProcessLookupError, PermissionError, psutil.Error):
                continue
        return members

    def _note_resume(self) -> float | None:
        """When did this run commit its first batch? Spark writes ``commits/<batch>``."""
        run = self.current
        stamps = []
        for commit in (self.checkpoint / "commits").glob("[0-9]*"):
            with contextlib.suppress(FileNotFoundError):
                if commit.stat().st_mtime >= run.started:
                    stamps.append(commit.stat().st_mtime)
        run.resumed_after = min(stamps) - run.started if stamps else None
        return run.resumed_after

    def has_committed(self) -> bool:
        """Whether the current run has committed a micro-batch."""
        return self._note_resume() is not None

    def wait_first_commit(self, timeout: float) -> float:
        """Wait until the current run commits a micro-batch; seconds since its spawn."""
        deadline = time.monotonic() + timeout
        while (resumed := self._note_resume()) is None:
            if not self.alive():
                raise AssertionError(f"run {self.current.number} exited:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.print_stacks()
                raise AssertionError(
                    f"run {self.current.number} committed no batch within {timeout:.0f}s:\n"
                    f"{self.tail(400)}"
                )
            time.sleep(0.2)
        return resumed

    def print_stacks(self, settle: float = 3.0) -> None:
        """Have the run's processes print their threads' stacks into its log: Spark's
        JVM (SIGQUIT), and each Python process that asks for it (``logs.STACKS_SIGNAL``
        caught: the driver, and workers that ran a task)."""
        for proc in self.session_members():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.name() == "java":
                    proc.send_signal(signal.SIGQUIT)
                elif _catches(proc.pid, logs.STACKS_SIGNAL):
                    proc.send_signal(logs.STACKS_SIGNAL)
        time.sleep(settle)

    def kill9(self) -> None:
        """SIGKILL the run's process group, as ``kill -9 -<pgid>`` does; nothing may survive.

        Survivors are looked for among the processes of the run's session and every
        descendant seen just before the kill, so a process that left the group is
        still found.
        """
        run = self.current
        assert self._process is not None
        try:
            descendants = psutil.Process(run.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            descendants = []
        run.killed_after = time.time() - run.started
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.returncode = self._process.wait(timeout=30)
        self.wait_gone(30, also=descendants)
        self._note_resume()

    def pause(self) -> None:
        """SIGSTOP the run's process group: the CLI, Spark's JVM and its Python workers
        all freeze, as in a VM pause or a swap storm."""
        os.killpg(self.current.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.current.pid, signal.SIGCONT)

    def wait_gone(self, timeout: float, *, also: Iterable[psutil.Process] = ()) -> None:
        """Wait until no process of the run (its session, or ``also``) is left."""
        deadline = time.monotonic() + timeout
        while True:
            left = {p.pid: p for p in also if process_running(p)}
            left.update((p.pid, p) for p in self.session_members() if process_running(p))
            if not left:
                return
            if time.monotonic() > deadline:
                names = [f"{p.pid} {' '.join(process_command(p)[:3])}" for p in left.values()]
                raise AssertionError(
                    f"processes left running after run {self.current.number}: {names}"
                )
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM the CLI (it stops its query cleanly), then SIGKILL whatever is left.

        Returns the CLI's exit code (``None`` if it had to be killed).
        """
        if self._process is None:
            return None
        code = self._process.poll()
        if code is None:
            self._process.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._process.wait(timeout=timeout)
        for proc in self.session_members():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
        if self._process.poll() is None:
            self._process.wait(timeout=30)
        self._note_resume()
        return code

    def log_text(self) -> str:
        return "\n".join(_read(run.log) for run in self.runs)

    def tail(self, lines: int = 40) -> str:
        if not self.runs:
            return ""
        return "\n".join(_read(self.current.log).splitlines()[-lines:])


def _catches(pid: int, number: int) -> bool:
    """Whether process ``pid`` has a handler for signal ``number`` (Linux: /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    return False


# Reading the sinks ----------------------------------------------------------------


@dataclass(frozen=True)
class Delivered:
    """One Kafka message as the checks see it."""

    partition: int
    offset: int
    key: Key
    ver: int
    op: str


def read_topic(
    bootstrap: str, topic: str, *, timeout: float = 60, committed: bool = True
) -> list[Delivered]:
    """Every committed message of ``topic`` up to its current end, in partition order.

    Read as a consumer of a cluster's topics must (``read_committed``, librdkafka's
    default): a transaction the broker aborted (a paused runtime's) is not seen.
    Committed messages never change, so a topic read again (a check repeated until a
    runtime caught up) is read on from where its last read ended (``_COMMITTED``).
    ``committed`` False: every message in the log, aborted or not (to explain a loss),
    read whole each time.
    """
    if not committed:
        return _read_log(bootstrap, topic, {}, timeout=timeout, committed=False)
    log = _COMMITTED.setdefault((bootstrap, topic), {})
    return _read_log(bootstrap, topic, log, timeout=timeout, committed=True)


_COMMITTED: dict[tuple[str, str], dict[int, list[Delivered]]] = {}
"""(bootstrap, topic) -> partition -> its committed messages read so far. The chaos
tests' topics are named afresh for each run (``new_routes``); ``delete_outputs`` forgets
the ones it deletes."""


def _read_log(
    bootstrap: str,
    topic: str,
    log: dict[int, list[Delivered]],
    *,
    timeout: float,
    committed: bool,
) -> list[Delivered]:
    """Read ``topic`` on from the end of what ``log`` holds, per partition, to its
    current end; add what came to ``log`` and return all of it in partition order."""
    consumer = kafka_consumer(
        bootstrap,
        {
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        },
    )
    try:
        metadata = consumer.list_topics(topic, timeout=30)
        partitions = sorted(metadata.topics[topic].partitions)
        if set(log) - set(partitions):
            log.clear()  # not the topic read before: read it whole
        consumer.assign([
            TopicPartition(topic, p, log[p][-1].offset + 1 if log.get(p) else OFFSET_BEGINNING)
            for p in partitions
        ])  # fmt: skip
        deadline = time.monotonic() + timeout
        done: set[int] = set()
        while len(done) < len(partitions):
            if time.monotonic() > deadline:
                raise AssertionError(f"reading {topic} took over {timeout:.0f}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    done.add(msg.partition())
                    continue
                raise AssertionError(f"reading {topic}: {msg.error()}")
            event = from_kafka_message(msg.key(), msg.value(), msg.headers())
            op = event.get_type().rsplit(".", 1)[-1]
            data = event.get_data()
            image = data["after"] if data["after"] is not None else data["before"]
            key = tuple(json.loads(msg.key()))
            ver = image["ver"]
            delivered = Delivered(msg.partition(), msg.offset(), key, ver, op)
            log.setdefault(msg.partition(), []).append(delivered)
    finally:
        consumer.close()
    # A partition's messages come in offset order, each read going on from the last.
    return [m for p in sorted(log) for m in log[p]]


def dead_letters(bootstrap: str, topics: Iterable[str]) -> dict[str, int]:
    """The dead-letter topics among ``topics`` that hold any message, and how many each."""
    found = {t: len(read_topic(bootstrap, t)) for t in topics if topic_exists(bootstrap, t)}
    return {topic: count for topic, count in found.items() if count}


@dataclass
class KafkaVerdict:
    missing: list[Change]
    unexpected: list[Delivered]
    reordered: list[str]
    stale_last: list[str]
    replayed: int
    messages: int
    per_partition: dict[int, int] = field(default_factory=dict)
    """Committed messages read, per partition."""

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.reordered or self.stale_last)

    def describe(self) -> str:
        return (
            f"{len(self.missing)} missing (first {self.missing[:5]}), "
            f"{len(self.unexpected)} unexpected (first {self.unexpected[:5]}), "
            f"{len(self.reordered)} reordered (first {self.reordered[:3]}), "
            f"{len(self.stale_last)} keys whose last message is not their last change "
            f"(first {self.stale_last[:3]}); {self.messages} messages, {self.replayed} replayed"
        )


def check_topic(messages: Sequence[Delivered], expected: set[Change], table: str) -> KafkaVerdict:
    """Every expected change present; per key, new changes only in commit order.

    A batch replayed after a crash sends a stretch of a key's changes again, so a
    key's sequence may step back to a change it already had, then repeat forward;
    what may never happen is a change arriving before an older one it had not yet
    delivered, or a key whose last message is not its newest change.
    """
    seen = {(m.key, m.ver, m.op) for m in messages}
    wanted = {(c.key, c.ver, c.op) for c in expected}
    missing = sorted((c for c in expected if (c.key, c.ver, c.op) not in seen), key=repr)
    unexpected = [m for m in messages if (m.key, m.ver, m.op) not in wanted]
    by_key: dict[Key, list[Delivered]] = defaultdict(list)
    for m in sorted(messages, key=lambda m: (m.partition, m.offset)):
        by_key[m.key].append(m)
    reordered: list[str] = []
    replayed = 0
    for key, sequence in by_key.items():
        if len({m.partition for m in sequence}) > 1:
            reordered.append(f"{table} {key} spread over partitions")
            continue
        delivered: set[tuple[int, int]] = set()
        newest = (-1, -1)
        for m in sequence:
            order = (m.ver, _RANK[m.op])
            if order in delivered:
                replayed += 1
            elif order < newest:
                reordered.append(f"{table} {key}: v{m.ver} {m.op} after v{newest[0]}")
            delivered.add(order)
            newest = max(newest, order)
    stale_last = []
    latest: dict[Key, tuple[int, int]] = {}
    for c in expected:
        latest[c.key] = max(latest.get(c.key, (-1, -1)), (c.ver, _RANK[c.op]))
    for key, sequence in by_key.items():
        last = sequence[-1]
        if key in latest and (last.ver, _RANK[last.op]) != latest[key]:
            stale_last.append(f"{table} {key}: ends at v{last.ver} {last.op}, newest {latest[key]}")
    per_partition = dict(Counter(m.partition for m in messages))
    return KafkaVerdict(
        missing, unexpected, reordered, stale_last, replayed, len(messages), per_partition
    )


def column_types(conn: Any, database: str, table: str) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (database, table),
        )
        return {name: kind for name, kind in cur.fetchall()}


def table_documents(conn: Any, database: str, table: Table) -> dict[str, dict[str, Any]]:
    """The table as the runtime would index it: ``_id`` -> JSON document."""
    types = column_types(conn, database, table.name)
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{database}`.{table.name}")
        names = [d[0] for d in cur.description]
        documents = {}
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            for name, kind in types.items():
                # PyMySQL returns a SET as text; capture gives the members.
                if kind.startswith("set(") and isinstance(row[name], str):
                    row[name] = frozenset(row[name].split(",")) if row[name] else frozenset()
            key = [row[c] for c in table.key_columns]
            doc_id = str(key[0]) if len(key) == 1 else json.dumps(key, separators=(",", ":"))
            documents[doc_id] = row_to_json(row, types)
    return documents


def index_documents(es: Elasticsearch, index: str) -> dict[str, dict[str, Any]]:
    if not es.indices.exists(index=index):
        return {}
    es.indices.refresh(index=index)
    return {hit["_id"]: hit["_source"] for hit in scan(es, index=index, size=1000)}


def compare_index(
    table_docs: dict[str, dict[str, Any]], index_docs: dict[str, dict[str, Any]]
) -> list[str]:
    """Differences between a table and its index (empty: equal, row for row)."""
    problems = [
        f"row {k} missing from the index" for k in sorted(table_docs.keys() - index_docs.keys())
    ]
    problems += [f"doc {k} not in the table" for k in sorted(index_docs.keys() - table_docs.keys())]
    for k in sorted(table_docs.keys() & index_docs.keys()):
        if table_docs[k] != index_docs[k]:
            problems.append(f"doc {k}: index {index_docs[k]} != table {table_docs[k]}")
    return problems


@dataclass
class Convergence:
    kafka: dict[str, KafkaVerdict]
    elasticsearch: dict[str, list[str]]
    rows: dict[str, int]
    bootstrap: str = ""
    topics: dict[str, str] = field(default_factory=dict)
    """Per table, its topic (where ``where_missing`` looks)."""

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.kafka.values()) and not any(self.elasticsearch.values())

    def describe(self) -> str:
        parts = [f"kafka {t}: {v.describe()}" for t, v in self.kafka.items() if not v.ok]
        parts += [
            f"es {t}: {len(p)} difference(s): {p[:5]}" for t, p in self.elasticsearch.items() if p
        ]
        return "; ".join(parts) or "converged"

    def where_missing(self, at_most: int = 8) -> str:
        """Where each missing change is in its topic's log, read uncommitted: written
        in a transaction that did not commit (at a partition and offset), or not
        written at all; and per partition, messages in the log against committed ones."""
        lines = []
        for table, verdict in self.kafka.items():
            if not verdict.missing or table not in self.topics:
                continue
            topic = self.topics[table]
            logged = read_topic(self.bootstrap, topic, committed=False)
            found = {(m.key, m.ver, m.op): m for m in logged}
            places = []
            for change in verdict.missing[:at_most]:
                m = found.get((change.key, change.ver, change.op))
                where = f"partition {m.partition} offset {m.offset}" if m else "not in the log"
                places.append(f"{change.key} v{change.ver} {change.op}: {where}")
            per_partition = {
                p: f"{n} logged, {verdict.per_partition.get(p, 0)} committed"
                for p, n in sorted(Counter(m.partition for m in logged).items())
            }
            lines.append(f"kafka {table}: {'; '.join(places)}; per partition {per_partition}")
        if lines:
            lines.append(broker_log(set(self.topics.values()) | {"transactionalId dbus/"}))
        return "\n".join(lines)


def broker_log(needles: set[str], *, minutes: float = 15, at_most: int = 120) -> str:
    """The local Kafka broker's log lines of the last ``minutes`` that are warnings or
    errors or name one of ``needles`` (the test's topics, the runtimes' producers):
    what the broker did with what a loss went through."""
    from dbus_deploy.services import load_config

    path = load_config().service_dir("kafka") / "logs" / "kafka.log"
    since = (datetime.now() - timedelta(minutes=minutes)).strftime("[%Y-%m-%d %H:%M:%S")
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"broker log: {exc}"
    found = [
        line[:300]
        for line in text.splitlines()
        if line[:20] >= since
        and (" WARN " in line or " ERROR " in line or any(n in line for n in needles))
    ]
    return f"broker log ({path}, {len(found)} lines):\n" + "\n".join(found[-at_most:])


def check_convergence(
    workload: Workload, routes: Routes, conn: Any, bootstrap: str, es: Elasticsearch
) -> Convergence:
    kafka: dict[str, KafkaVerdict] = {}
    elasticsearch: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    for name, table in workload.tables.items():
        topic = routes.topic(name)
        messages = read_topic(bootstrap, topic) if topic_exists(bootstrap, topic) else []
        kafka[name] = check_topic(messages, workload.expected(name), name)
        documents = table_documents(conn, routes.database, table)
        rows[name] = len(documents)
        elasticsearch[name] = compare_index(documents, index_documents(es, routes.index(name)))
    topics = {name: routes.topic(name) for name in workload.tables}
    return Convergence(kafka, elasticsearch, rows, bootstrap, topics)


def wait_converged(
    check: Callable[[], Convergence],
    *,
    timeout: float,
    alive: Callable[[], bool],
    on_timeout: Callable[[], str],
    seed: int,
) -> tuple[Convergence, float]:
    """Re-check until converged; return the verdict and how long it took. A failure
    names the load's ``seed`` (``DBUS_CHAOS_SEED`` replays it)."""
    began = time.monotonic()
    verdicts, took = converge_all(lambda: {None: check()}, timeout=timeout, alive=alive)
    verdict = verdicts[None]
    if took is None:
        raise AssertionError(
            f"not converged after {time.monotonic() - began:.0f}s: {verdict.describe()} "
            f"(chaos seed {seed}: replay with DBUS_CHAOS_SEED={seed})\n"
            f"{verdict.where_missing()}\nruntime log tail:\n{on_timeout()}"
        )
    return verdict, took


class Verdict(Protocol):
    """What a re-checked deployment answers: has it converged."""

    @property
    def ok(self) -> bool: ...


V = TypeVar("V", bound=Verdict)


def converge_all(
    check: Callable[[], dict[Any, V]], *, timeout: float, alive: Callable[[], bool]
) -> tuple[dict[Any, V], float | None]:
    """Re-check several deployments until every one converged, ``timeout`` passed or the
    runtime died. Returns the last verdicts and how long they took (None: not all
    converged), so that each test of a shared run asserts its own deployments."""
    began = time.monotonic()
    while True:
        verdicts = check()
        if all(v.ok for v in verdicts.values()):
            return verdicts, time.monotonic() - began
        if time.monotonic() - began > timeout or not alive():
            return verdicts, None
        time.sleep(3)


def delete_outputs(bootstrap: str, es_url: str, routes: Routes) -> None:
    """Remove every topic and index the routes name."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    names = [routes.topic(t) for t in routes.tables] + [routes.dead_letters]
    doomed = [t for t in names if t in existing]
    for topic in names:
        _COMMITTED.pop((bootstrap, topic), None)
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=30).values():
            future.result(timeout=60)
    with Elasticsearch(es_url) as es:
        for table in routes.tables:
            es.options(ignore_status=404).indices.delete(index=routes.index(table))
