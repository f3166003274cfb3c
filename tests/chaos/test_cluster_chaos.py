"""Chaos for a cluster of runtimes: ZooKeeper moves the sources, nothing is lost.

Three `dbus runtime start --cluster` processes share four sources (one table of
a private MariaDB each) through a private ZooKeeper, with a short session
timeout, while a writer changes the four tables. Each test does one thing to
them mid-load: SIGKILL a runtime, SIGKILL the leader, SIGSTOP a runtime past its
session timeout and resume it, or stop ZooKeeper and start it again. It checks
what the coordination promises for that fault (the sources move within the
session timeout plus a bounded margin; a runtime that lost its session never
commits for what it lost; while ZooKeeper is away the runtimes keep their work
and hold their commits), and then, after the load stops, that every committed
change is in its table's topic, one key's changes in commit order, and each
index equals its table. `pytest -s` shows what was measured.

The four tests share one cluster, built once for the module (``SharedCluster``):
before each test the ``cluster`` fixture brings it back to health (ZooKeeper
running, no runtime paused, a killed one started again on its own folder, the
runtimes' session the test's, every runtime owning and committing sources) and
starts the load again; a test that failed leaves it to be built anew, not
trusted. The convergence each test ends with covers every change since the
cluster was built. The tests come in the order that starts the fewest runtimes
again (the note above them); run alone (``-k``), a test builds what it needs.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from convergence import (
    FIRST_COMMIT,
    TABLES,
    RuntimeProcess,
    Table,
    Workload,
    check_convergence,
    dead_letters,
    delete_outputs,
    new_routes,
    topic_exists,
    wait_converged,
    write_function_folder,
)
from elasticsearch import Elasticsearch
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from scratch import FreshDatabase
from support import PrivateServices, kafka_consumer
from support import wait_until as _wait_until

from dbus_deploy.services import ServicesConfig, down, up
from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings, close, cluster_status, connect
from dbus_spark.config import load_config

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
# within its session once the restarted server loads them, and a 2-core machine
# running three Spark runtimes under load can take most of 4 s to get there.
RESTART_SESSION = 8.0
ZOOKEEPER_DOWN = 2 * RESTART_SESSION  # twice the session timeout
# Runtimes started (three at once on a new cluster or a new session, or one the test
# before killed) until every one owns a source and has committed it. That is each
# start to its first commit, which FIRST_COMMIT bounds (a stuck start, not a slow one:
# its figures are there), and for a runtime that joins after the others a handoff
# (5.5 s as the runtimes advertise it here) before the leader gives it a source: well
# inside it. Beside another test run on 2 cores, three at once took up to 190 s to
# this, one started again up to 99 s.
WORKING = FIRST_COMMIT

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
    each), until ``close``. A watch re-reads after it fires, so two writes in one round
    trip show as one: ``gaps`` counts the versions not seen. The watches are on a
    client of their own, closed with them: the cluster the test shares with the next
    ones keeps none."""

    def __init__(self, settings: ZooKeeperSettings, sources: Iterable[str]):
        self.seen: list[PositionWrite] = []
        self._client: KazooClient = connect(settings)
        for source in sources:
            self._client.DataWatch(settings.layout.position(source), self._recorder(source))

    def close(self) -> None:
        close(self._client)

    def __enter__(self) -> PositionWrites:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

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

    zookeeper: ServicesConfig  # the private ZooKeeper's: stop and start it with this
    settings: ZooKeeperSettings
    client: KazooClient
    database: FreshDatabase
    workload: Workload
    routes: Any
    bootstrap: str
    elasticsearch_url: str
    es: Elasticsearch
    folder: Path  # each runtime's checkpoint and logs go in a folder of its name here
    runtimes: dict[str, RuntimeProcess] = field(default_factory=dict)
    session: float | None = None  # the runtimes' session timeout (None: none made yet)
    member_sets: int = 0  # how many sets of runtimes were made
    killed: set[str] = field(default_factory=set)
    load_began: tuple[int, int] = (0, 0)  # changes and transactions when this test's began

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

    def _members(self, session: float) -> dict[str, RuntimeProcess]:
        """The three runtimes, not started, with ``session`` second ZooKeeper sessions;
        each on its own folder, kept from one set of them to the next (its logs in a
        folder of their own per set)."""
        self.member_sets += 1
        number = self.member_sets
        hosts, dsn = self.settings.hosts, self.database.endpoint.dsn
        return {
            runtime_id: RuntimeProcess.for_member(
                runtime_id=runtime_id,
                cluster=self.settings.cluster,
                zookeeper=hosts,
                session_timeout=session,
                kafka=self.bootstrap,
                elasticsearch=self.elasticsearch_url,
                folder=self.folder / runtime_id,
                logs=self.folder / runtime_id / f"logs-{number}-session-{session:g}s",
                env={DSN_VARIABLE: dsn},
            )
            for runtime_id in RUNTIMES
        }

    def heal(self, session: float) -> None:
        """Bring the cluster back to health for a test whose runtimes' sessions last
        ``session``, the load running for ``LOAD_BEFORE`` before its fault: a paused
        runtime resumed; all stopped and made again if their session is another; any
        not running (killed, or never started) started on its own folder; wait until
        every runtime owns a source and has committed it; then the load started again,
        and, for each runtime started here, wait until it has committed since its start.
        A runtime started again may own what it owned before, at the same epoch, and find
        the last commit there its own: only its checkpoint says whether this run has
        committed, and it commits only what it reads, hence the load. The load starts
        once the sources are settled, as it always did on a new cluster: three runtimes
        starting under load on a busy machine had their first Kafka transactions time
        out."""
        for runtime in self.runtimes.values():
            if runtime.alive():
                runtime.resume()  # a paused one; to a running one SIGCONT does nothing
        if self.session != session:
            self.stop_runtimes()
            self.runtimes = self._members(session)
            self.session = session
        began = time.monotonic()
        started = [r for r, p in self.runtimes.items() if not p.alive()]
        for runtime_id in started:
            self.runtimes[runtime_id].start()
        self.killed.clear()

        def working() -> bool:
            assert self.alive(), f"a runtime exited while starting:\n{self.tails()}"
            owners = {owner for owner, _, _ in self.assignments().values()}
            return owners == set(RUNTIMES) and self.committed_by_owners(self.sources)

        def committed_since_start() -> bool:
            assert self.alive(), f"a runtime exited while starting:\n{self.tails()}"
            return all(self.runtimes[r].has_committed() for r in started)

        wait_until(working, WORKING, "every runtime working on its sources")
        self.load_began = (len(self.workload.committed), self.workload.transactions)
        self.workload.start()
        wait_until(
            committed_since_start,
            WORKING - (time.monotonic() - began),
            f"{', '.join(started)} committing since their start",
        )
        print(
            f"\n{len(RUNTIMES)} runtimes ({session:g} s sessions) working on "
            f"{len(self.sources)} sources {time.monotonic() - began:.0f} s after "
            f"{', '.join(started) or 'none'} started: {self.assignments()}"
        )
        self.run_load(LOAD_BEFORE)

    def stop_runtimes(self) -> None:
        """Stop every runtime (each cleanly, all at once), a paused one resumed first:
        a stopped process cannot take SIGTERM."""
        for runtime in self.runtimes.values():
            if runtime.alive():
                runtime.resume()
        with ThreadPoolExecutor(max(1, len(self.runtimes))) as pool:
            list(pool.map(RuntimeProcess.stop, self.runtimes.values()))

    def tear_down(self) -> None:
        """Stop the load and the runtimes; remove the topics and indices they wrote."""
        # A workload that failed raised in its test (the test's own ``stop``).
        with contextlib.suppress(AssertionError):
            self.workload.stop()
        try:
            self.stop_runtimes()
        finally:
            close(self.client)
            self.es.close()
            self.database.close()
            delete_outputs(self.bootstrap, self.elasticsearch_url, self.routes)

    def converge(self) -> Convergence:
        """Stop the load and wait until every change since the cluster was built is in
        Kafka, no key ends on an older message than its newest change, and each index
        equals its table; what it took, and what this test's load wrote."""
        self.workload.stop()
        conn = self.database.connect()
        verdict, caught_up = wait_converged(
            lambda: check_convergence(self.workload, self.routes, conn, self.bootstrap, self.es),
            timeout=180,
            alive=self.alive,
            on_timeout=self.tails,
            seed=self.workload.seed,
        )
        changes, transactions = self.load_began
        return Convergence(
            changes=len(self.workload.committed) - changes,
            transactions=self.workload.transactions - transactions,
            checked=len(self.workload.committed),
            replayed=sum(v.replayed for v in verdict.kafka.values()),
            seconds=caught_up,
            dead_letters=len(dead_letters(self.bootstrap, self.routes)),
        )


