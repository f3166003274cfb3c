"""Which server of a source a reader reads, and the move to another one by GTID.

A DSN may list the servers of one replication topology (``_dsn``). A reader reads
one of them; when it goes away or stops being a primary (``@@read_only`` turned
on), the reader moves to the next server that answers and resumes after the GTIDs
of its last committed transaction (MariaDB's GTID state, MySQL's executed set):
binlog files and offsets name places in one server's binlog only, so a source of
several servers always resumes by GTID.

A server is chosen only when its binlog holds every transaction the reader has
committed (MariaDB: ``@@gtid_binlog_state``; MySQL: ``@@gtid_executed`` holds the
reader's whole set): a writable server before a read-only one, else in the DSN's order. A
server behind the reader may still be applying its relay log, so the choice is
asked again with the reader's backoff; past ``reconnect_for`` the reader raises
``failover_error``, which names the missing transactions and the ways on. Nothing
is ever skipped silently. The servers of one source are all MariaDB or all MySQL.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import pymysql

from dbus_fn.capture._dsn import ConnectionSettings
from dbus_fn.capture._gtid_sets import GtidSet, looks_like_set
from dbus_fn.capture._positions import (
    MariadbGtid,
    neutral_boundary,
    parse_gtid,
    parse_gtid_state,
)
from dbus_fn.capture._reader_view import ReaderView
from dbus_fn.capture._server import error_text
from dbus_fn.errors import ConfigError, PositionError, SourceUnreachableError
from dbus_fn.events import BinlogPosition

log = logging.getLogger("dbus_fn.capture")

PRIMARY_CHECK_SECONDS = 5.0
"""How often a reader of several servers asks whether its server is still writable."""


Logged = dict[tuple[int, int], int] | GtidSet
"""What a server's binlog holds: MariaDB's ``@@gtid_binlog_state`` as (domain,
server_id) -> the last sequence number logged; MySQL's ``@@gtid_executed``."""

Committed = dict[int, MariadbGtid] | GtidSet
"""A reader's committed GTIDs, parsed once: MariaDB's state per domain, or MySQL's set."""


@dataclass(frozen=True, slots=True)
class Probe:
    """One server as a quick connection found it."""

    index: int
    settings: ConnectionSettings
    writable: bool
    logged: Logged

    @property
    def is_mariadb(self) -> bool:
        return not isinstance(self.logged, GtidSet)


class NoServerReady(Exception):
    """No server of the source can take the read now (none answers, or each is behind)."""

    def __init__(self, why: str, behind: list[tuple[Probe, str]]) -> None:
        super().__init__(why)
        self.behind = behind


def probe(reader: ReaderView, index: int) -> Probe:
    """Connect to server ``index`` of the reader's source and read what choosing needs;
    ``OSError`` or ``pymysql`` errors when it does not answer.

    Every wait is bounded by the connect timeout, the greeting's and the answers' too:
    a server that hangs (stopped, or a host whose kernel still takes connections)
    takes the connection and never speaks, and unbounded, the probe waited on it
    for ever, and so never moved the read to a server that answers."""
    settings = reader.spec.servers[index]
    timeout = reader.connect_timeout
    connection = pymysql.connect(
        **settings.pymysql_kwargs(
            connect_timeout=timeout, read_timeout=timeout, write_timeout=timeout,
            autocommit=True,
        )
    )  # fmt: skip
    settings.remember_tls(connection)  # probes every 5 s need no new TLS context each
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@GLOBAL.read_only, @@version")
            read_only, version = cursor.fetchone()
            is_mariadb = "mariadb" in str(version).lower()
            variable = "gtid_binlog_state" if is_mariadb else "gtid_executed"
            cursor.execute(f"SELECT @@GLOBAL.{variable}")
            state = str(cursor.fetchone()[0] or "")
    finally:
        with contextlib.suppress(Exception):
            connection.close()
    logged = binlog_state(state) if is_mariadb else GtidSet.parse(state)
    return Probe(index, settings, not int(read_only), logged)


