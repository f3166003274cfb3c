"""Chaos for a cluster of runtimes: ZooKeeper moves the sources, nothing is lost.

Three `dbus runtime start --cluster` processes share four sources (one table of
the module's own MariaDB each) through the module's own ZooKeeper, with a short session
timeout, while a writer changes the four tables. Each test does one thing to
them mid-load: SIGKILL a runtime, SIGKILL the leader, SIGSTOP a runtime past its
session timeout and resume it, or stop ZooKeeper and start it again. It checks
what the coordination promises for that fault (the sources move within the
session timeout plus a bounded margin; a runtime that lost its session never
commits for what it lost; while ZooKeeper is away the runtimes keep their work
and hold their commits), and then, after the load stops, that every committed
change is in its table's topic, one key's changes in commit order, and each
index equals its table. `pytest -s` shows what was measured.

The tests share one cluster (``SharedCluster``): each mends what the one before left
(a killed runtime starts again) and runs the load again, and every convergence check
covers every change written since the cluster started. The ZooKeeper restart, whose
runtimes need longer sessions, gets a cluster of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from convergence import (
    CALL_FAILED,
    TABLES,
    RuntimeProcess,
    Table,
    Workload,
    check_convergence,
    dead_letters,
    delete_outputs,
    new_routes,
    say_seed,
    topic_exists,
    wait_converged,
    write_function_folder,
)
from elasticsearch import Elasticsearch
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from scratch import FreshDatabase, scratch_database
from support import PrivateServices, kafka_consumer
from support import wait_until as _wait_until

from dbus_deploy.services import ServicesConfig, down, up
from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings, close, cluster_status, connect
from dbus_spark.config.runtime import load_config

# Exclusive (run apart from the parallel integration pass): 4 s ZooKeeper sessions and bounded
# handoffs under three runtimes.
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.exclusive]

CLUSTER = "chaos"
RUNTIMES = ("rt-a", "rt-b", "rt-c")
DSN_VARIABLE = "DBUS_CHAOS_DSN"
# ZooKeeper's least session timeout: two of its 2 s ticks.
SESSION = 4.0
# A source moves a session timeout after its owner went silent, then a handoff: the
# leader releases it and gives it to a new owner only that long after (what the owner
# advertised, recorded in the assignment: hold + Kafka transaction timeout + the
# broker's abort scan as the runtime read it; see ``ChaosCluster.handoff_of``).
# ZooKeeper expires a session on its tick (up to 2 s late); the rest is slack for a
# 2-core machine under load.
MARGIN = 6.0
LOAD_BEFORE = 4.0  # seconds of load before the fault
LOAD_AFTER = 6.0  # and after the runtimes have recovered from it
# The ZooKeeper restart gives its runtimes longer sessions: a runtime must reconnect
# within its session once the restarted server loads them. An attempt that lands while
# the server starts goes unanswered (ZOOKEEPER-5051) until the runtime gives it up
# (2 s here, ``answer_hosts``), then the next waits out the reconnect backoff (up to
# 2.8 s): most of a 4 s session.
RESTART_SESSION = 8.0
ZOOKEEPER_DOWN = 2 * RESTART_SESSION  # twice the session timeout

LEDGER = Table(
    "ledger",
    """CREATE TABLE ledger (
        id INT PRIMARY KEY, ver INT NOT NULL, amount BIGINT NOT NULL,
        booked DATETIME NOT NULL, memo VARCHAR(200))""",
    ("id",),
    lambda rng, n: (n,),
    lambda rng: {
        "amount": rng.randrange(-(10**12), 10**12),
        "booked": datetime(2026, 1, 1, rng.randrange(24), rng.randrange(60)),
        "memo": None if rng.random() < 0.2 else f"memo {rng.randrange(10**6)}",
    },
)
# One source per table: four sources over three runtimes, two of them with one each.
SOURCE_TABLES = (*TABLES, LEDGER)


def _source(table: str) -> str:
    return f"src-{table}"


def wait_until(check: Callable[[], bool], within: float, what: str) -> float:
    """Seconds until ``check()`` held (ZooKeeper away counts as not yet)."""
    return _wait_until(check, within, what, every=0.1, ignoring=(KazooException,))


def _after(position: dict[str, Any], other: dict[str, Any]) -> bool:
    return (position["file"], int(position["pos"])) > (other["file"], int(other["pos"]))


@dataclass(frozen=True)
class PositionWrite:
    """One write to ``positions/<source>`` as a data watch saw it."""

    seen: float  # monotonic
    source: str
    version: int
    runtime: str
    epoch: int


class PositionWrites:
    """Every write to the positions of ``sources`` that ZooKeeper reports (a data watch
    each). A watch re-reads after it fires, so two writes in one round trip show as
    one: ``gaps`` counts the versions not seen."""

    def __init__(self, client: KazooClient, settings: ZooKeeperSettings, sources: Iterable[str]):
        self.seen: list[PositionWrite] = []
        for source in sources:
            client.DataWatch(settings.layout.position(source), self._recorder(source))

    def _recorder(self, source: str) -> Callable[[bytes | None, Any], None]:
        def record(data: bytes | None, stat: Any) -> None:
            if data:
                found = json.loads(data)
                self.seen.append(
                    PositionWrite(
                        time.monotonic(),
                        source,
                        stat.version,
                        str(found.get("runtime")),
                        int(found.get("epoch", 0)),
                    )
                )

        return record

    @property
    def gaps(self) -> int:
        missed = 0
        for source in {w.source for w in self.seen}:
            versions = sorted({w.version for w in self.seen if w.source == source})
            missed += versions[-1] - versions[0] + 1 - len(versions)
        return missed


@dataclass
class ChaosCluster:
    """The runtimes, the ZooKeeper they share, the load, and how to look at them."""

    services: ServicesConfig  # the module's MariaDB and ZooKeeper: stop ZooKeeper with this
    settings: ZooKeeperSettings
    client: KazooClient
    runtimes: dict[str, RuntimeProcess]
    database: FreshDatabase
    workload: Workload
    routes: Any
    bootstrap: str
    es: Elasticsearch
    killed: set[str] = field(default_factory=set)

    @property
    def sources(self) -> list[str]:
        return [_source(t.name) for t in SOURCE_TABLES]

    def assignments(self) -> dict[str, tuple[str | None, int | None, bool]]:
        """source -> (owner, epoch, whether the owner is a running member)."""
        status = cluster_status(self.client, self.settings)
        return {s.name: (s.owner, s.epoch, s.owner_running) for s in status.sources}

    def owned_by(self, runtime_id: str) -> dict[str, int]:
        """source -> epoch of what ``runtime_id`` is assigned."""
        return {
            source: epoch
            for source, (owner, epoch, _) in self.assignments().items()
            if owner == runtime_id and epoch is not None
        }

    def handoff_of(self, sources: Iterable[str]) -> float:
        """The longest handoff the assignments of ``sources`` record: once the leader
        releases them, it gives them to a new owner only that long after. Their owner
        advertised it from the broker's abort scan as it read it (10 s assumed, and
        said, when it could not), so it is read here, not assumed."""
        layout = self.settings.layout
        return max(
            (
                float(json.loads(self.client.get(layout.assignment(s))[0]).get("handoff", 0.0))
                for s in sources
            ),
            default=0.0,
        )

    def leader(self) -> tuple[str, int]:
        data = json.loads(self.client.get(self.settings.layout.leader)[0])
        return str(data["runtime"]), int(data["term"])

    def follower_with_sources(self) -> str:
        leader, _ = self.leader()
        return next(r for r in RUNTIMES if r != leader and self.owned_by(r))

    def position(self, source: str) -> dict[str, Any]:
        """``positions/<source>``: position, epoch, runtime, committed (empty: none yet)."""
        path = self.settings.layout.position(source)
        return json.loads(self.client.get(path)[0]) if self.client.exists(path) else {}

    def committed_by_owners(self, sources: Iterable[str]) -> bool:
        """Each source's position was last committed by its owner, at its epoch."""
        assigned = self.assignments()
        for source in sources:
            owner, epoch, running = assigned[source]
            found = self.position(source)
            if not running or (found.get("runtime"), found.get("epoch")) != (owner, epoch):
                return False
        return True

    def alive(self) -> bool:
        return all(p.alive() for r, p in self.runtimes.items() if r not in self.killed)

    def tails(self) -> str:
        """What a failure shows: who owns each source, and each runtime's last log lines."""
        try:
            owners = ", ".join(f"{s} {o}" for s, (o, _, _) in sorted(self.assignments().items()))
        except KazooException as exc:
            owners = f"not known ({exc!r})"
        tails = (f"--- {r}:\n{p.tail(25)}" for r, p in self.runtimes.items())
        return "\n".join([f"owners: {owners}", *tails])

    def run_load(self, seconds: float) -> None:
        """Let the load run; every runtime not killed must stay up."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self.alive(), f"a runtime exited by itself:\n{self.tails()}"
            time.sleep(0.2)

    def wait_moved(self, victim: str, lost: dict[str, int], since: float) -> tuple[float, float]:
        """Wait until the ``lost`` sources are owned by running runtimes other than
        ``victim`` (within the session timeout, the handoff their assignments record and
        the margin), then until their new owners have committed them; seconds from
        ``since`` to each. A move that is late says which step was: the victim's
        session ending, the release, or the assignment after the handoff."""
        handoff = self.handoff_of(lost)
        bound = SESSION + handoff + MARGIN
        layout = self.settings.layout
        seen: dict[str, float] = {}  # step -> seconds from ``since`` it was first seen

        def moved() -> bool:
            # Only the nodes that say it (not a whole cluster_status per look): the
            # test's own reads add no lag to what it measures.
            running = set(self.client.get_children(layout.runtimes))
            owners = [
                json.loads(self.client.get(layout.assignment(s))[0]).get("runtime") or ""
                for s in lost
            ]
            now = time.monotonic() - since
            if victim not in running:
                seen.setdefault("its session ended (member node gone)", now)
            if all(owner != victim for owner in owners):
                seen.setdefault("its sources released", now)
            return all(owner and owner != victim and owner in running for owner in owners)

        try:
            wait_until(
                moved,
                bound - (time.monotonic() - since),
                f"the sources of {victim} ({', '.join(sorted(lost))}) owned by a running runtime",
            )
        except AssertionError as exc:
            steps = ", ".join(f"{step} {at:.2f} s" for step, at in seen.items()) or "none"
            raise AssertionError(
                f"{exc} (session {SESSION:g} s + handoff {handoff:g} s + margin {MARGIN:g} s); "
                f"seen after the fault: {steps}\n{self.tails()}"
            ) from None
        moved_after = time.monotonic() - since
        wait_until(
            lambda: self.committed_by_owners(lost), 60, "the new owners commit what they took"
        )
        return moved_after, time.monotonic() - since

    def ready(self) -> None:
        """Start again what a test killed, wait until every runtime works on its sources
        (each owns one and has committed it), then run the load for ``LOAD_BEFORE``."""
        for runtime_id in sorted(self.killed):
            self.runtimes[runtime_id].start()
        self.killed.clear()
        began = time.monotonic()

        def working() -> bool:
            assert self.alive(), f"a runtime exited while starting:\n{self.tails()}"
            owners = {owner for owner, _, _ in self.assignments().values()}
            return owners == set(RUNTIMES) and self.committed_by_owners(self.sources)

        wait_until(working, WORKING, "every runtime working on its sources")
        print(
            f"\n{len(RUNTIMES)} runtimes working on {len(self.sources)} sources "
            f"{time.monotonic() - began:.0f} s after this test asked: {self.assignments()}"
        )
        self.workload.start()
        self.run_load(LOAD_BEFORE)

    def stop(self) -> None:
        """Stop the load and every runtime (a paused one is resumed first: a stopped
        process cannot take SIGTERM)."""
        try:
            self.workload.stop()
        finally:
            for runtime in self.runtimes.values():
                if runtime.alive():
                    runtime.resume()
            for runtime in self.runtimes.values():
                runtime.stop()

    def converge(self) -> Convergence:
        """Stop the load and wait until every change is in Kafka, no key ends on an older
        message than its newest change, and each index equals its table; what it took."""
        self.workload.stop()
        conn = self.database.connect()
        verdict, caught_up = wait_converged(
            lambda: check_convergence(self.workload, self.routes, conn, self.bootstrap, self.es),
            timeout=180,
            alive=self.alive,
            on_timeout=self.tails,
            seed=self.workload.seed,
        )
        return Convergence(
            changes=len(self.workload.committed),
            transactions=self.workload.transactions,
            replayed=sum(v.replayed for v in verdict.kafka.values()),
            seconds=caught_up,
            dead_letters=sum(dead_letters(self.bootstrap, [self.routes.dead_letters]).values()),
        )


@dataclass(frozen=True)
class Convergence:
    """How a chaos test's cluster converged once its load stopped."""

    changes: int
    transactions: int
    replayed: int
    seconds: float
    dead_letters: int

    def __str__(self) -> str:
        return (
            f"{self.changes} changes in {self.transactions} transactions, {self.replayed} "
            f"replayed messages; converged {self.seconds:.1f} s after the load stopped"
        )


