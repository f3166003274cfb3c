"""A table without a primary key: no subject, the table as partition (Kafka) key, so the
key stays small whatever the row holds, and events that still read back exactly."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbus_fn import Operation, RowChange, from_cloudevent, to_cloudevent, to_kafka_message
from dbus_fn.cloudevent import image_digest, image_digests, partition_key, row_digest
from dbus_fn.testing import row_change

TYPES = {"a": "int", "doc": "json"}
BIG = {"items": [{"n": i, "text": "x" * 100} for i in range(5000)]}  # about 600 kB


def keyless(op: Operation = Operation.INSERT, **images: Any) -> RowChange:
    before = images.get("before", {"a": 1, "doc": BIG})
    after = images.get("after", {"a": 2, "doc": BIG})
    return row_change(
        op,
        "shop.log",
        None if op in (Operation.INSERT, Operation.SNAPSHOT) else before,
        None if op is Operation.DELETE else after,
        primary_key=[],
        column_types=TYPES,
    )


def test_events_have_no_subject_and_the_table_as_partition_key() -> None:
    for op in Operation:
        change = keyless(op)
        event = to_cloudevent(change)
        assert event.get_subject() is None
        assert event.get_extension("partitionkey") == "shop.log"
        assert event.get_data()["key"] == []
        assert from_cloudevent(event) == change


def test_the_kafka_key_is_the_table_whatever_the_row_holds() -> None:
    for op in Operation:
        change = keyless(op)
        message = to_kafka_message(change)
        assert message.key == b"shop.log"
        assert len(message.value) > 500_000
        headers = dict(message.headers)
        assert "ce_subject" not in headers and headers["ce_partitionkey"] == b"shop.log"
        reference = to_kafka_message(to_cloudevent(change), mode="binary")
        assert (message.key, message.value) == (reference.key, reference.value)
        assert sorted(message.headers) == sorted(reference.headers)


def test_snapshot_rows_of_one_snapshot_have_ids_of_their_own() -> None:
    position = keyless(Operation.SNAPSHOT).position
    rows = [
        replace(keyless(Operation.SNAPSHOT, after={"a": n, "doc": None}), position=position)
        for n in range(3)
    ]
    ids = [to_cloudevent(r).get_id() for r in rows]
    assert len(set(ids)) == 3
    assert ids[0].endswith(":snapshot:" + row_digest(rows[0]))


def test_a_projection_may_drop_columns_of_a_keyless_table() -> None:
    change = keyless(Operation.UPDATE)
    projected = replace(change, before=None, after={"a": 2}, column_types={"a": "int"})
    assert to_kafka_message(projected).key == b"shop.log"
    assert to_cloudevent(projected).get_data()["after"] == {"a": 2}


def test_row_digests_name_images_by_their_json_form() -> None:
    change = keyless(Operation.UPDATE, before={"a": 1, "doc": None}, after={"a": 2, "doc": [1]})
    old, new = image_digests(change)
    assert old == image_digest({"doc": None, "a": 1}) and new == image_digest({"a": 2, "doc": [1]})
    assert row_digest(change) == new and len(new) == 40
    assert partition_key(change) == "shop.log"
