"""A failover under load: how long capture pauses, and what it delivers around it.

Starts a private MariaDB primary and replica (``tests/failover_support.py``: their
own home and free ports, nothing shared with the local services), reads the
primary's ``shop.orders`` through a ``BinlogReader`` of both servers, and commits
one-row transactions at ``--rate`` for ``--seconds`` on each side of the failover.
The failover is what a failover tool does: between two commits, once the replica
has every commit, the primary is killed with SIGKILL; the replica applies its relay
log, is promoted, and the writes go on there.

Prints, for the rows committed before and after the kill: COMMIT→read latency p50
and p99, and rows read against rows committed (duplicates and missing rows
counted); then the pause: from the kill to the reader's move to the replica (its
warning line), and from the promotion to the first row written after it being read.

    .venv/bin/python tests/bench/bench_failover.py [--rate 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from failover_support import TABLE, Pair, private_pair
from measures import percentile

from dbus_fn.capture import BinlogReader, SourceSpec, parse_position, replica_id_for
from dbus_fn.events import RowChange

IDLE = 5.0
"""Seconds without a change after which the reader ends (longer than the failover)."""


class Moves(logging.Handler):
    """When capture said it moved to another server."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "instead of" in record.getMessage():
            self.at.append(time.monotonic())


def read(pair: Pair, start: str, seen: dict[int, list[float]]) -> None:
    """Every row the reader hands out, with when; it ends 5 s after the last change."""
    spec = SourceSpec("bench", pair.endpoints.failover_dsn, (TABLE,))
    reader = BinlogReader(spec, replica_id_for(f"bench/{uuid.uuid4()}"), heartbeat=0.2)
    for item in reader.read(parse_position(start), idle_timeout=IDLE):
        if isinstance(item, RowChange):
            seen.setdefault(int(item.row["id"]), []).append(time.monotonic())
    reader.close()


def write(connection: Any, first: int, seconds: float, rate: float, at: dict[int, float]) -> int:
    """Commit one row a transaction at ``rate`` for ``seconds``; the next id."""
    next_id, began = first, time.monotonic()
    with connection.cursor() as cursor:
        while time.monotonic() - began < seconds:
            cursor.execute("INSERT INTO shop.orders VALUES (%s, 'bench')", (next_id,))
            at[next_id] = time.monotonic()
            next_id += 1
            pause = began + (next_id - first) / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    return next_id


def report(
    label: str, ids: range, committed: dict[int, float], seen: dict[int, list[float]]
) -> None:
    latencies = sorted((seen[i][0] - committed[i]) * 1000 for i in ids if i in seen)
    missing = sum(1 for i in ids if i not in seen)
    extra = sum(len(seen[i]) - 1 for i in ids if i in seen)
    print(
        f"{label}: {len(ids)} rows committed, {len(ids) - missing} read "
        f"({missing} missing, {extra} read twice); COMMIT->read p50 "
        f"{percentile(latencies, 0.5):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0, help="commits a second")
    parser.add_argument("--seconds", type=float, default=10.0, help="load on each side")
    args = parser.parse_args()
    moves = Moves()
    logging.getLogger("dbus_fn.capture").addHandler(moves)
    with tempfile.TemporaryDirectory() as folder, private_pair(Path(folder)) as pair:
        start = pair.gtid(pair.primary())
        seen: dict[int, list[float]] = {}
        committed: dict[int, float] = {}
        reader = threading.Thread(target=read, args=(pair, start, seen))
        reader.start()
        time.sleep(1.0)  # the reader connected
        with pair.primary() as connection:
            middle = write(connection, 1, args.seconds, args.rate, committed)
        pair.caught_up()
        killed = time.monotonic()
        pair.kill_primary()
        pair.promote_replica()
        promoted = time.monotonic()
        with pair.replica() as connection:
            end = write(connection, middle, args.seconds, args.rate, committed)
        reader.join(60)
    print(f"failover bench: {args.rate:.0f} one-row commits/s, {args.seconds:.0f} s each side")
    report("before the kill", range(1, middle), committed, seen)
    report("after the promotion", range(middle, end), committed, seen)
    moved = f"{(moves.at[0] - killed) * 1000:.0f} ms" if moves.at else "never"
    first = seen.get(middle, [float("nan")])[0]
    print(f"the reader moved to the replica {moved} after the kill")
    print(
        f"promotion took {(promoted - killed) * 1000:.0f} ms after the kill; the first row "
        f"written after it was read {(first - committed[middle]) * 1000:.1f} ms after its commit"
    )


if __name__ == "__main__":
    main()
