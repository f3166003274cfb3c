"""``BinlogReader``: transaction-aligned, resumable binlog capture of one source.

Built on mysql-replication, with three deliberate departures from how it is
usually driven:

* Resuming by file and offset uses the MySQL-style dump request even on MariaDB
  (``is_mariadb=False``): with ``is_mariadb=True`` mysql-replication 1.0.17
  ignores ``log_file``/``log_pos`` and replays the binlog from its first file.
  MariaDB GTID events are still parsed either way.
* Resuming by GTID alone sends dbus's own dump request: on MariaDB the library's
  declares its length one byte short, so the server misreads it and starts over;
  on MySQL it cannot send a set with tagged GTIDs (``_gtid_sets``).
* Reconnecting is ours, not the library's: it reconnects silently, at once and
  forever, from the last event read, which can be mid-transaction. We reconnect
  with backoff from the last committed transaction and skip the items of the
  interrupted transaction already handed out, so a fault causes no loss and no
  duplicate.

This module owns the reader's control connection and the reconnect loop; one
replication connection's read loop is ``_session``, start positions ``_start``,
the snapshot start ``_snapshot``, and what is known of the server ``_server``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pymysql.cursors

from dbus_fn.capture._declared_types import declared_type
from dbus_fn.capture._decode import TableDecoder
from dbus_fn.capture._dsn import ConnectionSettings, SourceSpec
from dbus_fn.capture._events import StreamLost
from dbus_fn.capture._failover import (
    NoServerReady,
    by_gtid,
    failover_error,
    follow,
    follow_start,
    neutral_end,
)
from dbus_fn.capture._gtid_sets import GtidSet
from dbus_fn.capture._positions import coordinates, neutral_boundary
from dbus_fn.capture._replica_id import REPORT_PREFIX, check_replica_id, validate_replica_id
from dbus_fn.capture._server import (
    ACCESS_CODES,
    REPLICATION_GRANT,
    SETTINGS_QUERY,
    TRANSIENT_CODES,
    CaptureLag,
    ServerInfo,
    check_settings,
    error_code,
    error_text,
    translate_error,
    unreachable_error,
)
from dbus_fn.capture._session import Progress, ReadSession
from dbus_fn.capture._shard import Shard
from dbus_fn.capture._snapshot import read_snapshot
from dbus_fn.capture._start import position_error, resolve_start
from dbus_fn.errors import SourceAccessError, SourceError, SourceUnreachableError
from dbus_fn.events import (
    BinlogPosition,
    CaptureItem,
    ReadItem,
    RowChange,
    TransactionCommit,
)

log = logging.getLogger("dbus_fn.capture")

LOG_STATUS_REFUSED = frozenset({1142, 1146, 1227})
"""``performance_schema.log_status`` refused: no SELECT on it, no such table, or no
``BACKUP_ADMIN``."""
GTID_SCAN_PAGE = 5000
"""Events asked of ``SHOW BINLOG EVENTS`` at a time while finding a MySQL position's set."""
_JSON_VALID_CHECK = re.compile(r"^json_valid\(`((?:[^`]|``)+)`\)$", re.I)


