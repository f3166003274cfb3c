"""``BinlogReader``: transaction-aligned, resumable binlog capture of one source.

Built on mysql-replication, with three deliberate departures from how it is
usually driven:

* Resuming by file and offset uses the MySQL-style dump request even on MariaDB
  (``is_mariadb=False``): with ``is_mariadb=True`` mysql-replication 1.0.17
  ignores ``log_file``/``log_pos`` and replays the binlog from its first file.
  MariaDB GTID events are still parsed either way.
* Resuming by GTID alone sends a corrected MariaDB dump request: the library's
  declares its length one byte short, so the server misreads it and starts over.
* Reconnecting is ours, not the library's: it reconnects silently, at once and
  forever, from the last event read, which can be mid-transaction. We reconnect
  with backoff from the last committed transaction and skip the items of the
  interrupted transaction already handed out, so a fault causes no loss and no
  duplicate.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pymysql
import pymysql.cursors
from pymysql.constants.COMMAND import COM_BINLOG_DUMP
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from dbus_fn.capture._ddl import ddl_target, is_account_statement, is_transaction_control
from dbus_fn.capture._decode import TableDecoder, compile_table
from dbus_fn.capture._dsn import SourceSpec, database_matches
from dbus_fn.capture._positions import (
    coordinates,
    file_sequence,
    format_gtid_state,
    parse_gtid_state,
)
from dbus_fn.capture._server_id import REPORT_PREFIX, check_server_id, validate_server_id
from dbus_fn.capture._shard import Shard
from dbus_fn.capture._snapshot import SnapshotTable, describe_table, snapshot_rows
from dbus_fn.errors import ConfigError, PositionError, SourceAccessError, SourceError
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    Operation,
    RowChange,
    SchemaChange,
    TransactionCommit,
)

log = logging.getLogger("dbus_fn.capture")

_ROWS_EVENTS = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
_ONLY_EVENTS = [
    *_ROWS_EVENTS,
    TableMapEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    GtidEvent,
    MariadbGtidEvent,
    RotateEvent,
    HeartbeatLogEvent,
]
# Errors that mean the connection went away, not that the request was wrong.
_TRANSIENT_CODES = frozenset({1053, 1927, 2003, 2006, 2013, 2014, 2055, 1040, 1159, 1161})
_ACCESS_CODES = frozenset({1044, 1045, 1142, 1227, 1370, 1698})
_GTID_CLAUSE = re.compile(r"^json_valid\(`((?:[^`]|``)+)`\)$", re.I)
_DDL_WORDS = ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE")
_DML_WORDS = ("INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD")
_NO_ROWS_FROM = ("Table_map", "Write_rows", "Update_rows", "Delete_rows", "Xid")

REPLICATION_GRANT = "REPLICATION SLAVE"
MONITOR_GRANT = "BINLOG MONITOR (MariaDB; REPLICATION CLIENT on MySQL)"


class _StreamLost(Exception):
    """The replication connection dropped; raised instead of the library's reconnect."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What capture needs to know about the source server, read once."""

    server_id: int
    version: str
    is_mariadb: bool
    server_uuid: str | None

    @property
    def identity(self) -> str:
        """The id that names this server in event ids: uuid on MySQL, server_id on MariaDB."""
        return self.server_uuid or str(self.server_id)


@dataclass(frozen=True, slots=True)
class CaptureLag:
    """How far a reader is behind its source.

    ``seconds`` compares the last event's timestamp with now, and is 0 once a
    heartbeat shows nothing newer is waiting; ``bytes`` is the distance from the
    read position to the end of the source's binlog. ``None`` before any read.
    """

    seconds: float | None
    bytes: int | None


class _GtidDumpStream(BinLogStreamReader):  # type: ignore[misc]
    """mysql-replication with a MariaDB GTID dump request of the right length."""

    def _BinLogStreamReader__set_mariadb_settings(self) -> bytes:
        cursor = self._stream_connection.cursor()
        cursor.execute("SET @slave_connect_state = %s", (self.auto_position,))
        cursor.execute("SET @slave_gtid_strict_mode = 1")
        cursor.execute("SET @slave_gtid_ignore_duplicates = 0")
        cursor.close()
        server_id = self._BinLogStreamReader__server_id
        # position 4, flags 0 (blocking), our server_id, empty file name
        body = bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", 4, 0, server_id)
        return struct.pack("<i", len(body)) + body


def _error_code(exc: BaseException) -> int | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if args and isinstance(args[0], int):
        return args[0]
    return None