@dataclass(frozen=True)
class Convergence:
    """How a chaos test's cluster converged once its load stopped."""

    changes: int  # the test's load's
    transactions: int  # the test's load's
    checked: int  # every change since the cluster was built
    replayed: int
    seconds: float
    dead_letters: int

    def __str__(self) -> str:
        return (
            f"{self.changes} changes in {self.transactions} transactions ({self.checked} "
            f"since the cluster was built, all checked), {self.replayed} replayed "
            f"messages; converged {self.seconds:.1f} s after the load stopped"
        )


def assert_converged(cluster: ChaosCluster) -> None:
    """The cluster converged on a real load with no dead letter (figures printed)."""
    report = cluster.converge()
    print(report)
    assert report.changes > 0, "the test's load wrote nothing, so convergence proves nothing"
    assert report.dead_letters == 0, f"{report.dead_letters} dead letter(s); none expected"


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


def _build(
    services: PrivateServices, kafka: str, elasticsearch: str, seed: int, folder: Path
) -> ChaosCluster:
    """A cluster, its runtimes not made yet: a database of four empty tables (the
    load's), the cluster and its sources in ZooKeeper, the deployment that routes each
    table to a topic and an index of its own. The database and the cluster are named
    after ``folder``: one built anew shares nothing with the one before."""
    name = folder.name
    database = FreshDatabase(name, services.endpoints.mariadb)
    with database.connect(use_database=False).cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    settings = ZooKeeperSettings(hosts=services.endpoints.zookeeper.hosts, cluster=name)
    workload = Workload(database.connect, seed=seed, tables=SOURCE_TABLES)
    workload.create_tables()
    routes = new_routes(database.name, workload.tables)
    _dbus(settings, "cluster", "init")
    for table in SOURCE_TABLES:
        pattern = f"{database.name}.{table.name}"
        _dbus(settings, "cluster", "source", "add", _source(table.name),
              "--dsn-env", DSN_VARIABLE, "--table", pattern)  # fmt: skip
    _dbus(settings, "fn", "deploy", str(write_function_folder(folder / "fn", routes)))
    return ChaosCluster(
        services.config, settings, connect(settings), database, workload, routes, kafka,
        elasticsearch, Elasticsearch(elasticsearch, request_timeout=60), folder,
    )  # fmt: skip