def assert_converged(cluster: ChaosCluster) -> None:
    """The cluster converged on a real load with no dead letter, and a read_committed
    consumer saw no change twice: a cluster writes exactly once (figures printed)."""
    report = cluster.converge()
    print(report)
    assert report.changes > 0, "the load wrote nothing, so convergence proves nothing"
    assert report.dead_letters == 0, f"{report.dead_letters} dead letter(s); none expected"
    assert report.replayed == 0, f"{report.replayed} change(s) seen twice; exactly once expected"


def _dbus(settings: ZooKeeperSettings, *args: str) -> None:
    """Run a `dbus` command against the test's cluster."""
    env = {"DBUS_ZOOKEEPER": settings.hosts, "DBUS_CLUSTER": settings.cluster}
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output


# A topic a runtime's sink has just made is in the broker's metadata before each of its
# partitions has a leader hosting its log; until then its end offsets are refused
# (NOT_LEADER_FOR_PARTITION...). The sink itself waits up to 30 s for that before it
# writes to a topic it made (``kafka_admin.wait_writable``): so long may a reader wait.
PARTITIONS_LED = 30.0
_NOT_LED_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
}


def _end_offset(consumer: Any, partition: TopicPartition) -> int:
    """The partition's end offset, once its leader answers (within ``PARTITIONS_LED``)."""
    deadline = time.monotonic() + PARTITIONS_LED
    while True:
        try:
            _, high = consumer.get_watermark_offsets(partition, timeout=30)
            return int(high)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() not in _NOT_LED_YET:
                raise
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{partition.topic} partition {partition.partition} has no leader that "
                    f"answers its end offset after {PARTITIONS_LED:g} s: {error.str()}"
                ) from None
        time.sleep(0.1)  # the client reads the topic's leaders again meanwhile


