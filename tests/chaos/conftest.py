"""Chaos fixtures: a printed seed, private services nobody else depends on, and
whether a test passed (for what the tests of a module share).

Chaos tests stop, restart and overload what they run against, and a shared
service can be restarted under them by another test session; so each test gets
its own MariaDB (and, where it stops them, its own Kafka and Elasticsearch) in a
temp state directory on free ports, stopped when the test ends. Installed
artefacts (Kafka jars, the Elasticsearch distribution) are shared, read-only.
A module whose tests share what they run against (a cluster of runtimes) gets the
seed once (``module_chaos_seed``) and asks, after each test, whether it passed
(``call_passed``): a failed test's leftovers are built anew, not trusted.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Generator, Iterator

import pytest
from scratch import FreshDatabase
from support import PrivateServices

SEED_ENV = "DBUS_CHAOS_SEED"


def _seed() -> int:
    raw = os.environ.get(SEED_ENV, "").strip()
    seed = int(raw) if raw else random.SystemRandom().randrange(2**32)
    print(f"chaos seed: {seed} (replay with {SEED_ENV}={seed})")
    return seed


@pytest.fixture
def chaos_seed() -> int:
    """The seed every random choice of a chaos test derives from.

    Printed (pytest shows it with a failure); set ``DBUS_CHAOS_SEED`` to replay a run.
    """
    return _seed()


@pytest.fixture(scope="module")
def module_chaos_seed() -> int:
    """``chaos_seed`` for what a module's tests share: one seed for the module, printed
    with the first test that uses it."""
    return _seed()


_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report


@pytest.fixture
def call_passed(request: pytest.FixtureRequest) -> Callable[[], bool]:
    """Asked in a fixture's teardown: whether the test itself passed (False when it
    failed, or never ran because its setup failed)."""

    def passed() -> bool:
        report = request.node.stash.get(_CALL_REPORT, None)
        return report is not None and report.passed

    return passed


@pytest.fixture
def private_mariadb(private_services: Callable[..., PrivateServices]) -> PrivateServices:
    return private_services("mariadb")


@pytest.fixture
def chaos_database(private_mariadb: PrivateServices) -> Iterator[FreshDatabase]:
    """A database on a private MariaDB, whose binlog holds only this test's changes."""
    database = FreshDatabase("chaos", private_mariadb.endpoints.mariadb)
    with database.connect(use_database=False).cursor() as cur:
        cur.execute("CREATE DATABASE chaos")
    yield database
    database.close()
