"""Chaos against the real ZooKeeper with three runtime processes.

SIGKILL a runtime and the leader: their sources move within the session timeout
plus a bounded margin. SIGSTOP a runtime past its session timeout and resume
it: it never commits again for what it lost. Each test prints what it measured.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from coordination_support import assignments, register_sources
from kazoo.client import KazooClient
from support import wait_for, wait_until

from dbus_fn.coordination import ZooKeeperSettings

pytestmark = pytest.mark.integration

SESSION = 4.0
# ZooKeeper expires sessions on its tick (2 s), then the leader reacts; the rest
# is slack for a 2-core machine under load.
MARGIN = 6.0
SCRIPT = Path(__file__).with_name("runtime_process.py")


class RuntimeProcess:
    def __init__(self, settings: ZooKeeperSettings, runtime_id: str, logs: Path) -> None:
        self.runtime_id = runtime_id
        self.stdout = logs / f"{runtime_id}.out"
        self.stderr = logs / f"{runtime_id}.err"
        argv = [sys.executable, str(SCRIPT), settings.hosts, settings.cluster, runtime_id]
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen([*argv, str(SESSION)], stdout=out, stderr=err)

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stdout.read_text().splitlines() if line]

    def signal(self, number: int) -> float:
        os.kill(self.process.pid, number)
        return time.time()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def spawn(tmp_path: Path, cluster: ZooKeeperSettings) -> Iterator[Any]:
    made: list[RuntimeProcess] = []

    def start(runtime_id: str) -> RuntimeProcess:
        made.append(RuntimeProcess(cluster, runtime_id, tmp_path))
        return made[-1]

    yield start
    for runtime in made:
        runtime.stop()


def _leader(client: KazooClient, settings: ZooKeeperSettings) -> str:
    return str(json.loads(client.get(settings.layout.leader)[0])["runtime"])


def _three_runtimes(
    spawn: Any, client: KazooClient, settings: ZooKeeperSettings, sources: int
) -> dict[str, RuntimeProcess]:
    register_sources(client, settings, sources)
    trio = {name: spawn(name) for name in ("rt-a", "rt-b", "rt-c")}
    share = sources // 3
    wait_until(
        lambda: (
            sorted(list(assignments(client, settings).values()).count(n) for n in trio)
            == [share] * 3
        ),
        30,
        "sources spread over three runtime processes",
    )
    return trio


def _gone(client: KazooClient, settings: ZooKeeperSettings, runtime_id: str, count: int) -> bool:
    found = assignments(client, settings)
    return len(found) == count and runtime_id not in found.values()


@pytest.mark.parametrize("target", ["follower", "leader"])
def test_sigkill_moves_the_sources_within_the_session_timeout(
    target: str, spawn: Any, cluster: ZooKeeperSettings, client: KazooClient
) -> None:
    trio = _three_runtimes(spawn, client, cluster, 12)
    leader = _leader(client, cluster)
    victim_id = leader if target == "leader" else next(n for n in trio if n != leader)
    before = assignments(client, cluster)
    lost = {s for s, r in before.items() if r == victim_id}

    killed = trio[victim_id].signal(signal.SIGKILL)
    moved = wait_until(
        lambda: _gone(client, cluster, victim_id, 12), SESSION + MARGIN, "sources reassigned"
    )
    after = assignments(client, cluster)
    assert {s for s in before if before[s] != after[s]} == lost, "only the dead one's sources"
    if target == "leader":
        assert _leader(client, cluster) != victim_id

    # The new owners commit them (they started from what is committed).
    def committed_by_new_owners() -> bool:
        for source in lost:
            if client.exists(cluster.layout.position(source)) is None:
                return False
            raw, _ = client.get(cluster.layout.position(source))
            if json.loads(raw)["runtime"] != after[source]:
                return False
        return True

    working = wait_until(committed_by_new_owners, 10, "new owners commit")
    print(
        f"\nSIGKILL {target} {victim_id}: {len(lost)} sources reassigned {moved:.2f} s after "
        f"the kill (session timeout {SESSION:g} s), committed by their new owners "
        f"{moved + working:.2f} s after; killed at {killed:.3f}"
    )


def test_a_paused_runtime_never_commits_after_it_lost_its_sources(
    spawn: Any, cluster: ZooKeeperSettings, client: KazooClient
) -> None:
    trio = _three_runtimes(spawn, client, cluster, 6)
    leader = _leader(client, cluster)
    victim = trio[next(n for n in trio if n != leader)]

    def working() -> dict[str, int] | None:
        """What the victim works on once its last rounds committed every source it owns
        (the sources settle on three runtimes first: a round may still be fenced by a
        move, and a victim paused then would have nothing of its own to lose)."""
        rounds = victim.lines()[-3:]
        owned = rounds[-1]["owned"] if len(rounds) == 3 else None
        committed = {source: ["committed", epoch] for source, epoch in (owned or {}).items()}
        settled = all(
            r["owned"] == owned and {s: o[:2] for s, o in r["outcomes"].items()} == committed
            for r in rounds
        )
        return owned if owned and settled else None

    before: dict[str, int] = wait_for(working, 10, "the victim committing what it owns")

    victim.signal(signal.SIGSTOP)
    paused = wait_until(
        lambda: _gone(client, cluster, victim.runtime_id, 6),
        SESSION + MARGIN,
        "its sources reassigned while it is paused",
    )
    resumed = victim.signal(signal.SIGCONT)

    def old_commits() -> list[tuple[str, float, float]]:
        """(outcome, asked, answered) of each commit at an epoch it had before the pause."""
        return [
            (outcome, began, ended)
            for line in victim.lines()
            for source, (outcome, epoch, began, ended) in line["outcomes"].items()
            if before.get(source) == epoch
        ]

    # It goes on with what it had been working on: the commit in flight at the pause is
    # answered after the resume, and the next rounds ask again until fenced.
    wait_until(lambda: any(ended > resumed for _, _, ended in old_commits()), SESSION + MARGIN,
               "the resumed runtime trying to commit what it had been working on")  # fmt: skip
    time.sleep(SESSION)  # a held commit may be flushed meanwhile (checked below)
    tried = [outcome for outcome, _, ended in old_commits() if ended > resumed]
    assert tried, "it tried to commit what it had been working on"
    # At the epochs it had before the pause, no commit asked after it succeeds (one asked
    # before it and answered after may: the server took it before the session ended).
    stale = [outcome for outcome, began, _ in old_commits() if began > resumed]
    assert "committed" not in stale
    # A held commit may be flushed later at a new epoch (a slow step under load can
    # make a view stale again), never at an old one.
    log = victim.stderr.read_text()
    for source, epoch in before.items():
        assert f"flushed the held commit of {source} at epoch {epoch}\n" not in log
    for source, epoch in before.items():
        data = json.loads(client.get(cluster.layout.position(source))[0])
        assert data["runtime"] != victim.runtime_id or data["epoch"] > epoch
    print(
        f"\nSIGSTOP: sources reassigned {paused:.2f} s into the pause; after SIGCONT its "
        f"commits at the old epochs were {sorted(set(tried))}"
    )