def _delivered(bootstrap: str, topics: Iterable[str]) -> int:
    """How many messages the topics hold (their partitions' end offsets); a partition
    of a topic made a moment ago is asked until its leader answers."""
    consumer = kafka_consumer(bootstrap)
    try:
        total = 0
        for topic in topics:
            if not topic_exists(bootstrap, topic):
                continue
            for partition in consumer.list_topics(topic, timeout=30).topics[topic].partitions:
                total += _end_offset(consumer, TopicPartition(topic, partition))
        return total
    finally:
        consumer.close()


# A cluster's three runtimes start side by side (Spark each) and are each given a source
# and commit it within this on a loaded 2-core machine; it only guards against a hang.
WORKING = 240.0


def _build(
    stack: ExitStack,
    services: PrivateServices,
    kafka: str,
    elasticsearch: str,
    seed: int,
    folder: Path,
    session: float,
) -> ChaosCluster:
    """Three runtimes with ZooKeeper sessions of ``session`` working on four sources (a
    new database and a new cluster name on the module's MariaDB and ZooKeeper); each
    teardown goes on ``stack``."""
    database = stack.enter_context(scratch_database(services.endpoints.mariadb))
    settings = ZooKeeperSettings(
        hosts=services.endpoints.zookeeper.hosts, cluster=f"{CLUSTER}-{folder.name}"
    )
    workload = Workload(database.connect, seed=seed, tables=SOURCE_TABLES)
    workload.create_tables()
    routes = new_routes(database.name, workload.tables)
    stack.callback(delete_outputs, kafka, elasticsearch, routes)
    _dbus(settings, "cluster", "init")
    for table in SOURCE_TABLES:
        pattern = f"{database.name}.{table.name}"
        _dbus(settings, "cluster", "source", "add", _source(table.name),
              "--dsn-env", DSN_VARIABLE, "--table", pattern)  # fmt: skip
    _dbus(settings, "fn", "deploy", str(write_function_folder(folder / "fn", routes)))
    runtimes = {
        runtime_id: RuntimeProcess.for_member(
            runtime_id=runtime_id,
            cluster=settings.cluster,
            zookeeper=settings.hosts,
            session_timeout=session,
            kafka=kafka,
            elasticsearch=elasticsearch,
            folder=folder / runtime_id,
            env={DSN_VARIABLE: database.endpoint.dsn},
        )
        for runtime_id in RUNTIMES
    }
    client = connect(settings)
    stack.callback(close, client)
    es = Elasticsearch(elasticsearch, request_timeout=60)
    stack.callback(es.close)
    cluster = ChaosCluster(
        services.config, settings, client, runtimes, database, workload, routes, kafka, es
    )
    stack.callback(cluster.stop)
    for runtime in runtimes.values():
        runtime.start()
    return cluster


