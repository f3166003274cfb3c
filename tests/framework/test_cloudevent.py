"""Capture items to CloudEvents and back: lossless, deterministic, spec-conformant."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from cloudevents_spec import spec_problems
from event_samples import (
    COMMIT_TIME,
    POSITION,
    ROW,
    assert_same_change,
    assert_same_row,
    row_change,
    schema_change,
    transaction_commit,
)

from dbus_fn import (
    CloudEvent,
    ColumnValueError,
    EventFormatError,
    Operation,
    RowChange,
    UnsupportedColumnTypeError,
    event_from_json,
    event_id,
    event_to_json,
    from_cloudevent,
    item_from_cloudevent,
    primary_key_text,
    to_cloudevent,
)
from dbus_fn.cloudevent import EXTENSIONS, key_json, new_event


def structured(event: CloudEvent) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(event_to_json(event))
    return parsed


@pytest.mark.parametrize("op", list(Operation))
def test_row_change_round_trips_losslessly_for_every_column_type(op: Operation) -> None:
    change = row_change(op)
    assert_same_change(from_cloudevent(to_cloudevent(change)), change)


@pytest.mark.parametrize("op", list(Operation))
def test_row_change_survives_the_json_format(op: Operation) -> None:
    change = row_change(op)
    event = event_from_json(event_to_json(to_cloudevent(change)))
    assert_same_change(from_cloudevent(event), change)


def test_events_and_changes_pickle() -> None:
    change = row_change()
    assert_same_change(pickle.loads(pickle.dumps(change)), change)
    event = pickle.loads(pickle.dumps(to_cloudevent(change)))
    assert_same_change(from_cloudevent(event), change)


def test_row_event_attributes() -> None:
    event = to_cloudevent(row_change(Operation.UPDATE))
    assert event.get_id() == "1:mysql-bin.000042:123456789:3"
    assert event.get_source() == "/mysql/shop-primary/shop/every_type"
    assert event.get_type() == "io.dbus.row.updated"
    assert event.get_specversion() == "1.0"
    assert event.get_subject() == "[18446744073709551615]"
    assert event.get_time() == COMMIT_TIME
    assert event.get_datacontenttype() == "application/json"
    assert {name: event.get_extension(name) for name in EXTENSIONS} == {
        "binlogfile": "mysql-bin.000042",
        "binlogpos": "123456789",
        "gtid": "0-1-77",
        "transactionid": "0-1-77",
        "partitionkey": "[18446744073709551615]",
        "schemaversion": "7",
        "serverid": "1",
        "rowindex": "3",
        "dbussource": "shop-primary",
    }
    data = event.get_data()
    assert isinstance(data, dict)
    assert set(data) == {"before", "after", "key", "columns"}
    assert data["key"] == ["id"]
    assert data["columns"]["dec"] == "decimal(65,30)"


@pytest.mark.parametrize(
    ("op", "suffix"),
    [(Operation.INSERT, "inserted"), (Operation.UPDATE, "updated"), (Operation.DELETE, "deleted")],
)
def test_type_names_the_operation_under_the_prefix(op: Operation, suffix: str) -> None:
    assert to_cloudevent(row_change(op), type_prefix="com.example").get_type() == (
        f"com.example.row.{suffix}"
    )


def test_id_is_deterministic_and_distinguishes_rows_and_servers() -> None:
    first, replay = to_cloudevent(row_change()), to_cloudevent(row_change())
    assert first.get_id() == replay.get_id()
    other_row = to_cloudevent(row_change(row_index=4))
    other_server = to_cloudevent(row_change(server_id="2"))
    other_pos = to_cloudevent(row_change(position=dataclasses.replace(POSITION, pos=5)))
    ids = {e.get_id() for e in (first, other_row, other_server, other_pos)}
    assert len(ids) == 4
    assert event_id(row_change()) == first.get_id()


@pytest.mark.parametrize(
    "item",
    [row_change(Operation.INSERT), row_change(Operation.DELETE), schema_change(),
     schema_change(None), transaction_commit(),
     row_change(primary_key=(), transaction_id=None, position=dataclasses.replace(
         POSITION, gtid=None))],
    ids=["insert", "delete", "ddl", "ddl-no-table", "commit", "no-key-no-gtid"],
)
def test_events_meet_the_cloudevents_spec(item: Any) -> None:
    assert spec_problems(structured(to_cloudevent(item))) == []


def test_spec_checker_catches_violations() -> None:
    bad = {"id": "", "source": "a b", "type": "t", "specversion": "0.3", "Bad_Name": "x",
           "toolongextensionname12": "x", "time": "yesterday", "n": 2**40}
    assert len(spec_problems(bad)) == 7


def test_composite_and_text_keys_have_stable_subjects() -> None:
    change = row_change(primary_key=("c", "d", "e"))
    assert primary_key_text(change) == '["abc","1000-01-01","it\'s"]'
    assert to_cloudevent(change).get_subject() == primary_key_text(change)
    emoji = row_change(primary_key=("vc",))
    assert primary_key_text(emoji) == json.dumps([emoji.after["vc"]], ensure_ascii=False)  # type: ignore[index]
    empty = row_change(primary_key=("txt",))
    assert to_cloudevent(empty).get_subject() == '[""]'  # an empty key is still a subject


def test_a_table_without_a_primary_key_has_no_subject_and_its_table_as_partition_key() -> None:
    event = to_cloudevent(row_change(primary_key=()))
    assert event.get_subject() is None
    assert event.get_extension("partitionkey") == "shop.every_type"
    assert event.get_data()["key"] == []
    assert from_cloudevent(event).primary_key == ()


def test_source_segments_are_percent_encoded_and_decoded() -> None:
    change = row_change(source="eu west", database="shöp", table="a/b$c")
    event = to_cloudevent(change)
    assert event.get_source() == "/mysql/eu%20west/sh%C3%B6p/a%2Fb%24c"
    assert_same_change(from_cloudevent(event), change)


def test_schema_change_and_transaction_commit_round_trip() -> None:
    for item in (schema_change(), schema_change(None), transaction_commit()):
        event = to_cloudevent(item)
        assert item_from_cloudevent(event) == item
        assert item_from_cloudevent(event_from_json(event_to_json(event))) == item
    ddl = to_cloudevent(schema_change())
    assert ddl.get_type() == "io.dbus.schema.changed"
    assert ddl.get_id() == "1:mysql-bin.000042:123456789:schema"
    assert ddl.get_source() == "/mysql/shop-primary/shop/orders"
    commit = to_cloudevent(transaction_commit())
    assert commit.get_type() == "io.dbus.transaction.committed"
    assert commit.get_id() == "1:mysql-bin.000042:123457000:commit"
    assert commit.get_source() == "/mysql/shop-primary"


def test_from_cloudevent_refuses_marker_events_with_a_hint() -> None:
    with pytest.raises(EventFormatError, match="item_from_cloudevent"):
        from_cloudevent(to_cloudevent(schema_change()))


def test_undeclared_columns_get_inferred_types_that_read_back() -> None:
    change = RowChange(
        source="s", database="d", table="t", op=Operation.UPDATE,
        before={"id": 1, "note": None}, after={"id": 1, "note": "x", "at": COMMIT_TIME},
        primary_key=("id",), position=POSITION, commit_time=COMMIT_TIME, server_id="9",
    )
    event = to_cloudevent(change)
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["columns"] == {"id": "bigint", "note": "longtext", "at": "timestamp(6)"}
    back = from_cloudevent(event)
    assert back.after == change.after and back.before == change.before


def test_naive_commit_time_is_read_as_utc() -> None:
    event = to_cloudevent(row_change(commit_time=datetime(2024, 1, 1, 12, 0)))
    assert event.get_time() == datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def test_values_that_no_longer_fit_their_declared_type_are_retyped() -> None:
    # What a projection does: new values under the captured column types.
    after = {**ROW, "tiny": 300, "dec": 1.5, "vc": None, "new": "added"}
    change = row_change(before=None, after=after)
    event = to_cloudevent(change)
    data = event.get_data()
    assert isinstance(data, dict)
    assert data["columns"]["tiny"] == "bigint" and data["columns"]["dec"] == "double"
    assert data["columns"]["vc"] == "varchar(255)" and data["columns"]["new"] == "longtext"
    back = from_cloudevent(event)
    assert_same_row(back.after, change.after)
    assert back.before is None and back.op is Operation.UPDATE


def test_images_that_no_type_holds_name_the_column() -> None:
    disagree = row_change(before={**ROW, "dec": Decimal("1.5")}, after={**ROW, "dec": 1.5})
    with pytest.raises(ColumnValueError, match="'dec'") as caught:
        to_cloudevent(disagree)
    assert caught.value.column == "dec"
    odd = row_change(after={**ROW, "vc": 1j})
    with pytest.raises(ColumnValueError, match=r"'vc'.*complex") as caught:
        to_cloudevent(odd)
    assert "1j" not in str(caught.value)  # values may be personal data


def test_to_cloudevent_rejects_unknown_column_types() -> None:
    change = row_change(column_types={**row_change().column_types, "vc": "sketch(3)"})
    with pytest.raises(UnsupportedColumnTypeError, match=r"'vc'.*sketch"):
        to_cloudevent(change)


def test_to_cloudevent_rejects_a_key_column_missing_from_the_row() -> None:
    with pytest.raises(EventFormatError, match="'nope'"):
        to_cloudevent(row_change(primary_key=("nope",)))


def _mutated(change: RowChange, *, data: Any = None, drop: tuple[str, ...] = (),
             **attributes: Any) -> CloudEvent:
    event = to_cloudevent(change)
    attrs = {k: v for k, v in event.get_attributes().items() if k not in drop}
    attrs.update(attributes)
    return new_event(attrs, event.get_data() if data is None else data)


def test_from_cloudevent_lists_every_problem() -> None:
    event = _mutated(row_change(), drop=("binlogfile", "rowindex"), binlogpos="1²")
    with pytest.raises(EventFormatError) as caught:
        from_cloudevent(event)
    problems = caught.value.problems
    assert any("binlogfile" in p for p in problems)
    assert any("rowindex" in p for p in problems)
    assert any("binlogpos" in p and "decimal number" in p for p in problems)
    assert caught.value.event_id == "1:mysql-bin.000042:123456789:3"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("change", "kwargs", "expected"),
    [
        (row_change(), {"type": "io.dbus.row.exploded"}, "type must be one of"),
        (row_change(), {"source": "/postgres/x"}, "source must be"),
        (row_change(), {"dbussource": "other"}, "differs from extension"),
        (row_change(), {"data": "not json"}, "data must be a JSON object"),
        (row_change(Operation.DELETE), {"data": {"before": None, "after": {"id": 1},
                                                 "key": ["id"], "columns": {"id": "int"}}},
         "needs data.before"),
        (row_change(Operation.INSERT), {"data": {"before": None, "after": None,
                                                 "key": ["id"], "columns": {"id": "int"}}},
         "needs data.after"),
        (row_change(), {"data": {"before": None, "after": {"id": "one"}, "key": ["id"],
                                 "columns": {"id": "int"}}}, "expected an int"),
        (row_change(), {"data": {"before": None, "after": {"id": 1}, "key": ["id"],
                                 "columns": {}}}, "no type in data.columns"),
        (row_change(), {"data": {"before": None, "after": {"id": 1}, "key": "id",
                                 "columns": {"id": "int"}}}, "data.key must be a list"),
        (row_change(), {"data": {"after": {"id": 1}}}, "no 'columns' member"),
        (row_change(Operation.INSERT), {"data": {"before": None, "after": {"g": "AA=="},
                                                 "key": [], "columns": {"g": "sketch(2)"}}},
         "sketch"),
        (transaction_commit(), {"data": {"rows": -1}}, "non-negative"),
        (schema_change(), {"data": {"database": 1, "table": None, "statement": "x"}},
         "data.database"),
    ],
)
def test_bad_events_give_clear_errors(change: Any, kwargs: dict[str, Any], expected: str) -> None:
    data = kwargs.pop("data", None)
    event = _mutated(change, data=data, **kwargs)
    with pytest.raises(EventFormatError, match=re.escape(expected)):
        item_from_cloudevent(event)


def test_type_prefix_is_checked_when_given() -> None:
    event = to_cloudevent(row_change(), type_prefix="com.acme")
    assert from_cloudevent(event, type_prefix="com.acme").op is Operation.UPDATE
    with pytest.raises(EventFormatError, match=re.escape("io.dbus.row.inserted")):
        from_cloudevent(event, type_prefix="io.dbus")


def test_new_event_never_invents_required_attributes_nor_touches_the_input() -> None:
    attributes = {"source": "/x", "type": "t", "specversion": "1.0"}
    with pytest.raises(EventFormatError, match="'id'"):
        new_event(attributes)
    good = {**attributes, "id": "1"}
    new_event(good)
    assert good == {**attributes, "id": "1"}  # no time or other defaults written back


def test_new_event_reports_all_spec_violations() -> None:
    with pytest.raises(EventFormatError) as caught:
        new_event({"id": "", "source": "/x", "type": "t", "specversion": "1.0",
                   "Bad-Name": "1", "time": datetime(2024, 1, 1)})
    text = " ".join(caught.value.problems)
    assert "id" in text and "Bad-Name" in text and "timezone" in text


@pytest.mark.parametrize(
    "values",
    [[42], [-7], [0], [2**70], [True], [None], ["a@b.c"], ["ü ☃"], [7, "2024-01-01"], [1.5], []],
)
def test_key_text_is_the_compact_json_array_of_the_key_values(values: list[Any]) -> None:
    assert key_json(values) == json.dumps(values, ensure_ascii=False, separators=(",", ":"))