class BinlogReader:
    """Reads one source's binlog as ``RowChange``/``SchemaChange``/``TransactionCommit``.

    Picklable until used and after ``close()``: connections open lazily inside
    methods and are never pickled. ``replica_id`` (the server_id it registers
    with) must be unique among everything replicating from the source (see
    ``replica_id_for``).
    """

    def __init__(
        self,
        spec: SourceSpec,
        replica_id: int,
        *,
        heartbeat: float = 1.0,
        stall_timeout: float = 10.0,
        max_backoff: float = 10.0,
        reconnect_for: float = 300.0,
        connect_timeout: float = 5.0,
        query_timeout: float = 30.0,
    ) -> None:
        self.spec = spec
        self.replica_id = validate_replica_id(replica_id)
        self.heartbeat = heartbeat
        self.stall_timeout = stall_timeout
        self.max_backoff = max_backoff
        self.reconnect_for = reconnect_for
        self.connect_timeout = connect_timeout
        self.query_timeout = query_timeout
        """The longest the control connection waits on the server for one question:
        a server that hangs (stopped, or a network that drops everything) is then
        unreachable, as one that refuses, rather than holding its asker forever."""
        self._init_state()

    def _init_state(self) -> None:
        self._control: Any = None
        self._lock = threading.RLock()
        self._server: ServerInfo | None = None
        self._log_status_denied = False
        self._checked = False
        self._connected_once = False
        self._decoders: dict[bytes, TableDecoder] = {}
        self._json_columns: dict[tuple[str, str], frozenset[str]] = {}
        self._declared: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
        self._read_file: str | None = None
        self._read_pos = 0
        self._last_event_time: float | None = None
        self._caught_up = False
        self._idle_at: tuple[int, int] = (0, 0)
        """Where the server's last heartbeat said its binlog ends (``idle_at``)."""
        self.reconnects = 0
        self.connection_id: int | None = None  # the replication connection's thread id
        self._stream_logged_in = False
        self.server_index = 0  # which of the source's servers it reads (``_failover``)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "replica_id": self.replica_id,
            "heartbeat": self.heartbeat,
            "stall_timeout": self.stall_timeout,
            "max_backoff": self.max_backoff,
            "reconnect_for": self.reconnect_for,
            "connect_timeout": self.connect_timeout,
            "query_timeout": self.query_timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def __repr__(self) -> str:
        return f"BinlogReader(source={self.spec.name!r}, replica_id={self.replica_id})"

    # -- control connection -------------------------------------------------

    @property
    def connection(self) -> ConnectionSettings:
        """The server this reader reads: the DSN's first, or where a failover moved it."""
        return self.spec.servers[self.server_index]

    def use_server(self, index: int) -> None:
        """Read server ``index`` of the source from now on (``_failover.follow``)."""
        self._close_control()
        self.server_index = index
        self._server = None
        self._log_status_denied = False
        self._checked = False
        self._decoders.clear()  # table ids name table maps of one server's binlog
        self._read_file, self._read_pos = None, 0

    def _connect(self, **extra: Any) -> Any:
        settings = self.connection.pymysql_kwargs(
            connect_timeout=self.connect_timeout, autocommit=True, **extra
        )
        try:
            connection = pymysql.connect(**settings)
        except pymysql.err.MySQLError as exc:
            raise self._translate(exc, doing="connecting") from None
        except OSError as exc:
            raise self._unreachable(exc) from None
        self.connection.remember_tls(connection)
        return connection

    def _unreachable(self, exc: BaseException) -> SourceUnreachableError:
        return unreachable_error(self.spec.name, self.connection, exc)

    def _translate(self, exc: BaseException, *, doing: str) -> SourceError:
        return translate_error(self.spec.name, self.connection, exc, doing=doing)

    def _query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self._lock:
            for attempt in (1, 2):
                if self._control is None:
                    self._control = self._connect(
                        read_timeout=self.query_timeout, write_timeout=self.query_timeout
                    )
                began = time.monotonic()
                try:
                    with self._control.cursor() as cursor:
                        cursor.execute(sql, args)
                        return list(cursor.fetchall())
                except pymysql.err.OperationalError as exc:
                    # A connection lost at once (a restarted server) is asked again; one
                    # that waited out the query timeout met a server that hangs.
                    waited = time.monotonic() - began >= self.query_timeout
                    if error_code(exc) in TRANSIENT_CODES and attempt == 1 and not waited:
                        self._close_control()
                        continue
                    if waited:
                        self._close_control()
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

    def probe(self, within: float) -> None:
        """Check that the server greets a new connection within ``within`` seconds,
        which a server that stopped answering does not (a question on the control
        connection would wait the whole query timeout): else ``SourceUnreachableError``."""
        settings = self.connection.pymysql_kwargs(
            connect_timeout=within, read_timeout=within, write_timeout=within
        )
        try:
            pymysql.connect(**settings).close()
        except (pymysql.err.MySQLError, OSError) as exc:
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
            rows = self._sql(SETTINGS_QUERY, doing="reading the server's settings")
            variables = {str(k).lower(): str(v) for k, v in rows}
            check_settings(self.spec.name, variables)
            version = variables.get("version", "")
            self._server = ServerInfo(
                server_id=int(variables.get("server_id", "0")),
                version=version,
                is_mariadb="mariadb" in version.lower(),
                server_uuid=variables.get("server_uuid"),
            )
        return self._server

    def master_position(self) -> BinlogPosition:
        """The end of the last committed transaction on the source (of several servers,
        server-neutral: ``_positions``)."""
        if self.spec.fails_over:
            return neutral_end(self)
        is_mariadb = self.server_info().is_mariadb
        if not is_mariadb:
            consistent = self._log_status()
            if consistent is not None:
                return consistent
        for _ in range(5):
            file, pos, gtid = self._binlog_status()
            if not is_mariadb:
                # The status reads its offset and its set one after the other, and a
                # commit's GTID joins the set a moment after its bytes join the
                # binlog: the set can be a transaction behind or ahead of the offset.
                # The same status twice narrows that (``_log_status`` closes it).
                if self._binlog_status() == (file, pos, gtid):
                    return BinlogPosition(file, pos, gtid)
                continue
            still, gtid = self._gtid_while_ending_at(file, pos)
            if still:
                return BinlogPosition(file, pos, gtid)
        return BinlogPosition(file, pos, self._gtid_at(file, pos))

    def gtid_at(self, file: str, pos: int) -> str | None:
        """The GTID state at ``file:pos``, a transaction boundary. While the binlog still
        ends there, it is ``@@gtid_binlog_pos`` (see ``_gtid_while_ending_at``); else
        ``BINLOG_GTID_POS``, which scans the file from its start on every call (150 ms
        at 335 MB here)."""
        if self.server_info().is_mariadb and self._binlog_status()[:2] == (file, pos):
            still, gtid = self._gtid_while_ending_at(file, pos)
            if still:
                return gtid
        return self._gtid_at(file, pos)

    def _binlog_status(self) -> tuple[str, int, str | None]:
        """Where the binlog ends: file, offset and (MySQL only) the executed GTID set."""
        statement = self.server_info().binlog_status_sql
        rows = self._sql(statement, doing=statement)
        if not rows or not rows[0][0]:
            raise SourceError(
                f"source {self.spec.name!r} has no binary log; enable log_bin on the server",
                source=self.spec.name,
            )
        row = rows[0]
        gtid = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
        return str(row[0]), int(row[1]), gtid

    def _log_status(self) -> BinlogPosition | None:
        """MySQL's binlog end and its executed set as one consistent pair, from
        ``performance_schema.log_status`` (the server holds commits while it fills the
        row); None when the account lacks ``BACKUP_ADMIN`` (asked once) or the server
        has no such table (before 8.0.14)."""
        if self._log_status_denied:
            return None
        try:
            rows = self._query("SELECT LOCAL FROM performance_schema.log_status")
        except pymysql.err.MySQLError as exc:
            if error_code(exc) not in LOG_STATUS_REFUSED:
                raise self._translate(exc, doing="reading performance_schema.log_status") from None
            log.info("source %s: performance_schema.log_status is refused (%s); the binlog "
                     "status gives its GTID set, exact only between commits: grant "
                     "BACKUP_ADMIN", self.spec.name, error_text(exc))  # fmt: skip
            self._log_status_denied = True
            return None
        except OSError as exc:
            raise self._unreachable(exc) from None
        local = json.loads(rows[0][0]) if rows and rows[0][0] else {}
        if not local.get("binary_log_file"):
            raise SourceError(
                f"source {self.spec.name!r} has no binary log; enable log_bin on the server",
                source=self.spec.name,
            )
        gtid = str(local.get("gtid_executed") or "").replace("\n", "") or None
        file, pos = str(local["binary_log_file"]), int(local["binary_log_position"])
        return BinlogPosition(file, pos, gtid)

    def _gtid_while_ending_at(self, file: str, pos: int) -> tuple[bool, str | None]:
        """``@@gtid_binlog_pos``, and whether the binlog status still says ``file:pos``
        after it: the caller saw the binlog end there just before, so no commit came
        between and that GTID state is the one at ``file:pos``."""
        rows = self._sql("SELECT @@GLOBAL.gtid_binlog_pos", doing="reading gtid_binlog_pos")
        gtid = str(rows[0][0]) if rows and rows[0][0] else None
        return self._binlog_status()[:2] == (file, pos), gtid

    def _gtid_at(self, file: str, pos: int) -> str | None:
        """The GTIDs at ``file:pos``, a transaction boundary: MariaDB's state, or MySQL's
        executed set (``_gtid_set_at``)."""
        if not self.server_info().is_mariadb:
            return self._gtid_set_at(file, pos)
        # NULL when the scan of the file meets an event over max_allowed_packet; the
        # position then carries no GTID and resumes by file and offset only.
        rows = self._sql("SELECT BINLOG_GTID_POS(%s, %s)", (file, pos), doing="BINLOG_GTID_POS")
        value = rows[0][0] if rows else None
        return str(value) if value else None

    def _gtid_set_at(self, file: str, pos: int) -> str | None:
        """MySQL's executed set at ``file:pos``: the file's ``PREVIOUS_GTIDS`` and every
        GTID logged before ``pos``, from ``SHOW BINLOG EVENTS`` a page at a time (MySQL
        has no ``BINLOG_GTID_POS``; like MariaDB's, it reads the file up to ``pos``)."""
        executed = GtidSet()
        at = 4
        while at < pos:
            rows = self._sql(
                f"SHOW BINLOG EVENTS IN %s FROM {int(at)} LIMIT {GTID_SCAN_PAGE}", (file,),
                doing="SHOW BINLOG EVENTS",
            )
            for _, start, kind, _, end, info in rows:
                if int(start) >= pos:
                    return str(executed) or None
                if kind == "Previous_gtids":
                    executed = GtidSet.parse(str(info))
                elif kind in ("Gtid", "Gtid_tagged_log_event"):
                    executed.add_gtid(str(info).split("'")[1])
                at = int(end)
            if len(rows) < GTID_SCAN_PAGE:
                break
        return str(executed) or None

    def binary_logs(self) -> list[tuple[str, int]]:
        """The source's binlog files and their sizes, oldest first."""
        rows = self._sql("SHOW BINARY LOGS", doing="SHOW BINARY LOGS")
        return [(str(r[0]), int(r[1])) for r in rows]

    def resolve_start(
        self, start: str | BinlogPosition, *, fill_gtid: bool = True
    ) -> BinlogPosition:
        """Turn ``"earliest"``, ``"latest"`` or a position into a checked start position
        (see ``_start``)."""
        if not self.spec.fails_over:
            return resolve_start(self, start, fill_gtid=fill_gtid)
        # The server to start on, and a neutral start (``_failover``). The server chosen
        # may go before it answered what the start asks (a primary killed as the read
        # starts): then the choice is made again, among the servers that answer.
        for attempt in range(len(self.spec.servers) + 1):
            at = follow_start(self, start)  # no server ready: an error at once
            try:
                return neutral_boundary(resolve_start(self, at).gtid)
            except SourceUnreachableError:
                if attempt == len(self.spec.servers):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _checked_server(self) -> ServerInfo:
        """The server's settings, checked, and the replica id checked against it."""
        info = self.server_info()
        if not self._checked:
            self._check_replica_id()
            self._checked = True
        return info

    def _check_replica_id(self) -> None:
        info = self.server_info()
        try:
            rows = self._query(info.replicas_sql)
            replicas = [{"Server_id": r[0], "Host": r[1]} for r in rows if r and len(r) > 1]
        except pymysql.err.MySQLError:
            # Listing replicas needs REPLICATION MASTER ADMIN on MariaDB; without it the
            # source's own id is still refused below.
            replicas = []
        check_replica_id(
            self.replica_id,
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
                match = _JSON_VALID_CHECK.match(str(clause).strip())
                if match:
                    names.add(match.group(1).replace("``", "`"))
            self._json_columns[key] = frozenset(names)
        return self._json_columns[key]

    def _declared_types_of(
        self, database: str, table: str, *, fresh: bool = False
    ) -> tuple[tuple[str, str], ...]:
        """Each column of a table as information_schema declares it now, in order: its
        name and its ``declared_type`` (empty when the table is gone). Binlog and
        snapshot name columns by it, so both name every column alike. ``fresh``: look
        again rather than trust what an earlier lookup found (a snapshot reads now)."""
        key = (database, table)
        if fresh:
            self._declared.pop(key, None)
            self._json_columns.pop(key, None)
        if key not in self._declared:
            rows = self._sql(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                key,
                doing="reading column types",
            )
            columns = [(str(name), str(declared)) for name, declared in rows]
            # Only MariaDB's JSON is a LONGTEXT (MySQL's has a type of its own).
            json_columns = (
                self._json_columns_of(database, table)
                if self.server_info().is_mariadb
                and any(declared.lower() == "longtext" for _, declared in columns)
                else frozenset()
            )
            self._declared[key] = tuple(
                (name, declared_type(declared, is_json=name in json_columns))
                for name, declared in columns
            )
        return self._declared[key]

    def _forget_declarations(self, changed: list[tuple[str, str | None]]) -> None:
        """Drop what is known of the declarations of tables a schema change touched
        (``(database, table)``; a table of None: the whole database)."""

        def touched(database: str, table: str) -> bool:
            return any(database == d and t in (None, table) for d, t in changed)

        self._json_columns = {k: v for k, v in self._json_columns.items() if not touched(*k)}
        self._declared = {k: v for k, v in self._declared.items() if not touched(*k)}
        self._decoders = {
            k: d for k, d in self._decoders.items() if not touched(d.database, d.table)
        }

    # -- lag ----------------------------------------------------------------

    @property
    def caught_up(self) -> bool:
        """Whether the server's last word to the read was a heartbeat: it had nothing
        more to send (the read is at the server's end, however old its last commit)."""
        return self._caught_up

    @property
    def idle_at(self) -> tuple[int, int] | None:
        """Where the server's binlog ends, as its last heartbeat said (ordered as
        ``coordinates`` orders positions), while that heartbeat is the last word to the
        read (``caught_up``): then every transaction before it was read. None once an
        event came after it. A server that rotated its binlog and idles ends where no
        transaction ends: a read of it has reached that end all the same."""
        return self._idle_at if self._caught_up else None

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
        file, pos, _ = self._binlog_status()  # this server's, as ``_read_file`` is
        master = BinlogPosition(file, pos)
        return CaptureLag(seconds, self.bytes_between(self._read_file, self._read_pos, master))

    def bytes_between(self, file: str, pos: int, master: BinlogPosition) -> int:
        """Binlog bytes from ``file:pos`` to ``master`` (0 at or past it)."""
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
        until: float | Callable[[], float] | None = None,
        catch_up: float | None = None,
    ) -> Iterator[ReadItem]:
        """Items strictly after ``start`` (a transaction boundary), in commit order.

        With ``shard``, only the rows of that shard (by primary key; see ``Shard``)
        and every schema change and commit.

        Stops after the ``TransactionCommit`` that reaches ``stop``, or once
        ``idle_timeout`` seconds pass without a change to the source's tables
        (commits of other tables still come, to move positions on). With ``until`` (a
        ``time.monotonic()`` moment), reading goes on past ``stop`` until then, and
        ends at the first transaction boundary (or idle heartbeat) after it: an *open
        read*, which hands out changes as they are committed (``until`` may be a function
        returning that moment, asked at each boundary and heartbeat past ``stop``: a
        read another thread ends). With ``catch_up`` too (a
        later moment), it goes on past ``until`` while it is behind the server (its
        boundaries' binlog time ``BEHIND_SECONDS`` or more before the clock), up to
        ``catch_up``. Connection faults are retried with backoff from the last
        commit, without loss or duplicates; configuration, privilege and position
        errors are raised at once.
        """
        if isinstance(start, str) and start.strip().lower() == "snapshot":
            if self.spec.fails_over:
                follow(self, None)  # the tables as a server that answers has them
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
        several = self.spec.fails_over  # resumes by GTID (``_failover``)
        # Checked on every read; a MariaDB GTID state is not looked up here
        # (BINLOG_GTID_POS scans the file), so positions without one resume by file and
        # offset only. A MySQL start without its set has it looked up (``_start``): a
        # read's positions carry their set, so that happens once, at a given start.
        begin = self.resolve_start(start, fill_gtid=several)
        if (
            stop is not None
            and begin.file
            and stop.file
            and coordinates(stop) <= coordinates(begin)
        ):
            return
        if several:
            begin = by_gtid(self, begin)
        # Asked in the loop: a server of several that goes before it answered is left
        # for another, as one that goes mid-read is.
        info: ServerInfo | None = None
        committed = begin
        replay_skip = 0  # items of an interrupted transaction already handed out
        backoff = 0.2
        last_item = time.monotonic()
        last_success = time.monotonic()
        while True:
            progress = Progress(committed, replay_skip)
            try:
                if info is None or self._server is None:  # first, or moved (``_failover``)
                    info = self._checked_server()
                yield from ReadSession(
                    self, info, progress, stop, idle_timeout, last_item, shard, until, catch_up
                ).items()
                return
            except StreamLost as exc:
                failure: BaseException = exc.__cause__ or exc
            except pymysql.err.MySQLError as exc:
                code = error_code(exc)
                if code == 1236:
                    raise self._dump_refused(progress.committed, error_text(exc)) from None
                if code in ACCESS_CODES and self._stream_logged_in:
                    # Logged in, then refused: MariaDB answers the replica registration
                    # of a user without REPLICATION SLAVE with a plain "access denied".
                    raise self._replication_refused(exc) from None
                if code not in TRANSIENT_CODES:
                    raise self._translate(exc, doing="reading the binlog") from None
                failure = exc
            except (OSError, EOFError, struct.error) as exc:
                failure = exc
            except SourceUnreachableError as exc:  # the server moved to, asked for settings
                if not several:
                    raise
                failure = exc
            committed, replay_skip = progress.committed, progress.in_transaction
            last_item = max(last_item, progress.last_item)
            if progress.events:
                last_success, backoff = time.monotonic(), 0.2
            if not self._connected_once and not several:
                raise self._unreachable(failure) from None
            self._end_lost_dump()
            if several:
                try:
                    committed = follow(self, committed, error_text(failure)) or committed
                except NoServerReady as exc:
                    if exc.behind and time.monotonic() - last_success > self.reconnect_for:
                        raise failover_error(self, committed, str(exc)) from None
                    failure = exc
            if time.monotonic() - last_success > self.reconnect_for:
                raise SourceError(
                    f"source {self.spec.name!r}: no binlog for {self.reconnect_for:.0f}s "
                    f"({error_text(failure)}); resume from {committed} once the server is back",
                    source=self.spec.name,
                ) from None
            delay = backoff * (0.75 + random.random() / 2)
            if idle_timeout is not None and time.monotonic() + delay - last_item > idle_timeout:
                return
            log.warning(
                "source %s: binlog connection lost (%s); reconnecting in %.1fs from %s",
                self.spec.name,
                error_text(failure),
                delay,
                committed,
            )
            time.sleep(delay)
            backoff = min(backoff * 2, self.max_backoff)
            self.reconnects += 1

    def _end_lost_dump(self) -> None:
        """End the server's side of a replication connection that failed.

        Across a stalled network the server's dump thread can stay blocked writing
        to the dead socket until its net_write_timeout, and the next dump under the
        same server_id may wait for it. The control connection may have stalled
        with it, so a fresh one ends the thread; failing that, nothing is lost.
        """
        thread, self.connection_id = self.connection_id, None
        if thread is None:
            return
        self._close_control()
        with contextlib.suppress(pymysql.err.MySQLError, OSError, SourceError):
            self._sql(f"KILL CONNECTION {int(thread)}", doing="ending a lost binlog dump")

    def snapshot(self) -> Iterator[CaptureItem]:
        """Every row of the captured tables as it is now, then where the binlog goes on
        (see ``_snapshot``)."""
        yield from read_snapshot(self)

    def _replication_refused(self, exc: BaseException) -> SourceAccessError:
        user = self.connection.user
        return SourceAccessError(
            f"source {self.spec.name!r}: user {user!r} may not read the binlog "
            f"({error_text(exc)}); run on the source: "
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
        return position_error(self, position, f"the server refused it ({text})")