def binlog_state(text: str) -> dict[tuple[int, int], int]:
    """``@@gtid_binlog_state`` (``0-1-14,0-2-20``) as (domain, server_id) -> sequence."""
    found: dict[tuple[int, int], int] = {}
    for part in text.replace("\n", "").split(","):
        if part.strip():
            gtid = parse_gtid(part)
            if isinstance(gtid, MariadbGtid):
                found[(gtid.domain, gtid.server)] = gtid.sequence
    return found


def missing(
    committed: dict[int, MariadbGtid], state: dict[tuple[int, int], int]
) -> list[MariadbGtid]:
    """The newest committed GTID of each domain that the server's binlog lacks.

    Sequence numbers alone do not tell: a replica that never received ``0-1-308``
    logs ``0-2-308`` once promoted. So the GTID's own server must have reached it.
    """
    return [
        gtid
        for _, gtid in sorted(committed.items())
        if state.get((gtid.domain, gtid.server), -1) < gtid.sequence
    ]


def choose(reader: ReaderView, committed: BinlogPosition | None) -> Probe:
    """The server to read from now: every server is asked, the current one first.

    ``committed`` is where the read resumes (None: a read that has not started,
    which any server may take). Raises ``NoServerReady`` when none can take it.
    """
    servers = reader.spec.servers
    order = [(reader.server_index + step) % len(servers) for step in range(len(servers))]
    answered: list[Probe] = []
    failures: list[str] = []
    for index in order:
        try:
            answered.append(probe(reader, index))
        except (pymysql.err.MySQLError, OSError) as exc:
            failures.append(f"{servers[index].address}: {error_text(exc)}")
    if not answered:
        raise NoServerReady("no server answers (" + "; ".join(failures) + ")", [])
    if len({p.is_mariadb for p in answered}) > 1:
        raise ConfigError(
            f"source {reader.spec.name!r} lists MariaDB and MySQL servers, whose GTIDs "
            "cannot follow one another; list the servers of one replication topology",
            setting="dsn",
        )
    gtids = parse_committed(committed.gtid if committed is not None else None)
    behind: list[tuple[Probe, str]] = []
    for found in sorted(answered, key=lambda p: not p.writable):  # stable: order kept
        lacking = lacks(gtids, found.logged)
        if not lacking:
            return found
        behind.append((found, lacking))
    lacks_text = ", ".join(f"{p.settings.address} lacks {what}" for p, what in behind)
    raise NoServerReady(f"every server that answers is behind ({lacks_text})", behind)


def parse_committed(gtids: str | None) -> Committed | None:
    """A reader's committed GTIDs (a MariaDB state or a MySQL set) as ``lacks`` takes them."""
    if not gtids:
        return None
    return GtidSet.parse(gtids) if looks_like_set(gtids) else parse_gtid_state(gtids)


def lacks(committed: Committed | None, logged: Logged) -> str:
    """What of the reader's ``committed`` GTIDs a server that ``logged`` them lacks ('' if
    none). A MariaDB state asked of a MySQL server, or the reverse, lacks all of it."""
    if not committed:
        return ""
    if isinstance(committed, GtidSet):
        return str(committed.minus(logged if isinstance(logged, GtidSet) else GtidSet()))
    lacking = missing(committed, logged if isinstance(logged, dict) else {})
    return str(lacking[0]) if lacking else ""


def follow(
    reader: ReaderView, committed: BinlogPosition | None, why: str = ""
) -> BinlogPosition | None:
    """Point the reader at the server ``choose`` picks, after a fault (``why``) or at a
    read's start (``committed``: its start position, if one). Returns where to resume:
    ``committed`` as it is on the same server, by its GTID state alone on another.

    At the start, no server ready is an error at once: unreachable, or behind.
    """
    try:
        found = choose(reader, committed)
    except NoServerReady as exc:
        if why:
            raise
        if exc.behind and committed is not None:
            raise failover_error(reader, committed, str(exc)) from None
        raise SourceUnreachableError(
            f"source {reader.spec.name!r} at {reader.spec.redacted_dsn}: {exc}; "
            "check that a server runs and the DSN's hosts and ports",
            source=reader.spec.name,
        ) from None
    if found.index == reader.server_index:
        return committed
    before = reader.connection.address
    reader.use_server(found.index)
    log.warning(
        "source %s: reading %s instead of %s (%s)%s",
        reader.spec.name,
        found.settings.address,
        before,
        why or "it does not answer",
        f"; resuming after GTID {committed.gtid}" if committed is not None else "",
    )
    return by_gtid(reader, committed) if committed is not None else None


