"""The events of one replication connection, as the read loop (``_session``) takes them.

Each event is a tuple ``(kind, timestamp, end, size, a, b, c, d)``: the kind below,
the event header's timestamp, where the event ends (the next event's position)
and its size in the binlog, then what the kind holds:

- ``HEARTBEAT``: ``a`` the binlog file the server is at;
- ``ROTATE``: ``a`` the next file, ``b`` the position in it;
- ``TABLE_MAP``: ``a`` the table id, ``b`` mysql-replication's ``TableMapEvent``
  (only for an id the connection has not mapped yet: a table id names one table
  definition until the server restarts, so a map seen once is not read again);
- ``WRITE``, ``UPDATE``, ``DELETE``: ``a`` the table id, ``b`` the columns present,
  ``c`` the columns present after (``UPDATE``), ``d`` the rows' images;
- ``PARTIAL_UPDATE``: as ``UPDATE``, MySQL's ``PARTIAL_UPDATE_ROWS_EVENT``, whose
  after images may hold a JSON column as diffs of its before image (``_json_diff``);
- ``GTID``: ``a`` the transaction's GTID (MySQL's tagged ones included);
- ``PREVIOUS``: ``a`` the ``GtidSet`` executed before this binlog file (MySQL's
  ``PREVIOUS_GTIDS_LOG_EVENT``, at each file's start);
- ``XID``: a transaction's commit;
- ``OTHER``: ``a`` mysql-replication's event (a statement, an XA prepare...).

A compressed transaction (MySQL's ``TRANSACTION_PAYLOAD_EVENT``) is handed on as the
events it holds (``payload_events``).

``native_events`` reads the connection's bytes itself and splits them natively
(``dbus_native.split_events``) into those tuples, leaving every other event to
mysql-replication; a one-row transaction's four events cost a fraction of what
the library's event objects do. ``library_events`` takes every event from
mysql-replication, the reference: used when the native code is not built or is
switched off (``DBUS_NATIVE_DECODE=0``).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

import pymysql
from pymysql.protocol import MysqlPacket
from pymysqlreplication.event import (
    FormatDescriptionEvent,
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from dbus_fn._native import native
from dbus_fn.capture._gtid_sets import GtidSet, tagged_gtid
from dbus_fn.capture._native import SWITCH
from dbus_fn.capture._wire import field_number
from dbus_fn.errors import SourceError

OTHER, HEARTBEAT, ROTATE, TABLE_MAP, WRITE, UPDATE, DELETE, GTID, XID, ERROR, END = range(11)
PARTIAL_UPDATE = 11
"""The kinds of event (``ERROR`` and ``END`` stay in this module)."""
PREVIOUS = 12
"""The kind of a ``PREVIOUS_GTIDS`` event (never split natively: it is read here)."""

PREVIOUS_GTIDS, TAGGED_GTID = 35, 42
"""MySQL's event types read here from their bytes: mysql-replication reads only the
untagged form of the first and does not know the second (MySQL 8.3+)."""
_BODY = 20
"""Where an event's body starts in its packet: the OK byte, then the 19-byte header."""
# The library's reader of PREVIOUS_GTIDS fails on the tagged form; as an event it
# does not know, its bytes reach ``as_tuple`` whole.
BinLogPacketWrapper._BinLogPacketWrapper__event_map[PREVIOUS_GTIDS] = NotImplementedEvent

Event = tuple[Any, ...]

READ_SIZE = 1 << 16
"""Bytes asked of the connection at a time when the next packet's size is not known."""

_ROWS = {
    WriteRowsEvent: WRITE,
    UpdateRowsEvent: UPDATE,
    DeleteRowsEvent: DELETE,
    PartialUpdateRowsEvent: PARTIAL_UPDATE,
}


class StreamLost(Exception):
    """The replication connection dropped; raised instead of the library's reconnect."""


def _private(stream: Any, name: str) -> Any:
    return getattr(stream, f"_BinLogStreamReader__{name}")