def _error_text(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2:
        return str(args[1])
    return str(exc) or type(exc).__name__


class BinlogReader:
    """Reads one source's binlog as ``RowChange``/``SchemaChange``/``TransactionCommit``.

    Picklable until used and after ``close()``: connections open lazily inside
    methods and are never pickled. ``server_id`` must be unique among everything
    replicating from the source (see ``server_id_for``).
    """

    def __init__(
        self,
        spec: SourceSpec,
        server_id: int,
        *,
        heartbeat: float = 1.0,
        stall_timeout: float = 10.0,
        max_backoff: float = 10.0,
        reconnect_for: float = 300.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.spec = spec
        self.server_id = validate_server_id(server_id)
        self.heartbeat = heartbeat
        self.stall_timeout = stall_timeout
        self.max_backoff = max_backoff
        self.reconnect_for = reconnect_for
        self.connect_timeout = connect_timeout
        self._init_state()

    def _init_state(self) -> None:
        self._control: Any = None
        self._lock = threading.RLock()
        self._server: ServerInfo | None = None
        self._checked = False
        self._connected_once = False
        self._decoders: dict[bytes, TableDecoder] = {}
        self._json_columns: dict[tuple[str, str], frozenset[str]] = {}
        self._read_file: str | None = None
        self._read_pos = 0
        self._last_event_time: float | None = None
        self._caught_up = False
        self.reconnects = 0
        self.connection_id: int | None = None  # the replication connection's thread id
        self._stream_logged_in = False

    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "server_id": self.server_id,
            "heartbeat": self.heartbeat,
            "stall_timeout": self.stall_timeout,
            "max_backoff": self.max_backoff,
            "reconnect_for": self.reconnect_for,
            "connect_timeout": self.connect_timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        return f"BinlogReader(source={self.spec.name!r}, server_id={self.server_id})"

    # -- control connection -------------------------------------------------

    def _connect(self, **extra: Any) -> Any:
        settings = self.spec.connection.pymysql_kwargs(
            connect_timeout=self.connect_timeout, autocommit=True, **extra
        )
        try:
            connection = pymysql.connect(**settings)
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, doing="connecting") from None
        except OSError as exc:
            raise self._unreachable(exc) from None
        self.spec.connection.remember_tls(connection)
        return connection

    def _unreachable(self, exc: BaseException) -> SourceError:
        return SourceError(
            f"source {self.spec.name!r} at {self.spec.redacted_dsn} is unreachable "
            f"({_error_text(exc)}); check that the server runs and the DSN's host and port",
            source=self.spec.name,
        )

    def _translate(self, exc: BaseException, *, doing: str) -> SourceError:
        code, text = _error_code(exc), _error_text(exc)
        name, dsn = self.spec.name, self.spec.redacted_dsn
        if code in (1045, 1698):
            return SourceAccessError(
                f"source {name!r} ({dsn}) refused the login: {text}; "
                "check the DSN's user and password",
                source=name,
            )
        if code in _ACCESS_CODES:
            grant = (
                MONITOR_GRANT
                if "MONITOR" in text.upper() or "CLIENT" in text.upper()
                else (
                    REPLICATION_GRANT
                    if "REPLICA" in text.upper() or "SLAVE" in text.upper()
                    else f"{REPLICATION_GRANT}, {MONITOR_GRANT}"
                )
            )
            user = self.spec.connection.user
            return SourceAccessError(
                f"source {name!r}: user {user!r} lacks a privilege for {doing} ({text}); "
                f"run on the source: GRANT {grant.split(' (')[0]} ON *.* TO '{user}'@'<host>'",
                source=name,
                grant=grant,
            )
        if code in _TRANSIENT_CODES or code is None:
            return self._unreachable(exc)
        return SourceError(f"source {name!r}: {doing} failed: [{code}] {text}", source=name)

    def _query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self._lock:
            for attempt in (1, 2):
                if self._control is None:
                    self._control = self._connect()
                try:
                    with self._control.cursor() as cursor:
                        cursor.execute(sql, args)
                        return list(cursor.fetchall())
                except pymysql.err.OperationalError as exc:
                    if _error_code(exc) in _TRANSIENT_CODES and attempt == 1:
                        self._close_control()
                        continue
                    raise
                except pymysql.err.InterfaceError:
                    self._close_control()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _sql(self, sql: str, args: Any = None, *, doing: str) -> list[tuple[Any, ...]]:
        try:
            return self._query(sql, args)
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, doing=doing) from None
        except OSError as exc:
            raise self._unreachable(exc) from None

    def _close_control(self) -> None:
        if self._control is not None:
            with contextlib.suppress(Exception):  # closing a dead connection
                self._control.close()
            self._control = None

    # -- the source ---------------------------------------------------------

    def server_info(self) -> ServerInfo:
        """The source server's id and flavour; checks its binlog settings on first use."""
        if self._server is None:
            rows = self._sql(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('server_id', 'version', "
                "'log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata', "
                "'server_uuid')",
                doing="reading the server's settings",
            )
            variables = {str(k).lower(): str(v) for k, v in rows}
            self._check_settings(variables)
            version = variables.get("version", "")
            self._server = ServerInfo(
                server_id=int(variables.get("server_id", "0")),
                version=version,
                is_mariadb="mariadb" in version.lower(),
                server_uuid=variables.get("server_uuid"),
            )
        return self._server

    def _check_settings(self, variables: dict[str, str]) -> None:
        name = self.spec.name
        wanted = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
                  "binlog_row_metadata": "FULL"}  # fmt: skip
        problems = []
        for variable, value in wanted.items():
            actual = variables.get(variable)
            if actual is None and variable == "binlog_row_metadata":
                problems.append(
                    "binlog_row_metadata is missing (needs MariaDB >= 10.5 or MySQL >= 8.0.14, "
                    "which log column names)"
                )
            elif actual is not None and actual.upper() != value:
                problems.append(f"{variable}={actual} (need {value})")
        if problems:
            raise SourceError(
                f"source {name!r} cannot be captured: {'; '.join(problems)}; set "
                + ", ".join(f"{k}={v}" for k, v in wanted.items() if k != "log_bin")
                + " in the server's configuration (and enable log_bin)",
                source=name,
            )

    def master_position(self) -> BinlogPosition:
        """The end of the last committed transaction on the source."""
        info = self.server_info()
        for _ in range(5):
            before = self._gtid_binlog_pos() if info.is_mariadb else None
            rows = self._sql("SHOW MASTER STATUS", doing="SHOW MASTER STATUS")
            if not rows or not rows[0][0]:
                raise SourceError(
                    f"source {self.spec.name!r} has no binary log; enable log_bin on the server",
                    source=self.spec.name,
                )
            row = rows[0]
            file, pos = str(row[0]), int(row[1])
            if not info.is_mariadb:
                gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
                return BinlogPosition(file, pos, gtid)
            # The same GTID state before and after: no commit slipped in between.
            if self._gtid_binlog_pos() == before:
                return BinlogPosition(file, pos, before)
        return BinlogPosition(file, pos, self._gtid_at(file, pos))

    def _gtid_binlog_pos(self) -> str | None:
        rows = self._sql("SELECT @@GLOBAL.gtid_binlog_pos", doing="reading gtid_binlog_pos")
        return str(rows[0][0]) if rows and rows[0][0] else None

    def _gtid_at(self, file: str, pos: int) -> str | None:
        # NULL when the scan of the file meets an event over max_allowed_packet; the
        # position then carries no GTID and resumes by file and offset only.
        rows = self._sql("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos), doing="BINLOG_GTID_POS")
        value = rows[0][0] if rows else None
        return str(value) if value else None

    def binary_logs(self) -> list[tuple[str, int]]:
        """The source's binlog files and their sizes, oldest first."""
        rows = self._sql("SHOW BINARY LOGS", doing="SHOW BINARY LOGS")
        return [(str(r[0]), int(r[1])) for r in rows]

    def resolve_start(
        self, start: str | BinlogPosition, *, fill_gtid: bool = True
    ) -> BinlogPosition:
        """Turn ``"earliest"``, ``"latest"`` or a position into a checked start position.

        A position that is purged, past the end, not at an event, or inside a
        transaction raises ``PositionError``: capture never moves to another
        position on its own.
        """
        if isinstance(start, str):
            choice = start.strip().lower()
            if choice == "latest":
                return self.master_position()
            if choice == "earliest":
                first = self.binary_logs()[0][0]
                gtid = self._gtid_at(first, 4) if self.server_info().is_mariadb else None
                return BinlogPosition(first, 4, gtid)
            if choice == "snapshot":
                raise PositionError(
                    "a snapshot is not a position: read('snapshot') hands out the tables "
                    "as they are, then the binlog from the snapshot's position; use "
                    "--from earliest or --from latest where a position is needed",
                    source=self.spec.name,
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
            return self._check_gtid_start(start)
        return self._check_file_start(start, fill_gtid=fill_gtid)

    def _position_error(self, position: BinlogPosition, problem: str) -> PositionError:
        return PositionError(
            f"cannot start source {self.spec.name!r} at {position}: {problem}; "
            "choose explicitly: --from earliest (oldest binlog still on the server), "
            "--from latest (skip to now) or --from snapshot",
            source=self.spec.name,
            position=str(position),
        )

    def _check_file_start(self, start: BinlogPosition, *, fill_gtid: bool) -> BinlogPosition:
        logs = dict(self.binary_logs())
        if start.file not in logs:
            first = min(logs, key=file_sequence) if logs else None
            if first and file_sequence(start.file) < file_sequence(first):
                raise self._position_error(start, f"{start.file} was purged (oldest is {first})")
            raise self._position_error(start, f"the server has no binlog file {start.file}")
        size = logs[start.file]
        if start.pos < 4 or start.pos > size:
            raise self._position_error(
                start, f"offset {start.pos} is outside {start.file} (size {size})"
            )
        if start.pos < size:
            try:
                rows = self._query(
                    f"SHOW BINLOG EVENTS IN %s FROM {int(start.pos)} LIMIT 1", (start.file,)
                )
            except pymysql.err.MySQLError as exc:
                if _error_code(exc) == 1220:
                    raise self._position_error(
                        start, "the offset is not the start of an event"
                    ) from None
                raise self._translate(exc, doing="SHOW BINLOG EVENTS") from None
            if rows and str(rows[0][2]) in _NO_ROWS_FROM:
                raise self._position_error(
                    start, f"the offset is inside a transaction (at a {rows[0][2]} event)"
                )
        if fill_gtid and start.gtid is None and self.server_info().is_mariadb:
            return BinlogPosition(start.file, start.pos, self._gtid_at(start.file, start.pos))
        return start

    def _check_gtid_start(self, start: BinlogPosition) -> BinlogPosition:
        if not start.gtid:
            raise ConfigError("invalid start: a position needs a file or a GTID", setting="from")
        if not self.server_info().is_mariadb:
            raise ConfigError(
                "resuming by GTID alone is supported on MariaDB only; give a file:pos position",
                setting="from",
            )
        wanted = parse_gtid_state(start.gtid)
        first = self.binary_logs()[0][0]
        oldest = parse_gtid_state(self._gtid_at(first, 4))
        newest = parse_gtid_state(self.master_position().gtid)
        for domain, gtid in wanted.items():
            if domain in oldest and gtid.sequence < oldest[domain].sequence:
                raise self._position_error(
                    start,
                    f"GTID {gtid} was purged (the oldest binlog starts after {oldest[domain]})",
                )
            if domain not in newest or gtid.sequence > newest[domain].sequence:
                raise self._position_error(start, f"GTID {gtid} is not in the source's binlog")
        return start

    def _check_server_id(self) -> None:
        info = self.server_info()
        try:
            rows = self._query("SHOW SLAVE HOSTS")
            replicas = [{"Server_id": r[0], "Host": r[1]} for r in rows if r and len(r) > 1]
        except pymysql.err.MySQLError:
            # Listing replicas needs REPLICATION MASTER ADMIN on MariaDB; without it the
            # source's own id is still refused below.
            replicas = []
        check_server_id(
            self.server_id,
            source=self.spec.name,
            source_server_id=info.server_id,
            replicas=replicas,
            me=self._report_host,
        )

    @property
    def _report_host(self) -> str:
        return f"{REPORT_PREFIX}{self.spec.name}"

    def _json_columns_of(self, database: str, table: str) -> frozenset[str]:
        # MariaDB's JSON is LONGTEXT with a json_valid() check: the binlog cannot tell
        # them apart, the table's constraints can.
        key = (database, table)
        if key not in self._json_columns:
            rows = self._sql(
                "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
                "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s",
                key,
                doing="reading JSON columns",
            )
            names = set()
            for (clause,) in rows:
                match = _GTID_CLAUSE.match(str(clause).strip())
                if match:
                    names.add(match.group(1).replace("``", "`"))
            self._json_columns[key] = frozenset(names)
        return self._json_columns[key]

    # -- lag ----------------------------------------------------------------

    def lag(self) -> CaptureLag:
        """Seconds and bytes behind the source (queries the source for its position)."""
        if self._read_file is None:
            return CaptureLag(None, None)
        seconds: float | None
        if self._caught_up:
            seconds = 0.0
        elif self._last_event_time is not None:
            seconds = max(0.0, time.time() - self._last_event_time)
        else:
            seconds = None
        master = self.master_position()
        return CaptureLag(seconds, self._bytes_between(self._read_file, self._read_pos, master))

    def _bytes_between(self, file: str, pos: int, master: BinlogPosition) -> int:
        if file == master.file:
            return max(0, master.pos - pos)
        total, counting = 0, False
        for name, size in self.binary_logs():
            if name == file:
                counting, total = True, max(0, size - pos)
            elif name == master.file:
                return total + master.pos
            elif counting:
                total += size
        return total

    # -- reading ------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._close_control()

    def read(
        self,
        start: str | BinlogPosition,
        stop: BinlogPosition | None = None,
        idle_timeout: float | None = None,
        shard: Shard | None = None,
    ) -> Iterator[CaptureItem]:
        """Items strictly after ``start`` (a transaction boundary), in commit order.

        With ``shard``, only the rows of that shard (by primary key; see ``Shard``)
        and every schema change and commit.

        Stops after the ``TransactionCommit`` that reaches ``stop``, or once
        ``idle_timeout`` seconds pass without a change to the source's tables
        (commits of other tables still come, to move positions on). Connection faults are
        retried with backoff from the last commit, without loss or duplicates;
        configuration, privilege and position errors are raised at once.
        """
        if isinstance(start, str) and start.strip().lower() == "snapshot":
            snapshot_end: BinlogPosition | None = None
            for item in self.snapshot():
                if shard is None or type(item) is not RowChange or shard.owns(item.key):
                    yield item
                if isinstance(item, TransactionCommit):
                    snapshot_end = item.position
            assert snapshot_end is not None
            if stop is not None and stop.file and coordinates(stop) <= coordinates(snapshot_end):
                return
            start = snapshot_end
        # Checked on every read; the GTID state is not looked up here (BINLOG_GTID_POS
        # scans the file), so positions without one resume by file and offset only.
        begin = self.resolve_start(start, fill_gtid=False)
        if (
            stop is not None
            and begin.file
            and stop.file
            and coordinates(stop) <= coordinates(begin)
        ):
            return
        info = self.server_info()
        if not self._checked:
            self._check_server_id()
            self._checked = True
        committed = begin
        replay_skip = 0  # items of an interrupted transaction already handed out
        backoff = 0.2
        last_item = time.monotonic()
        last_success = time.monotonic()
        while True:
            progress = _Progress(committed, replay_skip)
            try:
                yield from self._session(info, progress, stop, idle_timeout, last_item, shard)
                return
            except _StreamLost as exc:
                failure: BaseException = exc.__cause__ or exc
            except pymysql.err.MySQLError as exc:
                code = _error_code(exc)
                if code == 1236:
                    raise self._dump_refused(progress.committed, _error_text(exc)) from None
                if code in _ACCESS_CODES and self._stream_logged_in:
                    # Logged in, then refused: MariaDB answers the replica registration
                    # of a user without REPLICATION SLAVE with a plain "access denied".
                    raise self._replication_refused(exc) from None
                if code not in _TRANSIENT_CODES:
                    raise self._translate(exc, doing="reading the binlog") from None
                failure = exc
            except (OSError, EOFError, struct.error) as exc:
                failure = exc
            committed, replay_skip = progress.committed, progress.in_transaction
            last_item = max(last_item, progress.last_item)
            if progress.events:
                last_success, backoff = time.monotonic(), 0.2
            if not self._connected_once:
                raise self._unreachable(failure) from None
            if time.monotonic() - last_success > self.reconnect_for:
                raise SourceError(
                    f"source {self.spec.name!r}: no binlog for {self.reconnect_for:.0f}s "
                    f"({_error_text(failure)}); resume from {committed} once the server is back",
                    source=self.spec.name,
                ) from None
            delay = backoff * (0.75 + random.random() / 2)
            if idle_timeout is not None and time.monotonic() + delay - last_item > idle_timeout:
                return
            log.warning(
                "source %s: binlog connection lost (%s); reconnecting in %.1fs from %s",
                self.spec.name,
                _error_text(failure),
                delay,
                committed,
            )
            time.sleep(delay)
            backoff = min(backoff * 2, self.max_backoff)
            self.reconnects += 1

    def snapshot(self) -> Iterator[CaptureItem]:
        """Every row of the captured tables as it is now, then where the binlog goes on.

        The rows are inserts at one position (the snapshot's), in table order; a
        ``TransactionCommit`` at that position ends the snapshot, so a reader that
        resumes from it misses nothing the snapshot did not hold. No table is
        locked: MariaDB's consistent snapshot gives rows and position together.
        """
        info = self.server_info()
        if not info.is_mariadb:
            raise PositionError(
                f"source {self.spec.name!r}: a snapshot start needs MariaDB's consistent "
                "snapshot position, which this server does not give; use --from earliest "
                "or --from latest",
                source=self.spec.name,
                position="snapshot",
                choices=("earliest", "latest"),
            )
        tables = self._snapshot_tables()
        connection = self._connect(cursorclass=pymysql.cursors.SSCursor)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SET SESSION time_zone = '+00:00'")
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                cursor.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                cursor.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                status = {str(k).lower(): str(v) for k, v in cursor.fetchall()}
                cursor.execute("SELECT UTC_TIMESTAMP(6)")
                (now,) = cursor.fetchall()[0]
            file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            position = BinlogPosition(file, pos, self._gtid_at(file, pos))
            taken = now.replace(tzinfo=UTC)
            log.info("source %s: snapshot of %d table(s) at %s", self.spec.name, len(tables),
                     position)  # fmt: skip
            count = 0
            for table in tables:
                columns = ", ".join(f"`{c.replace('`', '``')}`" for c in table.columns)
                quoted = ".".join(f"`{n.replace('`', '``')}`" for n in (table.database,
                                                                         table.table))  # fmt: skip
                with connection.cursor() as cursor:
                    cursor.execute(f"SELECT {columns} FROM {quoted}")
                    for change in snapshot_rows(
                        table, iter(cursor), source=self.spec.name, position=position,
                        commit_time=taken, server_id=info.identity, first_index=count,
                    ):  # fmt: skip
                        count += 1
                        yield change
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, doing="taking a snapshot") from None
        finally:
            connection.close()
        yield TransactionCommit(
            source=self.spec.name,
            position=position,
            commit_time=taken,
            server_id=info.identity,
            rows=count,
        )

    def _snapshot_tables(self) -> list[SnapshotTable]:
        rows = self._sql(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN "
            "('mysql', 'information_schema', 'performance_schema', 'sys') "
            "ORDER BY TABLE_SCHEMA, TABLE_NAME",
            doing="listing tables for a snapshot",
        )
        tables = []
        for database, table in rows:
            database, table = str(database), str(table)
            if not self.spec.matches(database, table):
                continue
            columns = self._sql(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (database, table),
                doing="reading columns for a snapshot",
            )
            key = self._sql(
                "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
                (database, table),
                doing="reading the primary key for a snapshot",
            )
            tables.append(
                describe_table(
                    database,
                    table,
                    [(str(name), str(kind)) for name, kind in columns],
                    [str(name) for (name,) in key],
                    self._json_columns_of(database, table),
                )
            )
        return tables

    def _replication_refused(self, exc: BaseException) -> SourceAccessError:
        user = self.spec.connection.user
        return SourceAccessError(
            f"source {self.spec.name!r}: user {user!r} may not read the binlog "
            f"({_error_text(exc)}); run on the source: "
            f"GRANT {REPLICATION_GRANT} ON *.* TO '{user}'@'<host>'",
            source=self.spec.name,
            grant=REPLICATION_GRANT,
        )

    def _dump_refused(self, position: BinlogPosition, text: str) -> SourceError:
        if "max_allowed_packet" in text:
            return SourceError(
                f"source {self.spec.name!r}: an event is larger than max_allowed_packet ({text}); "
                "raise max_allowed_packet on the server (e.g. 1G)",
                source=self.spec.name,
            )
        return self._position_error(position, f"the server refused it ({text})")

    def _open_stream(self, resume: BinlogPosition, heartbeat: float) -> Any:
        made: list[bool] = []

        def connect(**settings: Any) -> Any:
            if "db" in settings:  # the library's ctl connection; PyMySQL deprecates `db`
                settings["database"] = settings.pop("db")
            else:  # the stream: a second one is the library reconnecting on its own
                if made:
                    raise _StreamLost("connection lost")
                made.append(True)
                self._stream_logged_in = False
                connection = pymysql.connect(**settings)
                self._stream_logged_in = True
                return connection
            return pymysql.connect(**settings)

        settings = self.spec.connection.pymysql_kwargs(
            connect_timeout=self.connect_timeout, read_timeout=self.stall_timeout
        )
        common: dict[str, Any] = {
            "connection_settings": settings,
            "server_id": self.server_id,
            "blocking": True,
            "only_events": _ONLY_EVENTS,
            "slave_heartbeat": heartbeat,
            "report_slave": (self._report_host, "", "", 0),
            "pymysql_wrapper": connect,
            "enable_logging": False,
        }
        if resume.file:
            return BinLogStreamReader(
                resume_stream=True,
                log_file=resume.file,
                log_pos=resume.pos,
                is_mariadb=False,
                **common,
            )
        return _GtidDumpStream(is_mariadb=True, auto_position=resume.gtid, **common)

    def _session(
        self,
        info: ServerInfo,
        progress: _Progress,
        stop: BinlogPosition | None,
        idle_timeout: float | None,
        last_item: float,
        shard: Shard | None = None,
    ) -> Iterator[CaptureItem]:
        """One replication connection: yields items until stop, idle or a fault."""
        owns = shard.owns if shard is not None and shard.count > 1 else None
        heartbeat = self.heartbeat
        if idle_timeout is not None:
            heartbeat = max(0.05, min(heartbeat, idle_timeout / 4))
        resume = progress.committed
        stream = self._open_stream(resume, heartbeat)
        source, server = self.spec.name, info.identity
        stop_at = coordinates(stop) if stop is not None and stop.file else None
        gtid_state = parse_gtid_state(resume.gtid) if info.is_mariadb else {}
        tables: dict[int, TableDecoder | None] = {}
        file = resume.file
        txn_gtid: str | None = None
        txn_time = datetime.now(UTC)
        txn_start = resume.pos
        txn_rows = 0
        explicit = False
        produced = 0  # items of the current transaction, counting skipped ones
        skip = progress.in_transaction
        last_item = max(last_item, progress.last_item)
        now = time.monotonic
        failed = False
        try:
            while True:
                try:
                    event = stream.fetchone()
                except pymysql.err.OperationalError as exc:
                    if _error_code(exc) in _TRANSIENT_CODES:
                        raise _StreamLost(str(exc)) from exc
                    raise
                except pymysql.err.InterfaceError as exc:  # the socket is already gone
                    raise _StreamLost(str(exc)) from exc
                if event is None:
                    raise _StreamLost("the server ended the binlog stream")
                if not progress.events:
                    self._connected_once = True
                    self.connection_id = stream._stream_connection.thread_id()
                progress.events += 1
                kind = type(event)
                packet = event.packet
                end = packet.log_pos
                if kind is HeartbeatLogEvent:
                    self._caught_up = True
                    if idle_timeout is not None and now() - last_item >= idle_timeout:
                        return
                    # `stop` may be where no transaction ends (a fresh binlog file after
                    # a rotation): the server's heartbeat says it has nothing more.
                    at = (file_sequence(event.ident or file)[1], end)
                    if stop_at is not None and txn_gtid is None and not explicit and at >= stop_at:
                        return
                    continue
                if kind is RotateEvent:
                    file = event.next_binlog
                    if event.timestamp:
                        tables.clear()
                    self._read_file, self._read_pos = file, event.position
                    continue
                self._caught_up = False
                self._read_file, self._read_pos = file, end
                self._last_event_time = event.timestamp
                if kind is TableMapEvent:
                    tables[event.table_id] = self._decoder_for(event, info)
                    continue
                if kind in _ROWS_EVENTS:
                    decoder = tables.get(event.table_id)
                    if decoder is None:
                        continue
                    data = packet.read(event.event_size - packet.read_bytes)
                    position = BinlogPosition(file, end - packet.event_size, txn_gtid)
                    after_bits = None
                    if kind is WriteRowsEvent:
                        op = Operation.INSERT
                    elif kind is DeleteRowsEvent:
                        op = Operation.DELETE
                    else:
                        op = Operation.UPDATE
                        after_bits = event.columns_present_bitmap2
                    txn_id = txn_gtid or f"{file}:{txn_start}"
                    index = 0
                    for image, after in decoder.images(
                        data, event.columns_present_bitmap, after_bits, owns
                    ):
                        produced += 1
                        txn_rows += 1
                        if produced <= skip or image is None:  # replayed, or another shard's
                            index += 1
                            continue
                        if op is Operation.INSERT:
                            before, after = None, image
                        elif op is Operation.DELETE:
                            before = image
                        else:
                            before = image
                        yield RowChange(
                            source,
                            decoder.database,
                            decoder.table,
                            op,
                            before,
                            after,
                            decoder.primary_key,
                            position,
                            txn_time,
                            server,
                            index,
                            txn_id,
                            decoder.column_types,
                            decoder.schema_version,
                        )
                        index += 1
                        progress.in_transaction = produced
                        last_item = progress.last_item = now()
                    continue
                if kind is MariadbGtidEvent or kind is GtidEvent:
                    txn_gtid = event.gtid
                    txn_time = datetime.fromtimestamp(event.timestamp, UTC)
                    txn_start = end - packet.event_size
                    txn_rows = produced = 0
                    explicit = False
                    if stop_at is not None and (file_sequence(file)[1], txn_start) >= stop_at:
                        return  # a start by GTID alone can be at or past `stop`
                    continue
                commit = kind is XidEvent or kind is XAPrepareEvent
                if kind is QueryEvent:
                    statement = event.query
                    control = is_transaction_control(statement)
                    if control == "begin":
                        explicit = True
                        continue
                    if control == "commit":
                        commit = True
                    else:
                        change = self._schema_change(
                            event, statement, file, end, txn_gtid, txn_time, server
                        )
                        if change is not None:
                            produced += 1
                            if produced > skip:
                                yield change
                                progress.in_transaction = produced
                                last_item = progress.last_item = now()
                        commit = not explicit
                if not commit:
                    continue
                if txn_gtid is not None and info.is_mariadb:
                    domain = int(txn_gtid.split("-", 1)[0])
                    gtid = parse_gtid_state(txn_gtid)[domain]
                    gtid_state[domain] = gtid
                state = format_gtid_state(gtid_state) if info.is_mariadb else txn_gtid
                position = BinlogPosition(file, end, state)
                yield TransactionCommit(
                    source,
                    position,
                    txn_time,
                    server,
                    txn_gtid or f"{file}:{txn_start}",
                    txn_rows,
                )
                progress.committed = position
                progress.in_transaction = 0
                rows_in_commit = txn_rows or produced
                skip = produced = txn_rows = 0
                explicit = False
                txn_gtid = None
                txn_start = end
                if rows_in_commit:  # commits of other tables are not activity
                    last_item = progress.last_item = now()
                if stop_at is not None and coordinates(position) >= stop_at:
                    return
        except BaseException as exc:
            # A stalled or broken connection must not be touched again; a reader
            # that simply stopped consuming (GeneratorExit) ended cleanly.
            failed = not isinstance(exc, GeneratorExit)
            raise
        finally:
            stream.close()
            if not failed and stop is not None:
                self._end_dump_thread()

    def _end_dump_thread(self) -> None:
        """End the server's side of the replication connection just closed.

        The server notices a closed replica only at its next event or heartbeat;
        until then, the next read with the same server_id waits ~100 ms for the
        server to kill the leftover dump thread. Ending it here makes each
        micro-batch's read start at once.
        """
        thread = self.connection_id
        if thread is None:
            return
        with contextlib.suppress(pymysql.err.MySQLError, OSError, SourceError):
            self._sql(f"KILL CONNECTION {int(thread)}", doing="ending the binlog dump")

    def _decoder_for(self, event: Any, info: ServerInfo) -> TableDecoder | None:
        database, table = event.schema, event.table
        if not self.spec.matches(database, table):
            return None
        raw = event.packet.packet._data
        key = bytes(raw[20 : 20 + event.event_size])
        decoder = self._decoders.get(key)
        if decoder is None:
            json_columns: frozenset[str] = frozenset()
            if info.is_mariadb and any(
                c.type == 252 and getattr(c, "length_size", 0) == 4 for c in event.columns
            ):
                json_columns = self._json_columns_of(database, table)
            metadata = event.optional_metadata
            key_indexes = list(metadata.simple_primary_key_list or [])
            key_indexes += [
                i for i in (metadata.primary_keys_with_prefix or {}) if i not in key_indexes
            ]
            decoder = compile_table(database, table, event.columns, key_indexes, json_columns)
            if len(self._decoders) > 4096:
                self._decoders.clear()
            self._decoders[key] = decoder
        return decoder

    def _schema_change(
        self,
        event: Any,
        statement: str,
        file: str,
        end: int,
        gtid: str | None,
        when: datetime,
        server: str,
    ) -> SchemaChange | None:
        head = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
        default = (
            event.schema.decode(errors="replace")
            if isinstance(event.schema, bytes)
            else str(event.schema)
        )
        if is_account_statement(statement):
            return None  # users and roles are not schema, and their statements hold hashes
        if head not in _DDL_WORDS:
            if head in _DML_WORDS and database_matches(self.spec.tables, default):
                log.warning(
                    "source %s: a statement-logged change at %s:%s is not captured "
                    "(every session must write binlog_format=ROW): %.80s",
                    self.spec.name, file, end, statement,
                )  # fmt: skip
            return None
        database, table = ddl_target(statement, default)
        # Decoders are keyed by the table map, which changes with the table; JSON
        # column lookups are by name and must be redone.
        self._json_columns = {
            k: v
            for k, v in self._json_columns.items()
            if k[0] != database or table not in (None, k[1])
        }
        if table is not None:
            if not self.spec.matches(database, table) and not _renames_into(self.spec, statement):
                return None
        elif not database_matches(self.spec.tables, database):
            return None
        return SchemaChange(
            self.spec.name,
            database,
            table,
            statement,
            BinlogPosition(file, end, gtid),
            when,
            server,
        )


def _renames_into(spec: SourceSpec, statement: str) -> bool:
    """Whether a RENAME/ALTER ... RENAME names a captured table anywhere (copy-and-swap)."""
    names = re.findall(r"(`(?:[^`]|``)+`|[\w$]+)\s*\.\s*(`(?:[^`]|``)+`|[\w$]+)", statement)
    return any(spec.matches(d.strip("`"), t.strip("`")) for d, t in names)


@dataclass(slots=True)
class _Progress:
    """What a session got to, so a reconnect resumes exactly there."""

    committed: BinlogPosition
    in_transaction: int
    last_item: float = 0.0
    events: int = 0
