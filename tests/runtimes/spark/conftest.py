"""Fixtures of the Spark runtime's unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbus_spark.config import runtime as config
from dbus_spark.config.runtime import RuntimeConfig


@pytest.fixture
def config_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The paths the runtime's configuration is parsed from, from now on, in order."""
    parsed: list[Path] = []
    load = config.load_config

    def counted(path: Path) -> RuntimeConfig:
        parsed.append(path)
        return load(path)

    monkeypatch.setattr(config, "load_config", counted)
    return parsed
