"""Dead letters: the original event, where it was read, who failed, and why."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from cloudevents_spec import spec_problems
from event_samples import assert_same_change, row_change, transaction_commit

from dbus_fn import (
    EventFormatError,
    from_cloudevent,
    from_kafka_message,
    item_from_cloudevent,
    to_cloudevent,
    to_kafka_message,
)
from dbus_fn.deadletter import capture_dead_letter, dead_letter_event, original_from_dead_letter
from dbus_fn.events import BinlogPosition, Operation, UndecodedRows
from dbus_fn.json_format import event_from_json, event_to_json


def _failing_projection(row: dict[str, object]) -> None:
    try:
        int(str(row["vc"]))
    except ValueError as exc:
        raise RuntimeError("projection could not parse 'vc'") from exc


def _error() -> RuntimeError:
    try:
        _failing_projection({"vc": "abc"})
    except RuntimeError as exc:
        return exc
    raise AssertionError("the projection was expected to fail")


def test_dead_letter_carries_original_position_function_and_error() -> None:
    change = row_change()
    when = datetime(2024, 6, 1, tzinfo=UTC)
    event = dead_letter_event(
        change, function="shop.fns:drop_pii", error=_error(), stage="projection", time=when
    )
    assert event.get_type() == "io.dbus.deadletter"
    assert event.get_id() == (
        "1:mysql-bin.000042:123456789:3:deadletter:shop.fns:drop_pii:projection"
    )
    assert event.get_source() == "/mysql/shop-primary/shop/every_type"
    assert event.get_subject() == to_cloudevent(change).get_subject()
    assert event.get_time() == when
    assert event.get_extension("partitionkey") == "[18446744073709551615]"
    assert event.get_extension("dbusfunction") == "shop.fns:drop_pii"
    assert event.get_extension("dbusstage") == "projection"
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["function"] == "shop.fns:drop_pii" and data["stage"] == "projection"
    assert data["error"]["type"] == "RuntimeError"
    assert data["error"]["message"] == "projection could not parse 'vc'"
    assert "_failing_projection" in data["error"]["traceback"]
    assert data["error"]["cause"] == {
        "type": "ValueError", "message": "invalid literal for int() with base 10: 'abc'"}
    assert data["position"] == {"server_id": "1", "file": "mysql-bin.000042",
                                "pos": 123456789, "gtid": "0-1-77", "row_index": 3}
    assert data["original_error"] is None
    assert spec_problems(json.loads(event_to_json(event))) == []


def test_the_original_comes_back_losslessly_through_kafka_and_json() -> None:
    change = row_change()
    dead = dead_letter_event(change, function="f", error=_error(), stage="filter")
    for mode in ("binary", "structured"):
        message = to_kafka_message(dead, mode=mode)  # type: ignore[arg-type]
        assert message.key == b"[18446744073709551615]"
        again = from_kafka_message(message.key, message.value, message.headers)
        assert_same_change(from_cloudevent(original_from_dead_letter(again)), change)
    again = event_from_json(event_to_json(dead))
    assert_same_change(from_cloudevent(original_from_dead_letter(again)), change)


def test_dead_letter_id_is_deterministic_per_function_and_stage() -> None:
    change = row_change()
    one = dead_letter_event(change, function="f", error="boom", stage="route")
    two = dead_letter_event(change, function="f", error="boom", stage="route")
    other = dead_letter_event(change, function="g", error="boom", stage="route")
    assert one.get_id() == two.get_id() != other.get_id()


def test_a_prepared_message_and_traceback_are_taken_as_given() -> None:
    event = dead_letter_event(
        to_cloudevent(transaction_commit()), function="f", error="returned a list",
        stage="route", error_type="FunctionError", traceback="fns.py:3 in f",
    )
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["error"] == {"type": "FunctionError", "message": "returned a list",
                             "traceback": "fns.py:3 in f", "cause": None}
    assert data["position"]["pos"] == 123457000 and data["position"]["row_index"] is None
    assert item_from_cloudevent(original_from_dead_letter(event)) == transaction_commit()


def test_a_change_without_an_event_form_is_still_dead_lettered() -> None:
    broken = row_change(column_types={**row_change().column_types, "tiny": "sketch(2)"})
    event = dead_letter_event(broken, function="f", error=ValueError("x"), stage="filter")
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["original"] is None
    assert "sketch" in data["original_error"]
    assert data["position"]["pos"] == 123456789
    assert event.get_id() == "1:mysql-bin.000042:123456789:3:deadletter:f:filter"
    with pytest.raises(EventFormatError, match="sketch"):
        original_from_dead_letter(event)


def test_huge_error_messages_are_clipped() -> None:
    event = dead_letter_event(row_change(), function="f", error=ValueError("x" * 100_000),
                              stage="projection")
    data = event.get_data()
    assert isinstance(data, dict)
    assert len(data["error"]["message"]) < 5000
    assert data["error"]["message"].endswith("more characters)")


def test_original_from_an_ordinary_event_is_refused() -> None:
    with pytest.raises(EventFormatError, match="carries no original event"):
        original_from_dead_letter(to_cloudevent(row_change()))


def _undecoded(images: bytes = b"\x01\x02undecodable") -> UndecodedRows:
    return UndecodedRows(
        "shop-primary", "shop", "orders", Operation.UPDATE,
        BinlogPosition("binlog.000007", 4242, "3e11fa47-71ca-11e1-9e33-c80aa9429562:77"),
        datetime(2024, 6, 1, tzinfo=UTC), "1", 2, "UnappliedDiff",
        "REPLACE at $.a: the before image lacks that member", images, "txn-9",
    )  # fmt: skip


def test_rows_the_capture_could_not_decode_are_a_dead_letter_by_position() -> None:
    event = capture_dead_letter(_undecoded())
    assert event.get_type() == "io.dbus.deadletter"
    assert event.get_id() == "1:binlog.000007:4242:2:deadletter:capture"
    assert event.get_id() == capture_dead_letter(_undecoded()).get_id(), "deterministic"
    assert event.get_source() == "/mysql/shop-primary/shop/orders"
    assert event.get_extension("dbusfunction") == "binlog://shop-primary/shop.orders"
    assert event.get_extension("dbusstage") == "capture"
    assert event.get_extension("binlogfile") == "binlog.000007"
    assert event.get_extension("binlogpos") == "4242"
    assert event.get_extension("partitionkey") == "shop.orders"
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["stage"] == "capture" and data["original"] is None
    assert data["error"]["type"] == "UnappliedDiff"
    assert data["error"]["message"] == "REPLACE at $.a: the before image lacks that member"
    assert data["position"] == {
        "server_id": "1", "file": "binlog.000007", "pos": 4242,
        "gtid": "3e11fa47-71ca-11e1-9e33-c80aa9429562:77", "row_index": 2,
    }  # fmt: skip
    assert data["rows"] == {"op": "update", "images": b"\x01\x02undecodable".hex()}
    assert spec_problems(json.loads(event_to_json(event))) == []


def test_the_rows_of_a_huge_undecoded_event_are_clipped() -> None:
    data = capture_dead_letter(_undecoded(b"\xab" * 100_000)).get_data()
    assert isinstance(data, dict)
    assert len(data["rows"]["images"]) < 5000
    assert data["rows"]["images"].startswith("abab")
    assert "more characters" in data["rows"]["images"]