class SharedCluster:
    """The module's one cluster: built by the first test that asks for its session
    timeout, handed to the next test that asks for the same, stopped when one asks for
    another, when a test fails on it, and when the module ends.

    Building one (a MariaDB database, three Spark runtimes given their sources) is most
    of what each test here took when each built its own; a fault a test leaves behind
    is mended before the next (``ChaosCluster.ready``)."""

    def __init__(self, build: Callable[[ExitStack, float], ChaosCluster]) -> None:
        self._build = build
        self._stack: ExitStack | None = None
        self._cluster: ChaosCluster | None = None
        self._session = 0.0

    def get(self, session: float) -> ChaosCluster:
        if self._cluster is None or self._session != session:
            self.close()
            stack = ExitStack()
            try:
                self._cluster = self._build(stack, session)
            except BaseException:
                stack.close()
                raise
            self._stack, self._session = stack, session
        return self._cluster

    def close(self) -> None:
        stack, self._stack, self._cluster = self._stack, None, None
        if stack is not None:
            stack.close()


@pytest.fixture(scope="module")
def shared_cluster(
    module_services: Callable[..., PrivateServices],
    kafka_service: Any,
    elasticsearch_service: Any,
    module_chaos_seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SharedCluster]:
    """The module's cluster (``SharedCluster``) on a MariaDB and a ZooKeeper of its own."""
    services = module_services("mariadb", "zookeeper")

    def build(stack: ExitStack, session: float) -> ChaosCluster:
        folder = tmp_path_factory.mktemp("cluster")
        return _build(stack, services, kafka_service.bootstrap_servers,
                      elasticsearch_service.url, module_chaos_seed, folder, session)  # fmt: skip

    shared = SharedCluster(build)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def cluster(
    shared_cluster: SharedCluster, module_chaos_seed: int, request: pytest.FixtureRequest
) -> Iterator[ChaosCluster]:
    """Three runtimes working on four sources, the load running for a while; their
    ZooKeeper session timeout is ``SESSION``, or a test's ``session`` marker's."""
    say_seed(module_chaos_seed)
    marker = request.node.get_closest_marker("session")
    cluster = shared_cluster.get(float(marker.args[0]) if marker else SESSION)
    try:
        cluster.ready()
        yield cluster
    finally:
        if request.node.stash.get(CALL_FAILED, True):
            shared_cluster.close()  # what a failed test left is no start for the next
        else:
            cluster.workload.stop()


