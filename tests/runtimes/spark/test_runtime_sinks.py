"""Sink helpers that need no server: document versions and index mappings."""

from __future__ import annotations

import itertools
import pickle
from dataclasses import replace
from decimal import Decimal

import pytest

from dbus_fn.capture import TRANSACTION_END
from dbus_fn.events import BinlogPosition
from dbus_spark.sinks.elasticsearch import field_mapping, index_mapping
from dbus_spark.state.records import document_version


def test_versions_follow_binlog_order_across_files_offsets_and_rows() -> None:
    positions = [
        (BinlogPosition("mariadb-bin.000001", 4), 0),
        (BinlogPosition("mariadb-bin.000001", 4), 1),
        (BinlogPosition("mariadb-bin.000001", 900), 0),
        (BinlogPosition("mariadb-bin.000001", (1 << 30) - 1), 8191),
        (BinlogPosition("mariadb-bin.000002", 4), 0),
        (BinlogPosition("mariadb-bin.999999", 4), 0),
    ]
    versions = [document_version(p, r) for p, r in positions]
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)
    assert all(0 < v < 1 << 63 for v in versions)
    for a, b in itertools.pairwise(versions):
        assert a < b


def test_versions_of_server_neutral_positions_follow_the_transactions_then_their_changes() -> None:
    # A source of several servers: transaction 41's rows, its end, then 42's.
    end = TRANSACTION_END
    positions = [
        (BinlogPosition("gtid.41", 0, "0-1-41"), 0),
        (BinlogPosition("gtid.41", 0, "0-1-41"), 1),
        (BinlogPosition("gtid.41", 2, "0-1-41"), 0),
        (BinlogPosition("gtid.41", end - 1, "0-1-41"), 0),
        (BinlogPosition("gtid.41", end, "0-1-41"), 0),
        (BinlogPosition("gtid.42", 0, "0-2-42"), 0),
        (BinlogPosition(f"gtid.{(1 << 38) - 1}", end, "0-2-1"), 0),
    ]
    versions = [document_version(p, r) for p, r in positions]
    assert all(a < b for a, b in itertools.pairwise(versions)) and versions[-1] < 1 << 63
    with pytest.raises(ValueError, match="version range"):
        document_version(BinlogPosition("gtid.41", end - 1, "0-1-41"), 2)
    with pytest.raises(ValueError, match="version range"):
        document_version(BinlogPosition(f"gtid.{1 << 38}", 0, "0-1-1"), 0)


@pytest.mark.parametrize(
    ("file", "pos", "row"),
    [("mariadb-bin", 4, 0), ("mariadb-bin.000001", 1 << 30, 0), ("mariadb-bin.000001", 4, 8192)],
)
def test_positions_outside_the_version_range_are_refused(file: str, pos: int, row: int) -> None:
    with pytest.raises(ValueError, match="binlog"):
        document_version(BinlogPosition(file, pos), row)


@pytest.mark.parametrize(
    ("column_type", "es_type"),
    [
        ("int", "long"),
        ("int unsigned", "long"),
        ("bigint unsigned", "keyword"),
        ("decimal(65,30)", "keyword"),
        ("datetime(6)", "date"),
        ("timestamp(6)", "date"),
        ("date", "date"),
        ("varchar(255)", "text"),
        ("longblob", "binary"),
        ("json", "object"),
        ("enum('a','b')", "keyword"),
    ],
)
def test_column_types_map_to_elasticsearch_types(column_type: str, es_type: str) -> None:
    mapping = field_mapping(column_type)
    assert mapping is not None
    assert mapping["type"] == es_type


def test_index_mapping_covers_the_fields_present_and_leaves_others_dynamic() -> None:
    mapping = index_mapping({"id": 1, "extra": "x"}, {"id": "bigint", "gone": "text"})
    assert mapping == {"dynamic": True, "properties": {"id": {"type": "long"}}}


def test_an_index_action_is_the_row_keyed_by_its_primary_key_and_versioned_by_position() -> None:
    from dbus_fn.testing import delete, insert
    from dbus_spark.stage.documents import index_action

    change = insert("shop.orders", id=7, status="paid", total=Decimal("12.50"))
    action = index_action(change, "orders", dead_letter="orders.dead")
    assert action.op == "index"
    assert action.doc_id == "7"
    assert action.document == {"id": 7, "status": "paid", "total": "12.50"}
    assert action.column_types["total"].startswith("decimal")
    assert action.version == document_version(change.position, change.row_index)
    assert action.dead_letter == "orders.dead"
    assert pickle.loads(action.change) == change

    gone = index_action(delete("shop.orders", id=7, status="paid"), "orders")
    assert gone.op == "delete"
    assert gone.document is None
    assert gone.doc_id == "7"

    composite = replace(change, primary_key=("id", "status"))
    assert index_action(composite, "orders").doc_id == '[7,"paid"]'
