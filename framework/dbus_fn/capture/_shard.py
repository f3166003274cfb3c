"""Splitting one source's rows into disjoint shards by primary key."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dbus_fn.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Shard:
    """Part ``index`` of ``count`` disjoint parts of a source's rows, split by key.

    The readers of all shards of one binlog range read the same events; each
    yields only the rows whose primary key hashes to its index, and every
    schema change and commit. Together they yield each row exactly once, and
    all changes of one key come from one shard in commit order, so per-key order
    holds without merging. Decoding is what costs (see ``BinlogReader``), so one
    busy binlog read as ``count`` shards uses ``count`` cores.

    The hash is of the key values' ``repr``: the same in every process (unlike
    ``hash()`` of a ``str``), and equal for equal keys as capture decodes them.
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 1):
            raise ConfigError(
                f"invalid shard count {self.count!r}: expected an integer of at least 1",
                setting="shards",
            )
        if not (isinstance(self.index, int) and 0 <= self.index < self.count):
            raise ConfigError(
                f"invalid shard {self.index!r} of {self.count}: expected 0 to {self.count - 1}",
                setting="shards",
            )

    def owns(self, key: Sequence[Any]) -> bool:
        """Whether the row with these primary-key values belongs to this shard."""
        if self.count == 1:
            return True
        return zlib.crc32(repr(tuple(key)).encode()) % self.count == self.index