def _sigkill(cluster: ChaosCluster, victim: str, role: str) -> None:
    """SIGKILL ``victim`` mid-load: its sources, and only its, move within the bound."""
    before = cluster.assignments()
    lost = cluster.owned_by(victim)
    changes = len(cluster.workload.committed)
    killed = time.monotonic()
    cluster.runtimes[victim].kill9()
    cluster.killed.add(victim)
    moved, working = cluster.wait_moved(victim, lost, killed)
    print(
        f"SIGKILL {role} {victim}: {', '.join(sorted(lost))} owned elsewhere {moved:.2f} s "
        f"after the kill (session timeout {SESSION:g} s), committed by their new owners "
        f"{working:.2f} s after"
    )
    after = cluster.assignments()
    unmoved = {s: after[s][:2] for s in before if s not in lost}
    assert unmoved == {s: before[s][:2] for s in unmoved}, "a source that was not lost moved"
    cluster.run_load(LOAD_AFTER)
    assert len(cluster.workload.committed) > changes, "no change was written after the kill"


def _binds(config: Path, sources: dict[str, int]) -> list[str]:
    """Which of ``sources`` the runtime's configuration still reads at that epoch."""
    # Names and epochs only: the runtime may be paused, and cannot answer for passwords.
    read = load_config(config, with_secrets=False).sources
    return [b.spec.name for b in read if sources.get(b.spec.name) == b.epoch]


