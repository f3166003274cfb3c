"""How far a committed position is behind its source: bytes of binlog still to read.

Used by ``dbus cluster status --lag`` on a machine that can resolve the
sources' DSNs (the variable or file each source names); it needs the capture
extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dbus_fn.coordination._sources import SourceReference
from dbus_fn.events import BinlogPosition


def bytes_behind(
    logs: Sequence[tuple[str, int]], position: BinlogPosition, end: BinlogPosition
) -> int | None:
    """Bytes from ``position`` to ``end`` over the binlog files ``logs`` (name, size);
    None when ``position`` names no file or one the server no longer has."""
    if not position.file:
        return None
    if position.file == end.file:
        return max(0, end.pos - position.pos)
    names = [name for name, _ in logs]
    if position.file not in names or end.file not in names:
        return None
    total = 0
    for name, size in logs[names.index(position.file) : names.index(end.file)]:
        total += max(0, size - (position.pos if name == position.file else 0))
    return total + end.pos


def binlog_lag(
    source: SourceReference, position: BinlogPosition, env: Mapping[str, str] | None = None
) -> int | None:
    """Bytes of ``source``'s binlog after ``position``, asked of the source itself."""
    from dbus_fn.capture import BinlogReader, replica_id_for

    # Only SQL queries: the server id is never used for a replication connection.
    reader = BinlogReader(source.spec(env), replica_id_for(f"{source.name}/status"))
    try:
        end = reader.master_position()
        logs = reader.binary_logs()
    finally:
        reader.close()
    return bytes_behind(logs, position, end)
