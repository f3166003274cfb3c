"""One replication connection of a binlog reader: the read loop and what it decodes."""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP, COM_BINLOG_DUMP_GTID
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from dbus_fn.capture._column_readers import UnknownColumnType
from dbus_fn.capture._ddl import (
    ddl_target,
    is_account_statement,
    is_transaction_control,
    renamed_tables,
)
from dbus_fn.capture._decode import (
    UNDECODABLE,
    Images,
    TableDecoder,
    UndecodableTable,
    compile_table,
)
from dbus_fn.capture._dsn import database_matches
from dbus_fn.capture._events import (
    DELETE,
    GTID,
    HEARTBEAT,
    OTHER,
    PARTIAL_UPDATE,
    PREVIOUS,
    ROTATE,
    TABLE_MAP,
    UPDATE,
    WRITE,
    XID,
    StreamLost,
    events,
)
from dbus_fn.capture._failover import PRIMARY_CHECK_SECONDS, better_server
from dbus_fn.capture._gtid_sets import GtidSet, looks_like_set
from dbus_fn.capture._positions import (
    TRANSACTION_END,
    StreamGtids,
    coordinates,
    file_sequence,
    is_neutral,
    neutral_boundary,
    neutral_position,
)
from dbus_fn.capture._reader_view import ReaderView
from dbus_fn.capture._server import TRANSIENT_CODES, ServerInfo, error_code
from dbus_fn.capture._shard import Shard
from dbus_fn.errors import SourceError
from dbus_fn.events import (
    BinlogPosition,
    Operation,
    ReadItem,
    RowChange,
    SchemaChange,
    TransactionCommit,
    UndecodedRows,
)

log = logging.getLogger("dbus_fn.capture")

OPERATIONS = {
    WRITE: Operation.INSERT,
    UPDATE: Operation.UPDATE,
    DELETE: Operation.DELETE,
    PARTIAL_UPDATE: Operation.UPDATE,
}
ONLY_EVENTS = [
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    TableMapEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    GtidEvent,
    MariadbGtidEvent,
    RotateEvent,
    HeartbeatLogEvent,
    PartialUpdateRowsEvent,
    # Events the library has no class for: each is passed by (``PASSED_BY``) or
    # refused (``unknown_event``), never skipped unseen.
    NotImplementedEvent,
]
PASSED_BY = {
    28: "IGNORABLE_LOG_EVENT",
    34: "ANONYMOUS_GTID_LOG_EVENT",  # a transaction without a GTID (gtid_mode OFF)
    36: "TRANSACTION_CONTEXT_EVENT",  # group replication's certification data
    37: "VIEW_CHANGE_EVENT",  # group replication's membership
    41: "HEARTBEAT_LOG_EVENT_V2",
}
"""Event types the library has no class for that hold no row change (by type code)."""
IGNORABLE_F = 0x80
"""``LOG_EVENT_IGNORABLE_F``: the server marks an event a replica that does not know
it may skip."""


def unknown_event(event_type: int, flags: int) -> bool:
    """Whether an event the library has no class for may hold changes: neither known
    to hold none (``PASSED_BY``) nor marked ignorable by the server. Such an event
    stops the read (MariaDB's compressed row events, MySQL's INCIDENT_EVENT, a type
    newer than this dbus): skipping it could lose changes without a word."""
    return event_type not in PASSED_BY and not flags & IGNORABLE_F
# Errors that mean the connection went away, not that the request was wrong.
# An open read asks the server for a heartbeat this often (seconds), so that it ends
# close to its time when nothing is written.
OPEN_READ_HEARTBEAT = 0.1
# A boundary whose binlog time is this far behind the clock: the open read is behind
# the server, and reads on (up to its ``catch_up``) rather than end its batch and
# leave the backlog to wait for the next one. A binlog time is whole seconds, so a
# commit is surely this old only when its second ended this long ago.
BEHIND_SECONDS = 1.0
DDL_WORDS = ("ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE")
DML_WORDS = ("INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD")


def behind(stamp: float) -> bool:
    """Whether a boundary of binlog time ``stamp`` (whole seconds) is ``BEHIND_SECONDS``
    or more before the clock: its reader is behind the server."""
    return time.time() - (stamp + 1) >= BEHIND_SECONDS


