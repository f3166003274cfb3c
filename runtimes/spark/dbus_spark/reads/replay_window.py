"""Which changes a part of a replay (``dbus fn replay``) gives its deployment, whether
it reads retained binlog or a Kafka source's topics: those committed inside the
replay's window (``since``, ``until``), up to ``REPLAY_ROWS`` a part, each through
that deployment's functions alone (to ``--route`` when given). Where the part's
items come from, and where it stops, is its read's own
(``history_chunks.read_replay_range``, ``kafka_read.read_kafka_replay``)."""

from __future__ import annotations

from collections.abc import Iterable

from dbus_fn.events import RowChange
from dbus_fn.manifest import Destination
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage, StageRecord

REPLAY_ROWS = 20_000
"""Rows a replay reads per micro-batch at most (a binlog replay stops at the next
commit after them, a Kafka replay at the next message)."""


class ReplayWindow:
    """A replay part's window over the changes it reads, and how many it gave
    (``rows``)."""

    def __init__(
        self,
        stage: FunctionStage,
        deployment: str,
        counts: StageCounts,
        *,
        route: str | None,
        since: float | None,
        until: float | None,
    ) -> None:
        self._stage, self._deployment, self._counts = stage, deployment, counts
        self._route = None if route is None else Destination.parse(route)
        self._since, self._until = since, until
        self.rows = 0

    def full(self) -> bool:
        """Whether the part gave as many changes as a part gives."""
        return self.rows >= REPLAY_ROWS

    def past(self, change: RowChange) -> bool:
        """Whether ``change`` was committed after the window."""
        return self._until is not None and change.commit_time.timestamp() > self._until

    def records(self, change: RowChange) -> Iterable[StageRecord]:
        """``change``'s records through the deployment alone, when it was committed
        inside the window (one more row given); else none."""
        if self.past(change):
            return ()
        if self._since is not None and change.commit_time.timestamp() < self._since:
            return ()
        self.rows += 1
        return self._stage.process_only(self._deployment, change, self._counts, self._route)


__all__ = ["REPLAY_ROWS", "ReplayWindow"]
