"""The pytest plugin dbus registers (entry point ``pytest11``): fixtures for authors.

A test next to a ``dbus.toml`` runs its deployment in one line::

    from dbus_fn.testing import insert

    def test_paid_orders_go_to_their_topic(dbus_run):
        outcome = dbus_run(insert("shop.orders", id=1, status="paid"))
        assert outcome.destinations == ["kafka://orders.paid"]

Fixtures: ``dbus_deployment`` (the deployment of the nearest ``dbus.toml`` at or
above the test file; override it in a ``conftest.py`` to test something else),
``dbus_pipeline`` (a ``Pipeline`` over it) and ``dbus_run`` (its ``process``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dbus_fn.events import RowChange
from dbus_fn.manifest import MANIFEST_FILE
from dbus_fn.pipeline import Outcome, Pipeline
from dbus_fn.registry import LoadedDeployment, with_packages


def nearest_manifest(start: Path) -> Path | None:
    """The folder of the nearest ``dbus.toml`` at or above ``start``."""
    for folder in (start, *start.parents):
        if (folder / MANIFEST_FILE).is_file():
            return folder
    return None


@pytest.fixture
def dbus_deployment(request: pytest.FixtureRequest) -> LoadedDeployment:
    """The deployment of the nearest ``dbus.toml`` at or above the test file."""
    start = Path(request.path).parent
    folder = nearest_manifest(start)
    if folder is None:
        pytest.fail(
            f"no {MANIFEST_FILE} at or above {start}; expected the test next to its "
            "deployment (see `dbus fn init`), or a dbus_deployment fixture of your own",
            pytrace=False,
        )
    return with_packages(folder)  # with its requirements.txt's packages, as the runtime


@pytest.fixture
def dbus_pipeline(dbus_deployment: LoadedDeployment) -> Iterator[Pipeline]:
    """A pipeline over ``dbus_deployment``, closed after the test."""
    with Pipeline(dbus_deployment) as pipeline:
        yield pipeline


@pytest.fixture
def dbus_run(dbus_pipeline: Pipeline) -> Callable[[RowChange], Outcome]:
    """Run one row change through the deployment: ``dbus_run(insert(...)) -> Outcome``."""
    return dbus_pipeline.process
