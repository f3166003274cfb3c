"""Fixtures for capture tests: a source over a fresh database, and a reader of it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from capture_support import TablesAt, execute

from dbus_fn import BinlogPosition
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for


@pytest.fixture(params=["native", "python"])
def mysql_reader(
    request: pytest.FixtureRequest, mysql_database: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BinlogReader]:
    """A reader of every table of the test's MySQL database, with the native decoder
    or with mysql-replication's (``DBUS_NATIVE_DECODE=0``)."""
    from dbus_fn.capture._native import SWITCH

    if request.param == "python":
        monkeypatch.setenv(SWITCH, "0")
    spec = SourceSpec(name="my", dsn=mysql_database.endpoint.dsn,
                      tables=(f"{mysql_database.name}.*",))  # fmt: skip
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        yield reader
    finally:
        reader.close()



@pytest.fixture
def source(database: Any) -> SourceSpec:
    """A source capturing every table of the test's fresh database."""
    return SourceSpec(name="test", dsn=database.endpoint.dsn, tables=(f"{database.name}.*",))


BOTH_DECODERS = frozenset(
    {"test_capture_types", "test_capture_zero_dates", "test_capture_declared_types",
     "test_capture_schema_changes", "test_capture_shards", "test_capture_snapshot",
     "test_capture_chunks", "test_capture_resume", "test_capture_undecodable"}
)  # fmt: skip
"""Modules whose readers run once with the native code and once with Python's: the
binlog's events split (``dbus_fn.capture._events``) and their rows decoded, and a
snapshot's and a chunk's SELECT rows (``dbus_fn.capture._text_rows``)."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    chosen = any(
        "decoding" in str(mark.args[0]) for mark in metafunc.definition.iter_markers("parametrize")
    )  # a test that names its decoders itself
    if "decoding" in metafunc.fixturenames and not chosen:
        both = metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_DECODERS
        metafunc.parametrize("decoding", ["native", "python"] if both else ["native"],
                             indirect=True)  # fmt: skip


@pytest.fixture
def decoding(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which row decoder readers made in the test use: ``native`` (``dbus_native``,
    when built) or ``python`` (switched off with ``DBUS_NATIVE_DECODE=0``)."""
    from dbus_fn.capture._native import SWITCH

    if request.param == "python":
        monkeypatch.setenv(SWITCH, "0")
    else:
        monkeypatch.delenv(SWITCH, raising=False)
    return str(request.param)


@pytest.fixture
def reader(source: SourceSpec, decoding: str) -> Iterator[BinlogReader]:
    """A reader with a server_id of its own, closed after the test."""
    binlog = BinlogReader(source, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        yield binlog
    finally:
        binlog.close()


@pytest.fixture
def tables_at(database: Any, reader: BinlogReader) -> TablesAt:
    """Run statements in the test's database; the connection and the position after them."""

    def make(*statements: str) -> tuple[Any, BinlogPosition]:
        connection = database.connect()
        execute(connection, *statements)
        return connection, reader.master_position()

    return make
