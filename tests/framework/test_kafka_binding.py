"""CloudEvents over Kafka: binary and structured mode, keys, and bad messages."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

import pytest
from event_samples import ROW, assert_same_change, row_change, schema_change, transaction_commit

from dbus_fn import (
    BinlogPosition,
    EventFormatError,
    KafkaMessage,
    Operation,
    RowChange,
    from_cloudevent,
    from_kafka_message,
    item_from_cloudevent,
    to_cloudevent,
    to_kafka_message,
)
from dbus_fn.kafka_binding import change_from_kafka_message

Mode = Literal["binary", "structured"]
MODES: list[Mode] = ["binary", "structured"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", list(Operation))
def test_change_to_kafka_and_back_is_lossless(mode: Mode, op: Operation) -> None:
    change = row_change(op)
    message = to_kafka_message(to_cloudevent(change), mode=mode)
    event = from_kafka_message(message.key, message.value, message.headers)
    assert_same_change(from_cloudevent(event), change)


@pytest.mark.parametrize("mode", MODES)
def test_both_modes_give_the_same_event(mode: Mode) -> None:
    change = row_change()
    original = to_cloudevent(change)
    message = to_kafka_message(change, mode=mode)  # a change converts on the way
    event = from_kafka_message(message.key, message.value, message.headers)
    assert event.get_attributes() == original.get_attributes()
    assert event.get_data() == original.get_data()


def test_key_is_the_primary_key_so_per_row_order_holds() -> None:
    first = to_kafka_message(row_change(Operation.INSERT))
    later = to_kafka_message(row_change(Operation.DELETE, row_index=9))
    assert first.key == later.key == b"[18446744073709551615]"
    assert to_kafka_message(row_change(primary_key=())).key == b"shop.every_type"
    assert to_kafka_message(schema_change()).key is None


def test_binary_mode_headers_follow_the_kafka_binding() -> None:
    message = to_kafka_message(row_change(), mode="binary")
    headers = dict(message.headers)
    assert len(headers) == len(message.headers)
    assert headers["content-type"] == b"application/json"
    assert headers["ce_specversion"] == b"1.0"
    assert headers["ce_id"] == b"1:mysql-bin.000042:123456789:3"
    assert headers["ce_type"] == b"io.dbus.row.updated"
    assert headers["ce_time"] == b"2024-05-06T07:08:09Z"
    assert headers["ce_binlogpos"] == b"123456789"
    assert all(isinstance(v, bytes) for v in headers.values())
    assert set(json.loads(message.value)) == {"before", "after", "key", "columns"}


def test_structured_mode_puts_the_whole_event_in_the_value() -> None:
    message = to_kafka_message(row_change(), mode="structured")
    assert message.headers == [("content-type", b"application/cloudevents+json")]
    body = json.loads(message.value)
    assert body["id"] == "1:mysql-bin.000042:123456789:3"
    assert body["data"]["key"] == ["id"]


def test_kafka_message_is_a_frozen_value() -> None:
    message = to_kafka_message(row_change())
    assert isinstance(message, KafkaMessage)
    with pytest.raises(AttributeError):
        message.key = b"x"  # type: ignore[misc]


@pytest.mark.parametrize("mode", MODES)
def test_markers_travel_too(mode: Mode) -> None:
    for item in (schema_change(), transaction_commit()):
        message = to_kafka_message(item, mode=mode)
        event = from_kafka_message(message.key, message.value, message.headers)
        assert item_from_cloudevent(event) == item


def test_headers_may_come_as_a_mapping_or_with_str_values_and_foreign_headers() -> None:
    message = to_kafka_message(row_change())
    headers = {name: value.decode() for name, value in message.headers}
    headers["traceparent"] = "00-abc"
    event = from_kafka_message(message.key, message.value, headers)
    assert from_cloudevent(event) == row_change()


def test_missing_required_header_is_reported_not_invented() -> None:
    message = to_kafka_message(row_change())
    headers = [(n, v) for n, v in message.headers if n not in ("ce_id", "ce_specversion")]
    with pytest.raises(EventFormatError) as caught:
        from_kafka_message(message.key, message.value, headers)
    assert any("'id'" in p for p in caught.value.problems)
    assert any("'specversion'" in p for p in caught.value.problems)


@pytest.mark.parametrize(
    ("value", "headers", "expected"),
    [
        (b"{}", [("content-type", b"text/plain")], "neither ce_ headers"),
        (b"{}", None, "neither ce_ headers"),
        (None, [("content-type", b"application/cloudevents+json")], "tombstone"),
        (b"{not json", [("content-type", b"application/cloudevents+json")], "Expecting"),
        (b"[1, 2]", [("content-type", b"application/cloudevents+json")], "Kafka message"),
        (
            b"{not json",
            [
                ("ce_id", b"1"),
                ("ce_source", b"/s"),
                ("ce_type", b"t"),
                ("ce_specversion", b"1.0"),
                ("content-type", b"application/json"),
            ],
            "not the JSON its content-type says",
        ),
        (b"{}", [("ce_id", b"1"), ("ce_id", b"2")], "more than once"),
        (b"{}", [("ce_id", None)], "has no value"),
        (
            b"{}",
            [
                ("ce_id", b"1"),
                ("ce_source", b"/s"),
                ("ce_type", b"t"),
                ("ce_specversion", b"1.0"),
                ("ce_time", b"not a time"),
            ],
            "Kafka message",
        ),
    ],
)
def test_bad_messages_give_clear_errors(
    value: bytes | None, headers: list[tuple[str, bytes | None]] | None, expected: str
) -> None:
    with pytest.raises(EventFormatError, match=expected):
        from_kafka_message(None, value, headers)


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="binary"):
        to_kafka_message(row_change(), mode="avro")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_commit_time_keeps_microseconds_and_its_offset(mode: Mode) -> None:
    moment = datetime(2024, 3, 31, 2, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    change = row_change(commit_time=moment)
    message = to_kafka_message(change, mode=mode)
    back = from_cloudevent(from_kafka_message(message.key, message.value, message.headers))
    assert back.commit_time == moment and back.commit_time.utcoffset() == timedelta(hours=2)


@pytest.mark.parametrize("mode", MODES)
def test_a_row_over_one_megabyte_travels_whole(mode: Mode) -> None:
    blob = bytes(range(256)) * 8192  # 2 MiB
    change = row_change(after={**ROW, "lb": blob, "long_txt": "ä" * 1_500_000})
    message = to_kafka_message(change, mode=mode)
    assert len(message.value) > 4_000_000
    back = from_cloudevent(from_kafka_message(message.key, message.value, message.headers))
    assert back.after is not None and back.after["lb"] == blob
    assert_same_change(back, change)


def test_undecodable_header_or_key_is_an_event_format_error() -> None:
    message = to_kafka_message(row_change())
    headers = [(n, b"\xff\xfe" if n == "ce_subject" else v) for n, v in message.headers]
    with pytest.raises(EventFormatError, match="utf-8"):
        from_kafka_message(message.key, message.value, headers)
    with pytest.raises(EventFormatError, match="utf-8"):
        from_kafka_message(b"\xff", message.value, message.headers)


@pytest.mark.parametrize(
    "item",
    [
        *(row_change(op) for op in Operation),
        row_change(Operation.INSERT, primary_key=()),
        row_change(Operation.UPDATE, transaction_id="0-1-77"),
        schema_change(),
        schema_change(None),
        transaction_commit(),
    ],
    ids=lambda item: type(item).__name__ + getattr(item, "op", ""),
)
def test_the_fast_binary_path_writes_what_the_cloudevents_binding_writes(item: object) -> None:
    fast = to_kafka_message(item, mode="binary")  # type: ignore[arg-type]
    event = to_cloudevent(item)  # type: ignore[arg-type]
    reference = to_kafka_message(event, mode="binary")
    assert fast.key == reference.key
    assert fast.value == reference.value
    assert dict(fast.headers) == dict(reference.headers)
    assert len(fast.headers) == len(reference.headers)


def _assert_fast_equals_reference(change: RowChange) -> KafkaMessage:
    fast = to_kafka_message(change)
    reference = to_kafka_message(to_cloudevent(change), mode="binary")
    assert (fast.key, fast.value) == (reference.key, reference.value)
    assert dict(fast.headers) == dict(reference.headers)
    assert len(fast.headers) == len(reference.headers)
    return fast


def test_the_fast_path_shares_nothing_it_should_not_between_rows() -> None:
    """Rows of one table and of several transactions, encoded one after another (the
    fast path caches what a shape and a transaction share), each equal to its reference."""
    changes = [
        row_change(
            op,
            position=BinlogPosition(file, pos, gtid),
            row_index=index,
            transaction_id=gtid,
            commit_time=datetime(2026, 1, 1, second=pos % 60, tzinfo=UTC),
            after=None if op is Operation.DELETE else {**ROW, "id": pos * 10 + index},
        )
        for file, pos, gtid in [
            ("b.000001", 4, "0-1-1"),
            ("b.000001", 9, None),
            ("b.000002", 4, "0-1-3"),
        ]
        for index, op in enumerate(Operation)
    ]
    for change in changes * 2:
        _assert_fast_equals_reference(change)


def test_one_row_transactions_sharing_a_second_a_file_or_an_instant_stay_apart() -> None:
    """One-row transactions one after another (what the fast path keeps per binlog
    file and per commit second): the same second, the same instant written in another
    zone or without one, another server or source on the same file; each equal to
    its reference."""
    second = datetime(2026, 1, 1, 12, 0, 5, tzinfo=UTC)
    times = [
        second,
        second,
        second.astimezone(timezone(timedelta(hours=2))),
        second.replace(tzinfo=None),
        second,
        second + timedelta(microseconds=1),
    ]
    changes = [
        row_change(
            Operation.INSERT,
            source=source,
            server_id=server,
            position=BinlogPosition("b.000009", 100 + seq, f"0-{server}-{seq}"),
            transaction_id=f"0-{server}-{seq}",
            commit_time=moment,
            row_index=0,
            after={**ROW, "id": seq},
        )
        for seq, moment in enumerate(times)
        for source, server in [("shop-primary", "1"), ("shop-primary", "2"), ("other", "1")]
    ]
    for change in changes:
        _assert_fast_equals_reference(change)


@pytest.mark.parametrize(
    "after",
    [
        {**ROW, "dec": 1.5},  # a projection turned the DECIMAL into a float: inferred type
        {**ROW, "note": "a column declared nowhere"},
    ],
    ids=["value-does-not-fit", "undeclared-column"],
)
def test_rows_the_fast_path_cannot_take_go_the_general_way(after: dict[str, object]) -> None:
    change = row_change(Operation.INSERT, after=after)
    fast = _assert_fast_equals_reference(change)
    assert json.loads(fast.value)["columns"] != dict(change.column_types)


@pytest.mark.parametrize(
    ("key_type", "key"), [("decimal(10,0)", 5), ("bigint", 5), ("bigint", True)],
    ids=["int-in-a-decimal-key", "int-key", "bool-in-an-int-key"],
)  # fmt: skip
def test_a_key_is_written_in_its_column_s_json_form(key_type: str, key: object) -> None:
    """The key text comes from the key column's JSON form: an int in a DECIMAL key
    column is the decimal's string, as in the row's image."""
    change = replace(
        row_change(Operation.INSERT, after={**ROW, "id": key}),
        column_types={**row_change(Operation.INSERT).column_types, "id": key_type},
    )
    fast = _assert_fast_equals_reference(change)
    written = json.loads(fast.value)["after"]["id"]
    assert fast.key == json.dumps([written], separators=(",", ":")).encode()


def test_a_row_without_its_key_column_is_an_error_on_the_fast_path_too() -> None:
    change = row_change(Operation.INSERT, after={k: v for k, v in ROW.items() if k != "id"})
    with pytest.raises(EventFormatError, match="primary key"):
        to_kafka_message(change)


SUMMER = datetime(2024, 3, 31, 2, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
READ_BACK = [
    *(row_change(op) for op in Operation),
    row_change(Operation.INSERT, primary_key=()),
    row_change(Operation.UPDATE, transaction_id="0-1-77"),
    row_change(commit_time=SUMMER),
    row_change(after={**ROW, "lb": bytes(range(256)) * 64, "long_txt": "ä" * 5000}),
    schema_change(),
    schema_change(None),
    transaction_commit(),
]


@pytest.mark.parametrize("item", READ_BACK, ids=lambda i: type(i).__name__ + getattr(i, "op", ""))
@pytest.mark.parametrize("mode", MODES)
def test_the_fast_read_gives_what_the_cloudevents_binding_gives(item: object, mode: Mode) -> None:
    message = to_kafka_message(item, mode=mode)  # type: ignore[arg-type]
    full = item_from_cloudevent(from_kafka_message(message.key, message.value, message.headers))
    fast = change_from_kafka_message(message.key, message.value, message.headers)
    if isinstance(full, RowChange):
        assert isinstance(fast, RowChange)
        assert_same_change(fast, full)
        assert fast.commit_time == full.commit_time
        assert fast.commit_time.utcoffset() == full.commit_time.utcoffset()
    else:
        assert fast == full
    renamed = change_from_kafka_message(message.key, message.value, message.headers,
                                        source="dc2")  # fmt: skip
    assert renamed == replace(full, source="dc2")


def test_the_fast_read_takes_headers_in_any_case_and_order_the_full_way() -> None:
    message = to_kafka_message(row_change())
    shouted = [(name.upper(), value) for name, value in reversed(message.headers)]
    full = item_from_cloudevent(from_kafka_message(message.key, message.value, shouted))
    assert change_from_kafka_message(message.key, message.value, shouted) == full


@pytest.mark.parametrize(
    ("value", "headers"),
    [
        (b"{}", [("content-type", b"text/plain")]),
        (None, [("content-type", b"application/cloudevents+json")]),
        (b"{not json", [("ce_id", b"1"), ("ce_source", b"/s"), ("ce_type", b"t"),
                        ("ce_specversion", b"1.0"), ("ce_time", b"2024-01-01T00:00:00Z"),
                        ("content-type", b"application/json")]),
        (b"{}", [("ce_id", b"1"), ("ce_id", b"2")]),
        (b'{"before": null}', [("ce_id", b"1"), ("ce_source", b"/mysql/s/d/t"),
                               ("ce_type", b"io.dbus.row.inserted"), ("ce_specversion", b"1.0"),
                               ("ce_time", b"2024-01-01T00:00:00Z"),
                               ("content-type", b"application/json")]),
    ],
)  # fmt: skip
def test_the_fast_read_refuses_what_the_full_way_refuses(
    value: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    with pytest.raises(EventFormatError) as full:
        item_from_cloudevent(from_kafka_message(None, value, headers))
    with pytest.raises(EventFormatError) as fast:
        change_from_kafka_message(None, value, headers)
    assert str(fast.value) == str(full.value)
