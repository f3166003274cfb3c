"""Chaos fixtures: a printed seed, and private services nobody else depends on.

Chaos tests stop, restart and overload what they run against, and a shared
service can be restarted under them by another test session; so each test gets
its own MariaDB or MySQL (and, where it stops them, its own Kafka and Elasticsearch) in a
temp state directory on free ports, stopped when the test ends (or, where a
module's tests share a cluster, when the module ends). Installed artefacts (Kafka
jars, the Elasticsearch distribution) are shared, read-only. Each test's item
records whether its call failed (``convergence.CALL_FAILED``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from convergence import CALL_FAILED, new_seed, say_seed
from scratch import FreshDatabase
from support import PrivateServices


@pytest.fixture
def chaos_seed() -> int:
    """The seed every random choice of a chaos test derives from.

    Printed (pytest shows it with a failure); set ``DBUS_CHAOS_SEED`` to replay a run.
    """
    seed = new_seed()
    say_seed(seed)
    return seed


@pytest.fixture(scope="module")
def module_chaos_seed() -> int:
    """``chaos_seed`` for what a whole module's tests share (its tests print it each)."""
    return new_seed()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.fixture
def private_mariadb(private_services: Callable[..., PrivateServices]) -> PrivateServices:
    return private_services("mariadb")


@pytest.fixture
def chaos_server() -> str:
    """The server ``chaos_database`` runs: ``mariadb``, unless a test parametrizes this
    name (``@pytest.mark.parametrize("chaos_server", ["mariadb", "mysql"])``)."""
    return "mariadb"


@pytest.fixture
def chaos_database(
    private_services: Callable[..., PrivateServices], chaos_server: str
) -> Iterator[FreshDatabase]:
    """A database on a private server (``chaos_server``), whose binlog holds only this
    test's changes."""
    started = private_services(chaos_server)
    database = FreshDatabase("chaos", started.database(chaos_server))
    with database.connect(use_database=False).cursor() as cur:
        cur.execute("CREATE DATABASE chaos")
    yield database
    database.close()
