"""MySQL GTID sets (``capture._gtid_sets``): every form the server prints or takes,
set arithmetic, a transaction's place, the binary forms of a dump request and a
PREVIOUS_GTIDS event, tagged GTID events, and the positions that carry them."""

from __future__ import annotations

import pytest

from dbus_fn import BinlogPosition
from dbus_fn.capture._gtid_sets import GtidSet, looks_like_set, tagged_gtid
from dbus_fn.capture._positions import StreamGtids, neutral_boundary, parse_position
from dbus_fn.errors import ConfigError

A = "dab33275-ee9b-11f1-9b39-02fc00000001"
B = "0aaaaaaa-ee9b-11f1-9b39-02fc00000002"


def test_a_set_parses_as_the_server_prints_it_and_prints_canonically() -> None:
    printed = f"{A.upper()}:1-358:360:ETL:1-2,\n{B}:5-7:1-2, {A}:359"
    found = GtidSet.parse(printed)
    assert str(found) == f"{B}:1-2:5-7,{A}:1-360:etl:1-2"
    assert len(found) == 2 + 3 + 360 + 2
    assert GtidSet.parse(str(found)) == found
    assert GtidSet.parse("") == GtidSet() and not GtidSet.parse(None)
    assert looks_like_set(printed) and not looks_like_set("0-1-14") and not looks_like_set(None)


@pytest.mark.parametrize(
    "bad", [f"{A}", f"{A}:0", f"{A}:5-3", f"{A}:1-x", "nouuid:1-3", f"{A}:9tag:1", f"{A}::1"]
)
def test_a_malformed_set_is_one_line_naming_the_part_and_the_form(bad: str) -> None:
    with pytest.raises(ConfigError) as refused:
        GtidSet.parse(bad)
    message = str(refused.value)
    assert "\n" not in message and "uuid:interval" in message


def test_adding_a_commit_extends_its_interval_and_fills_gaps() -> None:
    found = GtidSet.parse(f"{A}:1-3:5")
    found.add_gtid(f"{A}:4")
    assert str(found) == f"{A}:1-5"
    found.add_gtid(f"{A}:9")
    found.add_gtid(f"{A}:etl:1")
    found.add_gtid(f"{A}:2")  # already there
    assert str(found) == f"{A}:1-5:9:etl:1"
    assert f"{A}:9" in found and f"{A}:8" not in found and f"{A}:etl:1" in found
    assert f"{A}:other:1" not in found


def test_minus_and_subset_compare_per_uuid_and_tag() -> None:
    have = GtidSet.parse(f"{A}:1-100:etl:1-3,{B}:1-5")
    replica = GtidSet.parse(f"{A}:1-40:50-100,{B}:1-5")
    assert str(have.minus(replica)) == f"{A}:41-49:etl:1-3"
    assert replica.issubset(have) and not have.issubset(replica)
    assert not have.minus(have)


@pytest.mark.parametrize("text", [f"{A}:1-3:7,{B}:2", f"{A}:1-3:etl:1-2,{B}:4"])
def test_the_binary_form_round_trips_untagged_and_tagged(text: str) -> None:
    found = GtidSet.parse(text)
    data = found.encode()
    tagged = "etl" in text
    # The first 8 bytes: the count, or MySQL 8.3's format byte at both ends around it.
    assert data[:8] == ((1 << 56 | 3 << 8 | 1) if tagged else 2).to_bytes(8, "little")
    assert GtidSet.decode(data + b"\x01\x02\x03\x04") == found  # a checksum after it


def test_a_tagged_gtid_event_names_its_transaction() -> None:
    # The body of a GTID_TAGGED_LOG_EVENT MySQL 9.7 wrote for `SET gtid_next =
    # 'AUTOMATIC:etl'`, its checksum included.
    body = bytes.fromhex(
        "0270000000026903cd0264eab9036d0222c5036d027204f103000000020404060665746c08280a2c0c7f"
        "0164b795b261061069041283120b14b4bcc8"
    )
    assert tagged_gtid(body) == f"{A}:etl:1"
    with pytest.raises(ValueError, match="tagged GTID event dbus cannot read"):
        tagged_gtid(body[:20])


def test_a_read_keeps_the_set_it_passed_once_it_knows_it() -> None:
    unknown = StreamGtids(None, mysql=True)
    unknown.commit(f"{A}:7")
    assert unknown.text() is None, "a set that missed what came before is never carried"
    unknown.learn(GtidSet.parse(f"{A}:1-7"))
    unknown.commit(f"{A}:8")
    assert unknown.text() == f"{A}:1-8"
    assert unknown.total() == 8 and unknown.total_with(f"{A}:9") == 9
    assert unknown.total_with(f"{A}:8") == 8
    unknown.learn(GtidSet.parse(f"{A}:1-3"))  # a later file's start changes nothing
    assert unknown.text() == f"{A}:1-8"
    mariadb = StreamGtids("0-1-14", mysql=False)
    mariadb.commit("0-1-15")
    assert (mariadb.text(), mariadb.total(), mariadb.total_with("1-2-3")) == ("0-1-15", 15, 18)


def test_positions_take_a_mysql_set_bare_or_after_a_file() -> None:
    assert parse_position(f"{A.upper()}:1-5,\n{B}:2") == BinlogPosition("", 0, f"{B}:2,{A}:1-5")
    at = parse_position(f"binlog.000004:3761@{A}:1-358:etl:1")
    assert at == BinlogPosition("binlog.000004", 3761, f"{A}:1-358:etl:1")
    for bad in (f"{A}:0", f"binlog.000004:4@{A}:x"):
        with pytest.raises(ConfigError):
            parse_position(bad)
    # A server-neutral boundary's place: how many transactions the set holds.
    assert neutral_boundary(f"{A}:1-358:etl:1-2").file == "gtid.360"
