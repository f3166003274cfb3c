"""End-to-end fixtures: one local Spark session for every runtime test, the scratch
services, and a TCP proxy in front of Elasticsearch that a test can cut."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from dbus_spark.spark.session import spark_session

    session = spark_session("local[2]", app_name="dbus-tests")
    yield session
    session.stop()



@pytest.fixture
def scratch(
    services: Any,
    database: Any,
    kafka_topic: str,
    es_index: str,
    tmp_path: Path,
    function_folder: Any,
) -> Scratch:
    """The services, a fresh database on ``server``, a topic, an index, a folder."""
    return Scratch(services, database, kafka_topic, es_index, tmp_path, function_folder)


@pytest.fixture
def es_proxy(scratch: Scratch) -> Iterator[Any]:
    """A ``support.Proxy`` in front of the scratch's Elasticsearch, closed afterwards."""
    from support import Proxy

    proxy = Proxy(scratch.services.elasticsearch.url.split("://", 1)[1].rstrip("/"))
    try:
        yield proxy
    finally:
        proxy.close()