class SharedCluster:
    """The module's one cluster, on its private MariaDB and ZooKeeper: built when a test
    first asks for it, brought back to health for each next test, and built anew (a
    database, a ZooKeeper and runtimes of its own) after a test that failed."""

    def __init__(
        self, services: PrivateServices, kafka: str, elasticsearch: str, seed: int, folder: Path
    ) -> None:
        self._services = services
        self._kafka = kafka
        self._elasticsearch = elasticsearch
        self._seed = seed
        self._folder = folder
        self._builds = 0
        self.current: ChaosCluster | None = None
        self.distrust: str | None = None
        """Why the current cluster is not to be healed but built anew (None: it may be)."""

    def ready(self, session: float) -> ChaosCluster:
        """The cluster, healthy, its runtimes' sessions ``session`` long, the load
        running for ``LOAD_BEFORE``; a heal that fails says so, and the next test
        builds a new cluster."""
        # A failed test may have left ZooKeeper stopped; a running one is left as it is.
        up(["zookeeper"], config=self._services.config)
        if self.current is not None and self.distrust is not None:
            print(f"\nthe cluster is built anew: {self.distrust}")
            self.close()
        self.distrust = "it could not be made healthy for the test before"
        if self.current is None:
            self._builds += 1
            self.current = _build(
                self._services, self._kafka, self._elasticsearch, self._seed,
                self._folder / f"{CLUSTER}{self._builds}",
            )  # fmt: skip
        cluster = self.current
        try:
            cluster.heal(session)
            self.distrust = None
        except AssertionError as exc:
            raise AssertionError(
                f"the shared cluster could not be made healthy for this test (the next "
                f"test builds a new one): {exc}"
            ) from exc
        finally:
            if self.distrust is not None:
                # Not started, or started and then a runtime exited: none writes now.
                with contextlib.suppress(AssertionError):
                    cluster.workload.stop()
        return cluster

    def after(self, test: str, passed: bool) -> None:
        """The test ended: its load stopped (a failed load says so here); the cluster of
        a test that did not pass is not trusted by the next."""
        if not passed:
            self.distrust = f"{test} did not pass"
        if self.current is not None:
            self.current.workload.stop()

    def close(self) -> None:
        if self.current is not None:
            try:
                self.current.tear_down()
            finally:
                self.current = None