def as_tuple(event: Any) -> Event:
    """A mysql-replication event as the read loop's tuple."""
    packet = event.packet
    head = (event.timestamp, packet.log_pos, packet.event_size)
    kind = type(event)
    if kind is HeartbeatLogEvent:
        return (HEARTBEAT, *head, event.ident, None, None, None)
    if kind is RotateEvent:
        return (ROTATE, *head, event.next_binlog, event.position, None, None)
    if kind is TableMapEvent:
        return (TABLE_MAP, *head, event.table_id, event, None, None)
    rows = _ROWS.get(kind)
    if rows is not None:
        data = packet.read(event.event_size - packet.read_bytes)
        after = event.columns_present_bitmap2 if rows in (UPDATE, PARTIAL_UPDATE) else None
        return (rows, *head, event.table_id, event.columns_present_bitmap, after, data)
    if kind is MariadbGtidEvent or kind is GtidEvent:
        return (GTID, *head, event.gtid, None, None, None)
    if kind is XidEvent:
        return (XID, *head, None, None, None, None)
    if kind is NotImplementedEvent and event.event_type in (PREVIOUS_GTIDS, TAGGED_GTID):
        body = packet.packet.get_all_data()[_BODY:]  # what follows is read past
        if event.event_type == PREVIOUS_GTIDS:
            return (PREVIOUS, *head, GtidSet.decode(body), None, None, None)
        return (GTID, *head, tagged_gtid(body), None, None, None)
    return (OTHER, *head, event, None, None, None)


def _fetched(stream: Any) -> Event:
    """The library's next event, as a tuple."""
    try:
        event = stream.fetchone()
    except pymysql.err.InterfaceError as exc:  # the socket is already gone
        raise StreamLost(str(exc)) from exc
    if event is None:
        raise StreamLost("the server ended the binlog stream")
    return as_tuple(event)


def library_events(stream: Any) -> Iterator[Event]:
    """Every event of ``stream`` (a ``BinLogStreamReader``) read by mysql-replication.

    It skips a table map whose id it has read already (``freeze_schema``); the read
    loop forgets them at every new file (``_session``)."""
    while True:
        event = _fetched(stream)
        if event[0] == OTHER and event[4].event_type == PAYLOAD:
            yield from payload_events(stream, event[4])
        else:
            yield event


def _library_event(stream: Any, payload: bytes, checksum: bool | None = None) -> Any | None:
    """mysql-replication's event of one packet's ``payload``, with what its own read
    does on the way (a format description's post-header lengths, a table's map);
    None for an event it would not hand out. ``checksum``: whether the event ends
    with one (None: as the connection's events do)."""
    settings = [
        _private(stream, name)
        for name in (
            "use_checksum", "allowed_events_in_packet", "only_tables", "ignored_tables",
            "only_schemas", "ignored_schemas", "freeze_schema", "ignore_decode_errors",
            "verify_checksum", "optional_meta_data", "enable_logging",
            "use_column_name_cache", "post_header_lengths",
        )
    ]  # fmt: skip
    if checksum is not None:
        settings[0] = checksum
    wrapped = BinLogPacketWrapper(
        MysqlPacket(payload, stream._stream_connection.encoding),
        stream.table_map,
        stream._ctl_connection,
        stream.mysql_version,
        *settings,
    )
    event = wrapped.event
    if event is None:
        return None
    if type(event) is FormatDescriptionEvent:
        stream.mysql_version = event.mysql_version
        stream._BinLogStreamReader__post_header_lengths = event.post_header_len
    elif type(event) is TableMapEvent:
        stream.table_map[event.table_id] = event.get_table()
    if type(event) not in _private(stream, "allowed_events"):
        return None
    return event


