"""The replication connection's events split natively (``dbus_native.split_events``)
against mysql-replication's: packets made here byte by byte, and one real binlog
read both ways."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from capture_support import execute

from dbus_fn import BinlogPosition
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.capture._events import (
    DELETE,
    GTID,
    HEARTBEAT,
    OTHER,
    PARTIAL_UPDATE,
    ROTATE,
    TABLE_MAP,
    UPDATE,
    WRITE,
    XID,
    events,
    library_events,
    native_events,
)
from dbus_fn.capture._native import SWITCH
from dbus_fn.capture._session import Progress, ReadSession

dbus_native = pytest.importorskip("dbus_native", reason="the native code is not built")
split = dbus_native.split_events

ERROR, END = 9, 10


def event(kind: int, body: bytes, *, server_id: int = 7, end: int = 1000, stamp: int = 1700000000,
          checksum: bool = True) -> bytes:  # fmt: skip
    """An event's packet payload: the OK byte, the header, ``body`` and a checksum."""
    size = 19 + len(body) + (4 if checksum else 0)
    header = struct.pack("<IBIIIH", stamp, kind, server_id, size, end, 0)
    return b"\x00" + header + body + (b"\xde\xad\xbe\xef" if checksum else b"")


def packets(*payloads: bytes) -> bytes:
    """Each payload behind its protocol header (one frame each: under 16 MiB)."""
    return b"".join(struct.pack("<I", len(p))[:3] + b"\x01" + p for p in payloads)


def split_all(buffer: bytes, checksum: bool = True, post_headers: bytes = b"") -> list[Any]:
    found, used, need = split(buffer, checksum, post_headers)
    assert (used, need) == (len(buffer), 0)
    return list(found)


TABLE_ID = (0x0102030405).to_bytes(6, "little")
ROWS = b"\xf8\x01\x00\x00\x00\x03abc"


def test_transaction_events_are_read_into_their_fields() -> None:
    gtid = struct.pack("<QIB", 42, 3, 0) + b"\x00" * 6
    mysql_gtid = b"\x01" + bytes(range(16)) + struct.pack("<Q", 9) + b"\x00" * 17
    rotate = struct.pack("<Q", 4) + b"mysql-bin.000007"
    write_v1 = TABLE_ID + b"\x01\x00" + b"\x03" + b"\x07" + ROWS
    update_v1 = TABLE_ID + b"\x01\x00" + b"\x03" + b"\x07" + b"\x05" + ROWS
    delete_v2 = TABLE_ID + b"\x01\x00" + b"\x05\x00" + b"\x01\xaa\xbb" + b"\x03" + b"\x07" + ROWS
    partial = TABLE_ID + b"\x01\x00" + b"\x02\x00" + b"\x03" + b"\x07" + b"\x06" + ROWS
    found = split_all(packets(
        event(162, gtid, server_id=11, end=500), event(33, mysql_gtid),
        event(19, TABLE_ID + b"\x00\x00rest-of-map"), event(23, write_v1),
        event(24, update_v1), event(32, delete_v2), event(39, partial),
        event(16, struct.pack("<Q", 77), end=900),
        event(4, rotate, stamp=0), event(27, b"mysql-bin.000007", stamp=0),
    ))  # fmt: skip
    head = (1700000000, 500, 19 + len(gtid) + 4)
    assert found[0] == (GTID, *head, "3-11-42", None, None, None)
    assert found[1][4] == "00010203-0405-0607-0809-0a0b0c0d0e0f:9"
    assert found[2][:5] == (TABLE_MAP, 1700000000, 1000, 19 + 19 + 4, 0x0102030405)
    assert found[2][5][0] == 0 and found[2][5][-4:] == b"\xde\xad\xbe\xef"  # the whole payload
    assert found[3][0] == WRITE and found[3][4:] == (0x0102030405, b"\x07", None, ROWS)
    assert found[4][0] == UPDATE and found[4][4:] == (0x0102030405, b"\x07", b"\x05", ROWS)
    assert found[5][0] == DELETE and found[5][4:] == (0x0102030405, b"\x07", None, ROWS)
    assert found[6][0] == PARTIAL_UPDATE and found[6][4:] == (0x0102030405, b"\x07", b"\x06", ROWS)
    assert found[7][:3] == (XID, 1700000000, 900)
    assert found[8][0] == ROTATE and found[8][1] == 0
    assert found[8][4:6] == ("mysql-bin.000007", 4)
    assert found[9][0] == HEARTBEAT and found[9][4] == "mysql-bin.000007"


def test_without_checksums_the_body_runs_to_the_events_end() -> None:
    write_v1 = TABLE_ID + b"\x01\x00" + b"\x03" + b"\x07" + ROWS
    (found,) = split_all(packets(event(23, write_v1, checksum=False)), checksum=False)
    assert found[7] == ROWS


def test_a_longer_declared_post_header_is_stepped_over() -> None:
    post_headers = bytearray([8] * 40)
    post_headers[23 - 1] = 10  # two bytes this reader does not know
    write_v1 = TABLE_ID + b"\x01\x00" + b"\xee\xee" + b"\x03" + b"\x07" + ROWS
    (found,) = split_all(packets(event(23, write_v1)), post_headers=bytes(post_headers))
    assert found[4:] == (0x0102030405, b"\x07", None, ROWS)
    post_headers[23 - 1] = 6  # shorter than any layout: mysql-replication's to refuse
    (found,) = split_all(packets(event(23, write_v1)), post_headers=bytes(post_headers))
    assert found[0] == OTHER


