"""The stable transactional ids of a standalone runtime's Kafka writes: each worker's
sinks hold a write slot, a lock file beside the checkpoint, and write under that
slot's id for as long as they live.

A runtime killed with a Kafka transaction open leaves it open until the broker's
transaction timeout, and a ``read_committed`` consumer sees nothing past it until
then. The runtime that follows claims the same slots, lowest first, so its producers
have the ids of the killed one's: the first ``init_transactions`` of each aborts what
its predecessor left open at once. A slot is held by an open file's lock, which the
kernel drops with the process, however it ends; two live runtimes on one checkpoint
never share a slot.
"""

from __future__ import annotations

import fcntl
import itertools
from typing import IO

from dbus_spark.sinks.kafka_positions import scope_of
from dbus_spark.state.checkpoint import slots_dir


class WriteSlot:
    """One write slot held by this process: its number and its transactional id."""

    def __init__(self, checkpoint: str) -> None:
        folder = slots_dir(checkpoint)
        folder.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = None
        for number in itertools.count():
            held = (folder / f"{number}.lock").open("a")
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                held.close()
                continue
            self.number, self._file = number, held
            break
        # Two runtimes on one Kafka never share ids: their checkpoints differ.
        self.transactional_id = f"dbus/{scope_of(checkpoint, None)}/{self.number}"

    def release(self) -> None:
        """Let another of this runtime's sinks take the slot."""
        if self._file is not None:
            self._file.close()
            self._file = None


__all__ = ["WriteSlot"]
