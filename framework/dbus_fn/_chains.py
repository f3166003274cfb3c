"""A deployment's functions for one (database, table, operation), resolved once:
the chain ``Pipeline`` calls, its steps and the counts it keeps per step."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dbus_fn.decorators import FunctionInfo
from dbus_fn.outcomes import Latency


class Step(NamedTuple):
    """One function of a chain, ready to call."""

    function: Any
    takes_context: bool
    info: FunctionInfo
    slot: int
    """Where the step stands in its chain: its slot in the chain's counts."""
    latency: Latency
    """The function's call times (shared by every chain it is in)."""


class Chain:
    """The functions that apply to one (database, table, operation), with counts."""

    __slots__ = (
        "dead",
        "entered",
        "filtered",
        "filters",
        "projections",
        "routes",
        "steps",
        "timeouts",
    )

    def __init__(
        self,
        filters: tuple[FunctionInfo, ...],
        projections: tuple[FunctionInfo, ...],
        routes: tuple[FunctionInfo, ...],
        latency: Mapping[str, Latency],
    ) -> None:
        infos = (*filters, *projections, *routes)
        steps = [
            Step(info.function, info.takes_context, info, index, latency[info.name])
            for index, info in enumerate(infos)
        ]
        self.steps: tuple[FunctionInfo, ...] = infos
        self.filters: tuple[Step, ...] = tuple(steps[: len(filters)])
        self.projections: tuple[Step, ...] = tuple(
            steps[len(filters) : len(filters) + len(projections)]
        )
        self.routes: tuple[Step, ...] = tuple(steps[len(filters) + len(projections) :])
        self.entered = 0
        # Per step; the extra last slot counts events dead-lettered by the
        # deployment itself (no route and no default route).
        self.filtered = [0] * len(infos)
        self.dead = [0] * (len(infos) + 1)
        self.timeouts = [0] * len(infos)


class TableChains:
    """A table's chains, one per operation (None: the deployment does not take it)."""

    __slots__ = ("delete", "insert", "snapshot", "update")

    def __init__(
        self,
        insert: Chain | None,
        update: Chain | None,
        delete: Chain | None,
        snapshot: Chain | None = None,
    ) -> None:
        self.insert = insert
        self.update = update
        self.delete = delete
        self.snapshot = snapshot
