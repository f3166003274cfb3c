"""Helpers for testing `dbus services` itself in a private state directory.

These tests start their own short-lived services on free ports under a temp
``DBUS_HOME``, so they never touch the shared services other tests use.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import free_ports

from dbus_deploy.services import PORT_VARIABLES, ServicesConfig, down, load_config


@pytest.fixture
def dbus_command() -> Path:
    """The ``dbus`` console script of the environment running the tests (.venv or tox)."""
    return Path(sys.executable).parent / "dbus"


@pytest.fixture
def isolated(tmp_path: Path) -> Callable[..., ServicesConfig]:
    """Make a configuration with its own home and free ports; overrides by keyword.

    Whatever a test starts with it is stopped when the test ends.
    """
    made: list[ServicesConfig] = []

    def make(**overrides: str) -> ServicesConfig:
        env = dict(os.environ)
        env["DBUS_HOME"] = str(tmp_path / "home")
        ports = free_ports(len(PORT_VARIABLES))
        env.update({var: str(port) for var, port in zip(PORT_VARIABLES, ports, strict=True)})
        env.update(overrides)
        config = load_config(env)
        made.append(config)
        return config

    yield make
    for config in made:
        down(config=config)
