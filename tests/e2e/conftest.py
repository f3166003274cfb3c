"""End-to-end fixtures: one local Spark session for every runtime test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from dbus_spark.job import spark_session

    session = spark_session("local[2]", app_name="dbus-tests")
    yield session
    session.stop()
