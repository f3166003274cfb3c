"""Helpers for testing function modules with plain pytest, no Spark, no services.

Build row changes with ``insert``, ``update`` and ``delete`` and run them through
a module or deployment with ``run``::

    from dbus_fn.testing import insert, run

    def test_paid_orders_go_to_their_topic():
        outcome = run("functions/orders", insert("shop.orders", id=1, status="paid"))
        assert outcome.destinations == ["kafka://orders.paid"]

The pytest plugin (``dbus_fn.testing.plugin``, registered automatically) adds
fixtures that load the deployment next to the test file.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from dbus_fn.errors import EventFormatError
from dbus_fn.events import BinlogPosition, Operation, RowChange
from dbus_fn.manifest import manifest_path
from dbus_fn.pipeline import Outcome, Pipeline
from dbus_fn.registry import LoadedDeployment, deployment_from_module, with_packages

__all__ = [
    "delete",
    "deployment",
    "insert",
    "row_change",
    "run",
    "run_many",
    "snapshot",
    "update",
]

TEST_SOURCE = "test"
TEST_SERVER_ID = "00000000-0000-0000-0000-000000000001"
_COMMIT_TIME = datetime(2024, 1, 1, tzinfo=UTC)
_positions = itertools.count(4)


def row_change(
    op: Operation | str,
    table: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    *,
    primary_key: Iterable[str] | None = None,
    source: str = TEST_SOURCE,
    position: BinlogPosition | None = None,
    commit_time: datetime | None = None,
    column_types: Mapping[str, str] | None = None,
    transaction_id: str | None = None,
) -> RowChange:
    """A ``RowChange`` with defaults for everything a test does not care about.

    ``table`` is ``"db.table"``. The primary key defaults to ``id`` when the row
    has one, else to its first column; each change gets the next binlog position
    of a fictitious ``mysql-bin.000001``, so event ids differ.
    """
    database, dot, name = table.partition(".")
    if not dot or not database or not name or "." in name:
        raise EventFormatError(f'expected a table as "db.table", got {table!r}')
    row = after if after is not None else before
    if row is None:
        raise EventFormatError("expected a before or an after image, got neither")
    if primary_key is None:
        columns = list(row)
        primary_key = ["id"] if "id" in row else columns[:1]
    return RowChange(
        source=source,
        database=database,
        table=name,
        op=Operation(op),
        before=before,
        after=after,
        primary_key=tuple(primary_key),
        position=position or BinlogPosition("mysql-bin.000001", next(_positions) * 100),
        commit_time=commit_time or _COMMIT_TIME,
        server_id=TEST_SERVER_ID,
        transaction_id=transaction_id,
        column_types=column_types,
    )


def insert(table: str, row: Mapping[str, Any] | None = None, /, **columns: Any) -> RowChange:
    """An inserted row: ``insert("shop.orders", id=1, status="paid")`` (or a dict)."""
    return row_change(Operation.INSERT, table, None, {**(row or {}), **columns})


def update(
    table: str,
    before: Mapping[str, Any],
    after: Mapping[str, Any] | None = None,
    /,
    **changed: Any,
) -> RowChange:
    """An updated row: ``update("shop.orders", old, new)``, or
    ``update("shop.orders", old, status="shipped")`` for ``old`` with changes."""
    new = {**(after if after is not None else before), **changed}
    return row_change(Operation.UPDATE, table, before, new)


def delete(table: str, row: Mapping[str, Any] | None = None, /, **columns: Any) -> RowChange:
    """A deleted row: ``delete("shop.orders", id=1, status="paid")`` (or a dict)."""
    return row_change(Operation.DELETE, table, {**(row or {}), **columns}, None)


def snapshot(table: str, row: Mapping[str, Any] | None = None, /, **columns: Any) -> RowChange:
    """A row as a bootstrap or backfill read it: ``snapshot("shop.orders", id=1)``."""
    return row_change(Operation.SNAPSHOT, table, None, {**(row or {}), **columns})


def deployment(target: LoadedDeployment | ModuleType | str | Path) -> LoadedDeployment:
    """A deployment from a folder or ``dbus.toml``, a module (or its file), or as is.

    A module without a manifest runs with every table its selectors name and the
    default route ``kafka://default``.
    """
    if isinstance(target, LoadedDeployment):
        return target
    if isinstance(target, ModuleType):
        return deployment_from_module(target, default_route="kafka://default")
    path = Path(target)
    if path.suffix == ".toml" or (path.is_dir() and manifest_path(path).is_file()):
        return with_packages(path)  # with its requirements.txt's packages
    return deployment_from_module(target, default_route="kafka://default")


def run(target: LoadedDeployment | ModuleType | str | Path, change: RowChange) -> Outcome:
    """Run one change through a deployment (see ``deployment`` for ``target``)."""
    with Pipeline(deployment(target)) as pipeline:
        return pipeline.process(change)


def run_many(
    target: LoadedDeployment | ModuleType | str | Path, changes: Iterable[RowChange]
) -> list[Outcome]:
    """Run changes through one pipeline, in order."""
    with Pipeline(deployment(target)) as pipeline:
        return list(pipeline.process_many(changes))
