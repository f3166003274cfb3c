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
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from scratch import FreshDatabase
from support import free_port

from dbus_deploy.services import (
    PORT_VARIABLES,
    Endpoints,
    ServicesConfig,
    down,
    endpoints,
    load_config,
    up,
)
from dbus_fn.errors import DbusError

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


@dataclass
class PrivateServices:
    config: ServicesConfig
    endpoints: Endpoints


@pytest.fixture
def private_services() -> Iterator[Callable[..., PrivateServices]]:
    """Start the named services privately: ``private_services("mariadb", "kafka")``."""
    made: list[ServicesConfig] = []

    def start(*names: str) -> PrivateServices:
        # Elasticsearch runs as its own user, who must traverse the home: not tmp_path.
        home = Path(tempfile.mkdtemp(prefix="dbus-chaos-"))
        home.chmod(0o755)
        (home / "lib").symlink_to(load_config().lib_dir, target_is_directory=True)
        env = {**os.environ, "DBUS_HOME": str(home)}
        env.update({var: str(free_port()) for var in PORT_VARIABLES})
        config = load_config(env)
        made.append(config)
        try:
            up(list(names), config=config)
        except DbusError as exc:
            pytest.fail(f"private services unavailable: {exc}", pytrace=False)
        return PrivateServices(config, endpoints(config))

    yield start
    for config in made:
        down(config=config)
        shutil.rmtree(config.home, ignore_errors=True)


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