def test_a_runtime_paused_past_its_session_never_commits_what_it_lost(
    cluster: ChaosCluster,
) -> None:
    victim = cluster.follower_with_sources()
    runtime = cluster.runtimes[victim]
    config = runtime.checkpoint.with_name(f"{runtime.checkpoint.name}.config.json")
    lost = cluster.owned_by(victim)
    assert sorted(_binds(config, lost)) == sorted(lost)
    writes = PositionWrites(cluster.client, cluster.settings, lost)

    paused = time.monotonic()
    runtime.pause()
    moved, working = cluster.wait_moved(victim, lost, paused)
    moved_at = paused + moved
    log_before = len(runtime.log_text())
    runtime.resume()
    dropped = wait_until(
        lambda: not _binds(config, lost), SESSION, "the resumed runtime stops reading what it lost"
    )
    print(
        f"SIGSTOP runtime {victim}: {', '.join(sorted(lost))} owned elsewhere {moved:.2f} s "
        f"into the pause (session timeout {SESSION:g} s), committed by their new owners "
        f"{working:.2f} s in; after SIGCONT it stopped reading them within {dropped:.2f} s"
    )
    rejoined = wait_until(
        lambda: victim in {r for r, _, running in cluster.assignments().values() if running},
        SESSION + cluster.handoff_of(cluster.sources) + MARGIN,
        "the resumed runtime joins again and is given sources",
    )
    cluster.run_load(LOAD_AFTER)

    stale = [
        w
        for w in writes.seen
        if w.seen > moved_at and w.runtime == victim and w.epoch <= lost[w.source]
    ]
    assert stale == [], "the resumed runtime committed for sources it had lost"
    log = runtime.log_text()[log_before:]
    assert "ZooKeeper session lost" in log, "the resumed runtime did not notice its lost session"
    for source, epoch in lost.items():
        assert f"flushed the held commit of {source} at epoch {epoch}\n" not in log
    print(
        f"it was given sources again {rejoined:.2f} s later; position writes watched: "
        f"{len(writes.seen)} ({writes.gaps} versions unseen), none by it at a lost epoch"
    )
    # Its batch in flight when paused wakes to a transaction the broker aborted and a
    # hold it no longer has: no key may end on an older message than the new owner's.
    assert_converged(cluster)