def native_events(
    stream: Any, tables: MutableMapping[int, Any], split: Any
) -> Iterator[Event]:
    """Every event of ``stream``, its bytes read here and split by ``split``
    (``dbus_native.split_events``); the events it leaves whole go to mysql-replication.

    The first event comes through the library, which connects (the replica's
    registration, the checksum setting, the dump request); what it has buffered of
    the connection is read on from the same buffer."""
    yield _fetched(stream)
    connection = stream._stream_connection
    incoming = connection._rfile
    checksum = bool(_private(stream, "use_checksum"))
    pending = b""
    need = 0
    lengths: Any = None
    post_headers = b""
    while True:
        try:
            data = incoming.read(need) if need else incoming.read1(READ_SIZE)
        except OSError as exc:
            connection._force_close()
            raise StreamLost(f"lost the binlog connection ({exc})") from exc
        if not data:
            connection._force_close()
            raise StreamLost("the server closed the binlog connection")
        pending = pending + data if pending else data
        current = _private(stream, "post_header_lengths")
        if current is not lengths:  # a format description event set them
            lengths, post_headers = current, bytes(current or ())
        events, used, need = split(pending, checksum, post_headers)
        pending = pending[used:]
        for event in events:
            kind = event[0]
            if kind == TABLE_MAP:
                if event[4] in tables:
                    continue
                table_map = _library_event(stream, event[5])
                if table_map is None:
                    continue
                event = as_tuple(table_map)
            elif kind == OTHER:
                other = _library_event(stream, event[1])
                if other is None:
                    continue
                if other.event_type == PAYLOAD:
                    yield from payload_events(stream, other)
                    continue
                event = as_tuple(other)
            elif kind == ERROR:
                pymysql.err.raise_mysql_exception(event[1])
            elif kind == END:
                raise StreamLost("the server ended the binlog stream")
            yield event


PAYLOAD = 40
"""MySQL's ``TRANSACTION_PAYLOAD_EVENT``: a transaction's events, compressed
(``binlog_transaction_compression``)."""
_PAYLOAD_FIELDS_END, _COMPRESSION = 0, 2
_ZSTD, _NONE = 0, 255


def payload_events(stream: Any, event: Any) -> Iterator[Event]:
    """The events a compressed transaction holds, as the read loop's tuples: each
    ends where the payload ends (inside it, MySQL gives them no position of their
    own), so the transaction's commit is a boundary a read may resume from."""
    raw = event.packet.packet.get_all_data()  # its OK byte, header, body, checksum
    checksum = bool(_private(stream, "use_checksum"))
    body = raw[20 : len(raw) - 4 if checksum else len(raw)]
    fields: dict[int, int] = {}
    offset = 0
    while True:
        kind, offset = field_number(body, offset)
        if kind == _PAYLOAD_FIELDS_END:
            break
        length, offset = field_number(body, offset)
        fields[kind] = field_number(body, offset)[0]
        offset += length
    compression = fields.get(_COMPRESSION, _ZSTD)
    if compression == _ZSTD:
        import zstandard  # only a server that compresses needs it

        data = zstandard.ZstdDecompressor().decompressobj().decompress(body[offset:])
    elif compression == _NONE:
        data = body[offset:]
    else:
        raise SourceError(
            f"the binlog holds a compressed transaction ending at {event.packet.log_pos} in "
            f"a compression dbus does not know (type {compression}); set "
            "binlog_transaction_compression=OFF on the server, or read it with a newer dbus"
        )
    end = event.packet.log_pos.to_bytes(4, "little")
    at = 0
    while at < len(data):
        size = int.from_bytes(data[at + 9 : at + 13], "little")
        inner = b"\0" + data[at : at + 13] + end + data[at + 17 : at + size]
        at += size
        found = _library_event(stream, inner, checksum=False)
        if found is not None:
            yield as_tuple(found)


def events(stream: Any, tables: MutableMapping[int, Any]) -> Iterator[Event]:
    """The events of ``stream``: natively split when the native code is built and
    on, else each through mysql-replication."""
    module = native(SWITCH)
    split = getattr(module, "split_events", None)
    if split is None:
        return library_events(stream)
    return native_events(stream, tables, split)


__all__ = [
    "DELETE",
    "GTID",
    "HEARTBEAT",
    "OTHER",
    "PARTIAL_UPDATE",
    "PREVIOUS",
    "ROTATE",
    "TABLE_MAP",
    "UPDATE",
    "WRITE",
    "XID",
    "StreamLost",
    "as_tuple",
    "events",
    "library_events",
    "native_events",
]