@pytest.mark.parametrize(
    "payload",
    [
        event(16, b"\x00" * 8)[:-6],  # shorter than its header's size
        event(162, b"\x00" * 5),  # a GTID cut short
        event(23, TABLE_ID + b"\x01\x00" + b"\xfc\x10"),  # its column count cut short
        event(23, TABLE_ID + b"\x01\x00" + b"\x20" + b"\x07"),  # its bitmap cut short
        event(4, struct.pack("<Q", 4) + b"\xff\xfe"),  # a file name that is not UTF-8
        event(2, b"a statement"),  # any event it does not read
    ],
    ids=["short", "gtid", "count", "bitmap", "name", "query"],
)
def test_an_event_it_does_not_read_is_handed_back_whole(payload: bytes) -> None:
    assert split_all(packets(payload)) == [(OTHER, payload)]


def test_error_end_and_other_packets() -> None:
    error = b"\xff" + struct.pack("<H", 1236) + b"#HY000could not find"
    end = b"\xfe\x00\x00\x02\x00"
    assert split_all(packets(error, end, b"\x01odd")) == [(ERROR, error), (END, end)]


def test_an_incomplete_packet_waits_for_the_bytes_it_needs() -> None:
    whole = packets(event(16, b"\x00" * 8), event(16, b"\x01" * 8))
    found, used, need = split(whole[:-5], True, b"")
    assert (len(found), used, need) == (1, len(whole) // 2, 5)
    found, used, need = split(whole[:2], True, b"")  # not even its length yet
    assert (len(found), used, need) == (0, 0, 0)


def test_a_payload_over_16_mib_comes_from_its_frames_together() -> None:
    body = TABLE_ID + b"\x01\x00" + b"\x01" + b"\x01"
    rows = b"r" * (0xFFFFFF + 100 - 20 - len(body) - 4)
    payload = event(23, body + rows)
    rest = payload[0xFFFFFF:]
    frames = b"\xff\xff\xff\x01" + payload[:0xFFFFFF] + packets(rest)
    found, used, need = split(frames[:-10], True, b"")
    assert (len(found), used, need) == (0, 0, 10)
    (found,) = split_all(frames)
    assert found[0] == WRITE and found[7] == rows


def _normalised(item: tuple[Any, ...]) -> tuple[Any, ...]:
    kind = item[0]
    if kind == TABLE_MAP:
        table = item[5]
        return (*item[:5], table.schema, table.table, [c.name for c in table.columns])
    if kind == OTHER:
        other = item[4]
        return (*item[:4], type(other).__name__, getattr(other, "query", None))
    return item


def _read(spec: SourceSpec, start: BinlogPosition, stop: BinlogPosition, native: bool) -> list[Any]:
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"), heartbeat=0.2)
    try:
        session = ReadSession(reader, reader.server_info(), Progress(start, 0), None, None, 0.0)
        stream = session.open_stream(start, 0.2)
        source = (native_events(stream, {}, split) if native else library_events(stream))
        found, file = [], start.file
        try:
            for item in source:
                if item[0] == ROTATE:
                    file = item[4]
                elif item[0] != HEARTBEAT:
                    found.append(_normalised(item))
                if (file, item[2]) >= (stop.file, stop.pos) and item[0] not in (ROTATE, HEARTBEAT):
                    return found
        finally:
            stream.close()
    finally:
        reader.close()
    raise AssertionError("the read ended before its stop")


@pytest.mark.integration
def test_a_real_binlog_reads_the_same_both_ways(fresh_database: Any, source: SourceSpec) -> None:
    connection = fresh_database.connect()
    reader = BinlogReader(source, replica_id=replica_id_for(f"test/{uuid.uuid4()}"))
    start = reader.master_position()
    execute(
        connection,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), b LONGBLOB, n BIGINT)",
        "INSERT INTO t VALUES (1, 'one', NULL, 1)",
        "INSERT INTO t VALUES (2, 'two', REPEAT('x', 70000), 2), (3, 'three', '', 3)",
        "BEGIN",
        "UPDATE t SET v = 'uno' WHERE id = 1",
        "DELETE FROM t WHERE id = 2",
        "COMMIT",
        "ALTER TABLE t ADD COLUMN w INT",
        "INSERT INTO t (id, v, w) VALUES (4, 'four', 4)",
    )
    stop = reader.master_position()
    reader.close()
    native = _read(source, start, stop, native=True)
    assert native == _read(source, start, stop, native=False)
    kinds = [item[0] for item in native]
    for kind in (GTID, TABLE_MAP, WRITE, UPDATE, DELETE, XID, OTHER):
        assert kind in kinds


def test_the_switch_reads_every_event_through_mysql_replication(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SWITCH, "0")
    assert events(object(), {}).__name__ == "library_events"  # type: ignore[attr-defined]
    monkeypatch.delenv(SWITCH)
    assert events(object(), {}).__name__ == "native_events"  # type: ignore[attr-defined]