def _deadline(until: float | Callable[[], float] | None) -> Callable[[], float] | None:
    """``ReadSession.until`` as a function to ask (a fixed moment answers itself)."""
    if until is None or callable(until):
        return until
    moment = until
    return lambda: moment


class GtidDumpStream(BinLogStreamReader):  # type: ignore[misc]
    """mysql-replication asking for the binlog by GTID with dbus's own dump request:
    MariaDB's of the right length, or MySQL's ``COM_BINLOG_DUMP_GTID`` with a set
    that may hold tagged GTIDs (the library's knows neither). The library builds its
    GTID request in one hook, named for MariaDB, which answers for both here."""

    def __init__(self, *, executed: GtidSet | None, **settings: Any) -> None:
        super().__init__(is_mariadb=True, **settings)
        self.executed = executed
        """MySQL: the set the reader holds (None on MariaDB)."""

    def _BinLogStreamReader__set_mariadb_settings(self) -> bytes:
        server_id = self._BinLogStreamReader__server_id
        if self.executed is not None:
            # flags 4 (through GTID, blocking), our server_id, no file name, position 4
            data = self.executed.encode()
            body = bytes([COM_BINLOG_DUMP_GTID]) + struct.pack("<HII", 4, server_id, 0)
            body += struct.pack("<QI", 4, len(data)) + data
            return struct.pack("<i", len(body)) + body
        cursor = self._stream_connection.cursor()
        cursor.execute("SET @slave_connect_state = %s", (self.auto_position,))
        cursor.execute("SET @slave_gtid_strict_mode = 1")
        cursor.execute("SET @slave_gtid_ignore_duplicates = 0")
        cursor.close()
        # position 4, flags 0 (blocking), our server_id, empty file name
        body = bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", 4, 0, server_id)
        return struct.pack("<i", len(body)) + body


@dataclass(slots=True)
class Progress:
    """What a session got to, so a reconnect resumes exactly there."""

    committed: BinlogPosition
    in_transaction: int
    last_item: float = 0.0
    events: int = 0


