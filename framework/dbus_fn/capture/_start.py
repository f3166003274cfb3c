"""Where a read starts: ``earliest``, ``latest`` or a position, checked against the server.

A position that is purged, past the end, not at an event, or inside a
transaction raises ``PositionError``: capture never moves to another position on
its own.
"""

from __future__ import annotations

import pymysql

from dbus_fn.capture._gtid_sets import GtidSet, looks_like_set
from dbus_fn.capture._positions import file_sequence, parse_gtid_state
from dbus_fn.capture._reader_view import ReaderView
from dbus_fn.capture._server import error_code
from dbus_fn.errors import ConfigError, PositionError
from dbus_fn.events import BinlogPosition

NO_ROWS_FROM = ("Table_map", "Write_rows", "Update_rows", "Delete_rows", "Xid")
"""Events a transaction cannot start at: a position there is inside one."""


def resolve_start(
    reader: ReaderView, start: str | BinlogPosition, *, fill_gtid: bool = True
) -> BinlogPosition:
    """Turn ``"earliest"``, ``"latest"`` or a position into a checked start position."""
    if isinstance(start, str):
        choice = start.strip().lower()
        if choice == "latest":
            return reader.master_position()
        if choice == "earliest":
            first = reader.binary_logs()[0][0]
            return BinlogPosition(first, 4, reader._gtid_at(first, 4))
        if choice == "snapshot":
            raise PositionError(
                "a snapshot is not a position: read('snapshot') hands out the tables "
                "as they are, then the binlog from the snapshot's position; use "
                "--from earliest or --from latest where a position is needed",
                source=reader.spec.name,
                position="snapshot",
                choices=("earliest", "latest"),
            )
        raise ConfigError(
            f"invalid start {start!r}: expected earliest, latest, snapshot or a position",
            setting="from",
        )
    if not isinstance(start, BinlogPosition):
        raise ConfigError(
            f"invalid start {start!r}: expected earliest, latest or a BinlogPosition",
            setting="from",
        )
    if not start.file:
        return check_gtid_start(reader, start)
    return check_file_start(reader, start, fill_gtid=fill_gtid)


def position_error(reader: ReaderView, position: BinlogPosition, problem: str) -> PositionError:
    return PositionError(
        f"cannot start source {reader.spec.name!r} at {position}: {problem}; "
        "choose explicitly: --from earliest (oldest binlog still on the server), "
        "--from latest (skip to now) or --from snapshot",
        source=reader.spec.name,
        position=str(position),
    )


def check_file_start(
    reader: ReaderView, start: BinlogPosition, *, fill_gtid: bool
) -> BinlogPosition:
    logs = dict(reader.binary_logs())
    if start.file not in logs:
        first = min(logs, key=file_sequence) if logs else None
        if first and file_sequence(start.file) < file_sequence(first):
            raise position_error(reader, start, f"{start.file} was purged (oldest is {first})")
        raise position_error(reader, start, f"the server has no binlog file {start.file}")
    size = logs[start.file]
    if start.pos < 4 or start.pos > size:
        raise position_error(reader,
            start, f"offset {start.pos} is outside {start.file} (size {size})"
        )
    if start.pos < size:
        try:
            rows = reader._query(
                f"SHOW BINLOG EVENTS IN %s FROM {int(start.pos)} LIMIT 1", (start.file,)
            )
        except pymysql.err.MySQLError as exc:
            if error_code(exc) == 1220:
                raise position_error(reader,
                    start, "the offset is not the start of an event"
                ) from None
            raise reader._translate(exc, doing="SHOW BINLOG EVENTS") from None
        if rows and str(rows[0][2]) in NO_ROWS_FROM:
            raise position_error(reader,
                start, f"the offset is inside a transaction (at a {rows[0][2]} event)"
            )
    # A MySQL position always carries its executed set: a read passing it carries it
    # on, and a set that missed what came before would resume by GTID from the start.
    mysql = not reader.server_info().is_mariadb
    if start.gtid is None and (fill_gtid or mysql):
        return BinlogPosition(start.file, start.pos, reader._gtid_at(start.file, start.pos))
    return start


def check_gtid_start(reader: ReaderView, start: BinlogPosition) -> BinlogPosition:
    if not start.gtid:
        raise ConfigError("invalid start: a position needs a file or a GTID", setting="from")
    mysql = not reader.server_info().is_mariadb
    if mysql != looks_like_set(start.gtid):
        server, form = ("MySQL", "a GTID set (uuid:1-100)") if mysql else (
            "MariaDB", "a GTID state (0-1-14)")  # fmt: skip
        raise position_error(reader, start, f"the source is a {server} server; give {form}")
    if mysql:
        return check_gtid_set_start(reader, start)
    wanted = parse_gtid_state(start.gtid)
    first = reader.binary_logs()[0][0]
    oldest = parse_gtid_state(reader._gtid_at(first, 4))
    newest = parse_gtid_state(reader.master_position().gtid)
    for domain, gtid in wanted.items():
        if domain in oldest and gtid.sequence < oldest[domain].sequence:
            raise position_error(reader,
                start,
                f"GTID {gtid} was purged (the oldest binlog starts after {oldest[domain]})",
            )
        if domain not in newest or gtid.sequence > newest[domain].sequence:
            raise position_error(reader, start, f"GTID {gtid} is not in the source's binlog")
    return start


def check_gtid_set_start(reader: ReaderView, start: BinlogPosition) -> BinlogPosition:
    """A MySQL start by GTID set: the server must still have every transaction the set
    lacks (none in ``@@gtid_purged``) and hold every one it has (``@@gtid_executed``)."""
    wanted = GtidSet.parse(start.gtid)
    rows = reader._sql("SELECT @@GLOBAL.gtid_purged, @@GLOBAL.gtid_executed",
                       doing="reading gtid_purged and gtid_executed")  # fmt: skip
    purged, executed = (GtidSet.parse(str(value or "")) for value in rows[0])
    lost = purged.minus(wanted)
    if lost:
        raise position_error(reader, start,
            f"the server purged transactions the set lacks ({lost}; @@gtid_purged is {purged})"
        )  # fmt: skip
    ahead = wanted.minus(executed)
    if ahead:
        raise position_error(reader, start,
            f"transactions {ahead} are not in the source's binlog (@@gtid_executed is {executed})"
        )  # fmt: skip
    return BinlogPosition("", 0, str(wanted))