def follow_start(reader: ReaderView, start: str | BinlogPosition) -> str | BinlogPosition:
    """Choose the server a read of several servers starts on; its start, by GTID state
    when it has one (a file and offset may name another server's binlog)."""
    if not isinstance(start, BinlogPosition):
        follow(reader, None)
        return start
    at = by_gtid(reader, start) if start.gtid else start
    follow(reader, at)
    return at


def by_gtid(reader: ReaderView, position: BinlogPosition) -> BinlogPosition:
    """``position`` as a source of several servers resumes: by its GTID state alone."""
    if not position.gtid:
        raise PositionError(
            f"source {reader.spec.name!r} lists several servers and resumes by GTID, but "
            f"position {position} has none; start from a GTID state (0-1-14) or set "
            "(uuid:1-100), "
            "--from latest or --from snapshot",
            source=reader.spec.name,
            position=str(position),
        )
    return BinlogPosition("", 0, position.gtid)


def neutral_end(reader: ReaderView) -> BinlogPosition:
    """Where the stream of a source of several servers ends now: the GTID state of the
    server the reader asks, as a server-neutral boundary (``_positions``). A server
    that does not answer, or that turned read-only while another writable one holds
    everything, is left for the one ``choose`` picks."""
    why = ""
    for _ in range(len(reader.spec.servers) + 1):
        try:
            variable = "gtid_binlog_pos" if reader.server_info().is_mariadb else "gtid_executed"
            rows = reader._sql(f"SELECT @@GLOBAL.{variable}, @@GLOBAL.read_only",
                               doing="reading the GTID state")  # fmt: skip
        except SourceUnreachableError as exc:
            why = str(exc)
        else:
            state = str(rows[0][0]).replace("\n", "") if rows and rows[0][0] else None
            moved = better_server(reader, BinlogPosition("", 0, state)) if int(rows[0][1]) else None
            if moved is None:
                return neutral_boundary(state)
            why = moved
        try:
            follow(reader, None, why)
        except NoServerReady as exc:
            raise SourceUnreachableError(
                f"source {reader.spec.name!r} at {reader.spec.redacted_dsn}: {exc}",
                source=reader.spec.name,
            ) from None
    raise SourceUnreachableError(
        f"source {reader.spec.name!r} at {reader.spec.redacted_dsn}: no server kept answering "
        f"({why}); check that a server runs and the DSN's hosts and ports",
        source=reader.spec.name,
    )


def failover_error(reader: ReaderView, committed: BinlogPosition, why: str) -> PositionError:
    """No server of the source could take the read for ``reconnect_for`` seconds."""
    return PositionError(
        f"source {reader.spec.name!r}: no server can resume after GTID {committed.gtid}: {why}; "
        "wait for a replica to apply what it lacks and start the read again, or accept the "
        "loss: start from the server's position (--from latest) and backfill the tables "
        "(dbus fn backfill)",
        source=reader.spec.name,
        position=str(committed),
    )


def better_server(reader: ReaderView, committed: BinlogPosition) -> str | None:
    """Why the reader should move now, else None: its server turned read-only and
    another one, writable, holds every transaction the reader committed."""
    try:
        rows = reader._query("SELECT @@GLOBAL.read_only")
    except (pymysql.err.MySQLError, OSError):
        return None  # a server that does not answer is the replication connection's fault
    if not int(rows[0][0]):
        return None
    try:
        found = choose(reader, committed)
    except NoServerReady:
        return None
    if found.index == reader.server_index or not found.writable:
        return None
    return f"{reader.connection.address} is read-only and {found.settings.address} writable"