class ReadSession:
    """One replication connection of a ``BinlogReader``, from its resume position on.

    ``items()`` hands out what the connection reads; ``progress`` records how far
    it got, so the reader's reconnect resumes exactly there after a fault.
    """

    def __init__(
        self,
        reader: ReaderView,
        info: ServerInfo,
        progress: Progress,
        stop: BinlogPosition | None,
        idle_timeout: float | None,
        last_item: float,
        shard: Shard | None = None,
        until: float | Callable[[], float] | None = None,
        catch_up: float | None = None,
    ) -> None:
        self.reader = reader
        self.info = info
        self.progress = progress
        self.stop = stop
        self.idle_timeout = idle_timeout
        self.last_item = last_item
        self.shard = shard
        self.until = until
        """Past ``stop``, read on until this ``time.monotonic()`` moment (None: stop there),
        or until the moment a function returns when asked (an open read that another
        thread ends: ``dbus_spark.reads.open_read``)."""
        self.catch_up = catch_up
        """Past ``until``, read on while behind the server (a boundary's binlog time
        ``BEHIND_SECONDS`` or more before the clock), up to this ``time.monotonic()``
        moment (None: never)."""

    def open_stream(self, resume: BinlogPosition, heartbeat: float) -> Any:
        made: list[bool] = []

        def connect(**settings: Any) -> Any:
            if "db" in settings:  # the library's ctl connection; PyMySQL deprecates `db`
                settings["database"] = settings.pop("db")
            else:  # the stream: a second one is the library reconnecting on its own
                if made:
                    raise StreamLost("connection lost")
                made.append(True)
                self.reader._stream_logged_in = False
                connection = pymysql.connect(**settings)
                self.reader._stream_logged_in = True
                return connection
            return pymysql.connect(**settings)

        settings = self.reader.connection.pymysql_kwargs(
            connect_timeout=self.reader.connect_timeout, read_timeout=self.reader.stall_timeout
        )
        common: dict[str, Any] = {
            "connection_settings": settings,
            "server_id": self.reader.replica_id,
            "blocking": True,
            "only_events": ONLY_EVENTS,
            # The events it has no class for reach the loop, which refuses the
            # unknown ones (``unknown_event``) instead of letting them pass unseen.
            "filter_non_implemented_events": False,
            "slave_heartbeat": heartbeat,
            "report_slave": (self.reader._report_host, "", "", 0),
            "pymysql_wrapper": connect,
            "enable_logging": False,
            # A table map whose table id this connection already saw is skipped, not
            # parsed again (a one-row transaction spends most of its decoding there).
            # The id names one table definition until the server restarts: any DDL
            # gets a new id, and a restart ends the connection (and the library
            # forgets its ids at every rotation, as ``items`` does).
            "freeze_schema": True,
        }
        if resume.file and not is_neutral(resume):  # a neutral one resumes by GTID
            return BinLogStreamReader(
                resume_stream=True,
                log_file=resume.file,
                log_pos=resume.pos,
                is_mariadb=False,
                **common,
            )
        executed = GtidSet.parse(resume.gtid) if looks_like_set(resume.gtid) else None
        return GtidDumpStream(executed=executed, auto_position=resume.gtid, **common)

    def items(self) -> Iterator[ReadItem]:
        """Yield items until ``stop``, idle or a fault (raised as ``StreamLost``)."""
        reader, info, progress = self.reader, self.info, self.progress
        stop, idle_timeout, shard = self.stop, self.idle_timeout, self.shard
        last_item = self.last_item
        owns = shard.owns if shard is not None and shard.count > 1 else None
        heartbeat = reader.heartbeat
        if idle_timeout is not None:
            heartbeat = max(0.05, min(heartbeat, idle_timeout / 4))
        catch_up = self.catch_up
        until = _deadline(self.until)
        if until is not None:  # an idle server's heartbeat is the chance to end on time
            heartbeat = min(heartbeat, OPEN_READ_HEARTBEAT)

        def open_read_ends(stamp: int) -> bool:
            """At or past ``stop``, at a boundary of binlog time ``stamp``: whether the
            read ends here (at once without ``until``)."""
            if until is None:
                return True
            moment = now()
            if moment < until():
                return False
            if catch_up is None or moment >= catch_up:
                return True
            return not behind(stamp)

        resume = progress.committed
        stream = self.open_stream(resume, heartbeat)
        source, server = reader.spec.name, info.identity
        stop_at = coordinates(stop) if stop is not None and stop.file else None
        gtids = StreamGtids(resume.gtid, mysql=not info.is_mariadb)
        # A source of several servers: positions name no server's binlog (``_positions``).
        neutral = reader.spec.fails_over
        txn_total = gtids.total()  # the transaction's place, when neutral
        tables: dict[int, TableDecoder | UndecodableTable | None] = {}
        file = "" if neutral else resume.file  # the server's own, from its first rotation
        file_seq = file_sequence(file)[1]
        txn_gtid: str | None = None
        txn_time = datetime.now(UTC)
        txn_stamp: int | None = None  # the binlog timestamp txn_time was made from
        txn_start = resume.pos
        txn_rows = 0
        explicit = False
        produced = 0  # items of the current transaction, counting skipped ones
        skip = progress.in_transaction
        last_item = max(last_item, progress.last_item)
        now = time.monotonic
        failed = False
        incoming = events(stream, tables)
        watch = reader.spec.fails_over  # a source that may fail over (``_failover``)
        next_check = now() + PRIMARY_CHECK_SECONDS

        def check_primary() -> float:
            """End this session when another server should be read: the reader moves
            there. Returns when to check next."""
            why = better_server(reader, progress.committed)
            if why is not None:
                raise StreamLost(why)
            return now() + PRIMARY_CHECK_SECONDS
        try:
            while True:
                try:
                    kind, stamp, end, size, a, b, c, d = next(incoming)
                except pymysql.err.OperationalError as exc:
                    if error_code(exc) in TRANSIENT_CODES:
                        raise StreamLost(str(exc)) from exc
                    raise
                if not progress.events:
                    reader._connected_once = True
                    reader.connection_id = stream._stream_connection.thread_id()
                progress.events += 1
                if kind == HEARTBEAT:
                    # `stop` may be where no transaction ends (a fresh binlog file after
                    # a rotation): the server's heartbeat says it has nothing more.
                    at = (
                        (gtids.total(), TRANSACTION_END) if neutral
                        else (file_sequence(a or file)[1], end)
                    )  # fmt: skip
                    reader._caught_up = True
                    reader._idle_at = at if txn_gtid is None else (0, 0)
                    if watch and now() >= next_check:
                        next_check = check_primary()
                    if idle_timeout is not None and now() - last_item >= idle_timeout:
                        return
                    if (
                        stop_at is not None and txn_gtid is None and not explicit
                        and at >= stop_at and (until is None or now() >= until())
                    ):  # fmt: skip
                        return
                    continue
                if kind == ROTATE:
                    file = a
                    file_seq = file_sequence(file)[1]
                    # A new file may be a new boot of the server, which numbers its
                    # tables from the start again: the ids read so far may name other
                    # tables now. A server stopped ends its file with no rotation of
                    # its own, so the one its dump sends (no time) counts too. Both
                    # the decoders and mysql-replication's maps (which it forgets only
                    # at a rotation with a time) are forgotten here, for either path.
                    tables.clear()
                    stream.table_map.clear()
                    reader._read_file, reader._read_pos = file, b
                    continue
                reader._caught_up = False
                reader._read_file, reader._read_pos = file, end
                reader._last_event_time = stamp
                if kind == TABLE_MAP:
                    tables[a] = self.decoder_for(b, info)
                    continue
                if kind == PREVIOUS:
                    gtids.learn(a)
                    continue
                if WRITE <= kind <= DELETE or kind == PARTIAL_UPDATE:
                    decoder = tables.get(a)
                    if decoder is None:
                        continue
                    if not decoder.whole(b) or (c is not None and not decoder.whole(c)):
                        raise SourceError(
                            f"source {source!r}: the binlog holds row images of "
                            f"{decoder.database}.{decoder.table} without every column at "
                            f"{file}:{end - size}, written by a session with "
                            "binlog_row_image=MINIMAL or NOBLOB; the read stops there rather "
                            "than deliver partial rows; set binlog_row_image=FULL on the "
                            "server (and in the sessions that set it), then bootstrap the "
                            "table and start after it",
                            source=source,
                        )
                    position = (
                        neutral_position(txn_total, produced, txn_gtid) if neutral
                        else BinlogPosition(file, end - size, txn_gtid)
                    )  # fmt: skip
                    op = OPERATIONS[kind]
                    txn_id = txn_gtid or f"{file}:{txn_start}"
                    index = 0
                    failure: Exception | None = None
                    rows: Iterator[Images] = (
                        decoder.partial_images(d, b, c, owns) if kind == PARTIAL_UPDATE
                        else decoder.images(d, b, c, owns)
                    )  # fmt: skip
                    # A decoder raises at the row it cannot decode (the rows before it
                    # were yielded); nothing else here raises these.
                    try:
                        for image, after in rows:
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
                    except UNDECODABLE as exc:
                        failure = exc
                    if failure is not None:
                        # The rest of the event as one item: a read resumed inside the
                        # transaction meets the same bytes and counts it the same.
                        produced += 1
                        txn_rows += 1
                        if produced > skip:
                            yield UndecodedRows(
                                source, decoder.database, decoder.table, op, position,
                                txn_time, server, index, type(failure).__name__,
                                str(failure), bytes(d), txn_id,
                            )  # fmt: skip
                            progress.in_transaction = produced
                            last_item = progress.last_item = now()
                    continue
                if kind == GTID:
                    txn_gtid = a
                    if stamp != txn_stamp:  # thousands of commits share a second
                        txn_stamp = stamp
                        txn_time = datetime.fromtimestamp(txn_stamp, UTC)
                    txn_start = end - size
                    txn_rows = produced = 0
                    explicit = False
                    if neutral:
                        txn_total = gtids.total_with(txn_gtid)
                    if (
                        stop_at is not None
                        and ((txn_total, 0) if neutral else (file_seq, txn_start)) >= stop_at
                        and open_read_ends(stamp)
                    ):
                        return  # a start by GTID alone can be at or past `stop`
                    continue
                if (
                    kind == OTHER and type(a) is NotImplementedEvent
                    and unknown_event(a.event_type, a.packet.flags)
                ):  # fmt: skip
                    raise SourceError(
                        f"source {source!r}: the binlog holds an event of type {a.event_type} "
                        f"at {file}:{end - size} that dbus does not know, so the read stops "
                        "there rather than skip changes it may hold; read it with a dbus that "
                        "knows it, or bootstrap the tables it changed and start after it",
                        source=source,
                    )
                commit = kind == XID or type(a) is XAPrepareEvent
                if type(a) is QueryEvent:
                    statement = a.query
                    control = is_transaction_control(statement)
                    if control == "begin":
                        explicit = True
                        continue
                    if control == "commit":
                        commit = True
                    else:
                        change = self.schema_change(
                            a, statement,
                            neutral_position(txn_total, produced, txn_gtid) if neutral
                            else BinlogPosition(file, end, txn_gtid),
                            txn_time, server,
                        )  # fmt: skip
                        if change is not None:
                            produced += 1
                            if produced > skip:
                                yield change
                                progress.in_transaction = produced
                                last_item = progress.last_item = now()
                        commit = not explicit
                if not commit:
                    continue
                gtids.commit(txn_gtid)
                state = gtids.text()
                position = neutral_boundary(state) if neutral else BinlogPosition(file, end, state)
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
                if watch and now() >= next_check:
                    next_check = check_primary()
                if (
                    stop_at is not None
                    and (coordinates(position) if neutral else (file_seq, end)) >= stop_at
                    and open_read_ends(stamp)
                ):
                    return
        except BaseException as exc:
            # A stalled or broken connection must not be touched again; a reader
            # that simply stopped consuming (GeneratorExit) ended cleanly.
            failed = not isinstance(exc, GeneratorExit)
            raise
        finally:
            stream.close()
            if not failed and stop is not None:
                self.end_dump_thread()

    def end_dump_thread(self) -> None:
        """End the server's side of the replication connection just closed.

        The server notices a closed replica only at its next event or heartbeat;
        until then, the next read with the same server_id waits ~100 ms for the
        server to kill the leftover dump thread. Ending it here makes each
        micro-batch's read start at once.
        """
        thread = self.reader.connection_id
        if thread is None:
            return
        with contextlib.suppress(pymysql.err.MySQLError, OSError, SourceError):
            self.reader._sql(f"KILL CONNECTION {int(thread)}", doing="ending the binlog dump")

    def decoder_for(
        self, event: Any, info: ServerInfo
    ) -> TableDecoder | UndecodableTable | None:
        database, table = event.schema, event.table
        if not self.reader.spec.matches(database, table):
            return None
        raw = event.packet.packet._data
        key = bytes(raw[20 : 20 + event.event_size])
        decoder = self.reader._decoders.get(key)
        if decoder is None:
            declared = self.reader._declared_types_of(database, table)
            metadata = event.optional_metadata
            key_indexes = list(metadata.simple_primary_key_list or [])
            key_indexes += [
                i for i in (metadata.primary_keys_with_prefix or {}) if i not in key_indexes
            ]
            try:
                decoder = compile_table(database, table, event.columns, key_indexes, declared)
            except UnknownColumnType as exc:  # its rows go to the dead letters
                return UndecodableTable(database, table, str(exc))
            if len(self.reader._decoders) > 4096:
                self.reader._decoders.clear()
            self.reader._decoders[key] = decoder
        return decoder

    def schema_change(
        self,
        event: Any,
        statement: str,
        position: BinlogPosition,
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
        if head not in DDL_WORDS:
            if head in DML_WORDS and database_matches(self.reader.spec.tables, default):
                log.warning(
                    "source %s: a statement-logged change at %s is not captured "
                    "(every session must write binlog_format=ROW): %.80s",
                    self.reader.spec.name, position, statement,
                )  # fmt: skip
            return None
        database, table = ddl_target(statement, default)
        renamed = renamed_tables(statement, default)
        # Column declarations are looked up by name and must be redone, and so must
        # the decoders built on them.
        changed: list[tuple[str, str | None]] = [*renamed] or [(database, table)]
        self.reader._forget_declarations(changed)
        spec = self.reader.spec
        if renamed:
            # A copy-and-swap (``RENAME TABLE t TO _t_old, _t_new TO t``) is the schema
            # change of the captured table it names, not of the tool's helper table.
            captured = [(d, t) for d, t in renamed if spec.matches(d, t)]
            if not captured:
                return None
            database, table = captured[0]
        elif table is not None:
            if not spec.matches(database, table):
                return None
        elif not database_matches(spec.tables, database):
            return None
        return SchemaChange(
            self.reader.spec.name,
            database,
            table,
            statement,
            position,
            when,
            server,
        )