def test_sigkill_of_a_runtime_moves_its_sources_and_loses_nothing(
    cluster: ChaosCluster,
) -> None:
    _sigkill(cluster, cluster.follower_with_sources(), "runtime")
    assert_converged(cluster)


def test_sigkill_of_the_leader_elects_another_and_loses_nothing(
    cluster: ChaosCluster,
) -> None:
    victim, term = cluster.leader()
    _sigkill(cluster, victim, "leader")
    leader, new_term = cluster.leader()
    assert leader != victim and leader in RUNTIMES
    assert new_term > term
    print(f"{leader} leads at term {new_term}")
    assert_converged(cluster)


@pytest.mark.session(RESTART_SESSION)
def test_zookeeper_restart_mid_load_holds_commits_and_loses_nothing(
    cluster: ChaosCluster,
) -> None:
    before = cluster.assignments()
    positions = {s: cluster.position(s)["position"] for s in cluster.sources}
    logs = {r: len(p.log_text()) for r, p in cluster.runtimes.items()}
    topics = [cluster.routes.topic(t.name) for t in SOURCE_TABLES]
    delivered = _delivered(cluster.bootstrap, topics)

    down(["zookeeper"], config=cluster.services)
    stopped = time.monotonic()
    cluster.run_load(ZOOKEEPER_DOWN)
    delivered_meanwhile = _delivered(cluster.bootstrap, topics) - delivered
    up(["zookeeper"], config=cluster.services)
    back = time.monotonic()
    advanced = wait_until(
        lambda: all(_after(cluster.position(s)["position"], positions[s]) for s in positions),
        60,
        "every source's position advances once ZooKeeper is back",
    )
    assert delivered_meanwhile > 0, "the runtimes stopped working while ZooKeeper was away"
    since = {r: p.log_text()[logs[r] :] for r, p in cluster.runtimes.items()}
    sessions = "\n".join(
        f"--- {r}:\n" + "\n".join(line for line in log.splitlines() if "coordination" in line)
        for r, log in since.items()
    )
    assert cluster.assignments() == before, (
        f"the sessions outlive the restart: nothing moves\n{cluster.tails()}\n"
        f"each runtime's sessions since ZooKeeper stopped:\n{sessions}"
    )
    for runtime_id, log in since.items():
        # A batch that finished while ZooKeeper was away held its commit; past a
        # hold's last confirmation (2 s) the Kafka writes wait for ZooKeeper.
        assert "flushed the held commit" in log or "hold cannot be confirmed" in log, (
            f"{runtime_id} neither held a commit nor waited to confirm a hold"
        )
        assert "dropped a held commit" not in log
        assert "ZooKeeper session lost" not in log
    cluster.run_load(LOAD_AFTER)
    print(
        f"ZooKeeper down {back - stopped:.1f} s: {delivered_meanwhile} messages delivered "
        f"meanwhile; every position advanced {advanced:.2f} s after it was back"
    )
    assert_converged(cluster)
