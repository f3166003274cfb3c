"""Chaos fixtures: a printed seed, and private services nobody else depends on.

Chaos tests stop, restart and overload what they run against, and a shared
service can be restarted under them by another test session; so each test gets
its own MariaDB (and, where it stops them, its own Kafka and Elasticsearch) in a
temp state directory on free ports, stopped when the test ends. Installed
artefacts (Kafka jars, the Elasticsearch distribution) are shared, read-only.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator

import pytest
from scratch import FreshDatabase
from support import PrivateServices

SEED_ENV = "DBUS_CHAOS_SEED"


@pytest.fixture
def chaos_seed() -> int:
    """The seed every random choice of a chaos test derives from.

    Printed (pytest shows it with a failure); set ``DBUS_CHAOS_SEED`` to replay a run.
    """
    raw = os.environ.get(SEED_ENV, "").strip()
    seed = int(raw) if raw else random.SystemRandom().randrange(2**32)
    print(f"chaos seed: {seed} (replay with {SEED_ENV}={seed})")
    return seed


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