@pytest.fixture(scope="module")
def shared_cluster(
    module_services: Callable[..., PrivateServices],
    kafka_service: Any,
    elasticsearch_service: Any,
    module_chaos_seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SharedCluster]:
    """The module's cluster, built by the first test that asks for it (a private
    MariaDB and ZooKeeper started here, in one home of their own)."""
    shared = SharedCluster(
        module_services("mariadb", "zookeeper"),
        kafka_service.bootstrap_servers,
        elasticsearch_service.url,
        module_chaos_seed,
        tmp_path_factory.mktemp("cluster-chaos"),
    )
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def cluster(
    shared_cluster: SharedCluster,
    call_passed: Callable[[], bool],
    request: pytest.FixtureRequest,
) -> Iterator[ChaosCluster]:
    """Three runtimes working on four sources, the load running for a while; their
    ZooKeeper session timeout is ``SESSION``, or a test's ``session`` marker's."""
    marker = request.node.get_closest_marker("session")
    session = float(marker.args[0]) if marker else SESSION
    cluster = shared_cluster.ready(session)
    try:
        yield cluster
    finally:
        shared_cluster.after(request.node.name, call_passed())


# The tests run in this order, the one that starts the fewest runtimes again between
# them (``SharedCluster``): the ZooKeeper restart on the new cluster with its own
# session (``RESTART_SESSION``); then, all three started again with ``SESSION``, the
# SIGSTOP, which leaves all three running; the SIGKILL of a runtime, after which one is
# started again; and last the SIGKILL of the leader, after which none is.


@pytest.mark.session(RESTART_SESSION)
def test_zookeeper_restart_mid_load_holds_commits_and_loses_nothing(
    cluster: ChaosCluster,
) -> None:
    before = cluster.assignments()
    positions = {s: cluster.position(s)["position"] for s in cluster.sources}
    logs = {r: len(p.log_text()) for r, p in cluster.runtimes.items()}
    topics = [cluster.routes.topic(t.name) for t in SOURCE_TABLES]
    delivered = _delivered(cluster.bootstrap, topics)

    down(["zookeeper"], config=cluster.zookeeper)
    stopped = time.monotonic()
    cluster.run_load(ZOOKEEPER_DOWN)
    delivered_meanwhile = _delivered(cluster.bootstrap, topics) - delivered
    up(["zookeeper"], config=cluster.zookeeper)
    back = time.monotonic()
    advanced = wait_until(
        lambda: all(_after(cluster.position(s)["position"], positions[s]) for s in positions),
        60,
        "every source's position advances once ZooKeeper is back",
    )
    assert delivered_meanwhile > 0, "the runtimes stopped working while ZooKeeper was away"
    assert cluster.assignments() == before, (
        f"the sessions outlive the restart: nothing moves\n{cluster.tails()}"
    )
    for runtime_id, process in cluster.runtimes.items():
        log = process.log_text()[logs[runtime_id] :]
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
    with PositionWrites(cluster.settings, lost) as writes:
        paused = time.monotonic()
        runtime.pause()
        moved, working = cluster.wait_moved(victim, lost, paused)
        moved_at = paused + moved
        log_before = len(runtime.log_text())
        runtime.resume()
        dropped = wait_until(
            lambda: not _binds(config, lost),
            SESSION,
            "the resumed runtime stops reading what it lost",
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
