"""How a source's shared read serves each deployment at its own pace: what each item
of the stream is to it (``SharedItems``), whom it leaves out and from where it takes
a deployment back (``admission_of``), who takes most of its time (``SlowWatch``), and
what it reports of them when it ends (``read_events``); see
``dbus_spark.state.progress``."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from dbus_fn.capture import behind, position_to_json
from dbus_fn.events import (
    BinlogPosition,
    ReadItem,
    RowChange,
    SchemaChange,
    TransactionCommit,
    UndecodedRows,
)
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage, StageRecord
from dbus_spark.state.history import Gate
from dbus_spark.state.progress import (
    SLOW_AFTER,
    SLOW_SHARE,
    Admission,
    Behind,
    PaceEvent,
    detached,
    rejoined,
    start_order,
)
from dbus_spark.state.records import document_version


def change_order(item: ReadItem) -> int | None:
    """A binlog item's place in its source, row by row (``document_version``): a row
    change's, or undecoded rows'; None for what writes nothing in order."""
    kind = type(item)
    if kind is RowChange or kind is UndecodedRows:
        assert isinstance(item, RowChange | UndecodedRows)
        return document_version(item.position, item.row_index)
    return None


class SharedItems:
    """What each item of a source's shared read is to it (``__call__``, as
    ``ReadTask.deliver`` takes it): a row change's records through every deployment
    it admits; a commit moves how far it reached, and may leave a slow deployment
    out (``paced``: ``SlowWatch``); a schema change is counted (``count_ddl``: by one
    shard of the read only); rows it could not decode are dead letters."""

    def __init__(
        self,
        source: str,
        stage: FunctionStage,
        counts: StageCounts,
        start: BinlogPosition,
        *,
        admission: Admission,
        paced: bool,
        began: float,
        gate: Gate | None = None,
        count_ddl: bool = True,
    ) -> None:
        self.counts = counts
        self.reached = start
        """The last transaction boundary read."""
        self.behind = False
        """Whether the last commit read was a second or more old when it was read."""
        self.committed_at = 0.0
        """When the last commit read was committed (seconds since the epoch)."""
        self.admission = admission
        self._slow = SlowWatch(source, stage, admission, began) if paced else None
        self._process, self._undecoded = stage.process, stage.undecoded
        self._gate, self._count_ddl = gate, count_ddl

    def __call__(self, item: ReadItem) -> Iterable[StageRecord]:
        kind = type(item)
        if kind is RowChange:
            assert isinstance(item, RowChange)
            return self._process(item, self.counts, self._gate, self.admission or None)
        if kind is TransactionCommit:
            assert isinstance(item, TransactionCommit)
            self.commit(item)
        elif isinstance(item, UndecodedRows):
            return self._undecoded(item, self.counts)
        elif isinstance(item, SchemaChange) and self._count_ddl:
            self.counts.ddl += 1
        return ()

    def commit(self, item: TransactionCommit) -> None:
        self.committed_at = stamp = item.commit_time.timestamp()
        self.behind = behind(stamp)
        self.counts.last_commit[item.source] = stamp
        self.reached = item.position
        if self._slow is not None:
            self.admission = self._slow.check(item, self.counts) or self.admission


class SlowWatch:
    """Leaves out of a shared read a deployment whose functions took more than
    ``SLOW_SHARE`` of its time (``dbus_spark.state.progress``), at a transaction boundary:
    what it was given before is delivered, the rest its own read gives it."""

    def __init__(self, source: str, stage: Any, admission: Admission, began: float) -> None:
        self._source = source
        self._others = len(stage.deployments)
        self._admission = admission
        self._began = began

    def check(self, commit: TransactionCommit, counts: StageCounts) -> Admission | None:
        """The new admission when a deployment was left out at ``commit``, else None."""
        elapsed = time.monotonic() - self._began
        if elapsed < SLOW_AFTER:
            return None
        admission = self._admission
        for name, busy in counts.busy.items():
            served = self._others - len(admission.left_out)
            if busy <= SLOW_SHARE * elapsed or name in admission.left_out or served <= 1:
                continue
            admission = admission.without(name)
            counts.progress.append(detached(
                self._source, name, position_to_json(commit.position),
                f"its functions took {busy:.1f}s of a {elapsed:.1f}s read, holding the "
                "others back", commit.commit_time.timestamp(),
            ))  # fmt: skip
        if admission is self._admission:
            return None
        self._admission = admission
        return admission


def read_events(
    partition: Any, admission: Admission, failed: dict[str, str], counts: StageCounts
) -> list[PaceEvent]:
    """What a shared read found for the deployments: those whose sinks did not take
    what it gave them are detached at their own start; those it took back rejoined."""
    events: list[PaceEvent] = []
    start = {key: partition.start[key] for key in POSITION_KEYS if key in partition.start}
    back = admission.back or {}
    for name, reason in sorted(failed.items()):
        events.append(detached(partition.source, name, back.get(name, start), reason))
    for name in sorted(back):
        if name not in failed and name not in admission.left_out:
            events.append(rejoined(partition.source, name))
    return events


POSITION_KEYS = ("file", "pos", "gtid")


def caught_up_with(behind: Behind, offset: dict[str, Any]) -> bool:
    """Whether a deployment whose own read reached its batch's end has everything up to
    the server's position ``offset`` (then nothing is left to read for it)."""
    return behind.caught_up and not behind.paused and start_order(behind.position) >= (
        start_order(offset)
    )


def admission_of(
    begin: dict[str, Any], behind: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], Admission]:
    """Where a source's shared read starts, and whom it serves from where: not the
    deployments behind, except those whose own read reached its batch's end, which it
    takes back from their own position (the read then starts at the earliest)."""
    left_out = frozenset(d for d, b in behind.items() if b["paused"] or not b["caught_up"])
    back = {d: b["position"] for d, b in behind.items() if d not in left_out}
    if not back:
        return begin, Admission(left_out)
    default = start_order(begin)
    earliest = min(back.values(), key=start_order)
    if start_order(earliest) < default:
        kept = {key: value for key, value in begin.items() if key not in POSITION_KEYS}
        begin = {**kept, **{key: earliest[key] for key in POSITION_KEYS if key in earliest}}
    return begin, Admission(left_out, back, default)


__all__ = [
    "POSITION_KEYS",
    "SharedItems",
    "SlowWatch",
    "admission_of",
    "caught_up_with",
    "read_events",
]
