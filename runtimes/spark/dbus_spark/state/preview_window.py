"""The runtime's recent-events window: per table, the newest changes it read.

Each task of a micro-batch keeps, per (source, table), the ``size`` newest changes
its function stage saw (``StageCounts.keep``: a bounded deque of references,
encoded only when the task reports); the driver folds every committed batch's
into this window (``RuntimeMetrics``), which keeps ``size`` per table in the order
they were committed. Previews read it (``dbus_spark.interfaces.preview.service``); nothing
else does, and it is lost with the process: it is a sample of live traffic, not
a record.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any


@dataclass(frozen=True, slots=True)
class Kept:
    """One change in the window: its structured CloudEvent and its commit time."""

    source: str
    table: str
    time: float
    """Epoch seconds the change was committed (0 when its event has no time)."""
    event: dict[str, Any]


def _epoch(text: Any) -> float:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return 0.0


def table_matches(table: str, wanted: Iterable[str]) -> bool:
    """Whether ``table`` (``db.table``) is one of ``wanted``, each a ``db.table`` glob as
    a manifest subscribes by (``shop.*``), or a bare table name or glob (any database)."""
    name = table.rsplit(".", 1)[-1]
    return any(fnmatchcase(table, w) if "." in w else fnmatchcase(name, w) for w in wanted)


def patterns_meet(patterns: Iterable[str], wanted: Iterable[str]) -> bool:
    """Whether some table one of ``patterns`` matches can be one of ``wanted`` (either
    side may be a glob): a deployment subscribed to ``shop.*`` reads ``shop.orders``,
    and one subscribed to ``shop.orders`` is among what ``shop.*`` asks for."""
    wanted = list(wanted)
    return any(table_matches(p, wanted) or table_matches(w, [p]) for p in patterns for w in wanted)


class RecentWindow:
    """Per (source, table), the ``size`` newest changes committed (0: keeps nothing)."""

    def __init__(self, size: int = 0) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._kept: dict[tuple[str, str], deque[str]] = {}
        """Per (source, table), the events as the tasks sent them: read (parsed) only
        when a preview asks, not at every batch."""
        self.seen: dict[str, int] = {}
        """Per table, the changes the window was offered since the runtime started."""

    @property
    def size(self) -> int:
        return self._size

    def resize(self, size: int) -> None:
        with self._lock:
            if size == self._size:
                return
            self._size = size
            self._kept = {key: deque(kept, maxlen=size) for key, kept in self._kept.items()}
            if not size:
                self._kept.clear()

    def add(self, recent: Sequence[Sequence[Any]]) -> None:
        """One batch's kept changes: ``[source, table, [event JSON, ...]]`` per table
        (``StageCounts.to_json``'s ``recent``)."""
        if not self._size:
            return
        for source, table, texts in recent:
            with self._lock:
                kept = self._kept.get((source, table))
                if kept is None:
                    kept = self._kept[(source, table)] = deque(maxlen=self._size)
                self.seen[table] = self.seen.get(table, 0) + len(texts)
                kept.extend(texts[-self._size :])

    def newest(
        self,
        tables: Iterable[str],
        *,
        since: float | None = None,
        limit: int | None = None,
        sources: Sequence[str] = (),
    ) -> list[Kept]:
        """Of ``tables``, the ``limit`` newest changes committed at or after ``since``
        (epoch seconds), oldest first; only those of ``sources`` when given (a
        deployment that reads some sources sees none of the others' changes)."""
        wanted = list(tables)
        with self._lock:
            texts = [
                (source, table, text)
                for (source, table), kept in self._kept.items()
                if table_matches(table, wanted) and (not sources or source in sources)
                for text in kept
            ]
        found = []
        for source, table, text in texts:
            event = json.loads(text)
            moment = _epoch(event.get("time"))
            if since is None or moment >= since:
                found.append(Kept(source, table, moment, event))
        found.sort(key=lambda k: k.time)
        return found[-limit:] if limit else found

    def tables(self) -> dict[str, int]:
        """Per table, how many changes the window holds."""
        with self._lock:
            counts: dict[str, int] = {}
            for (_, table), kept in self._kept.items():
                counts[table] = counts.get(table, 0) + len(kept)
            return counts
