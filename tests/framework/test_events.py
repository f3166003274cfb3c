"""Row changes and their read-only, picklable rows."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest
from event_samples import ROW, assert_same_row, row_change

from dbus_fn import DbusError, Operation, ReadOnlyRowError, Row, RowChange


@pytest.mark.parametrize(
    "mutate",
    [
        lambda row: row.__setitem__("id", 2),
        lambda row: row.__delitem__("id"),
        lambda row: row.update({"id": 2}),
        lambda row: row.pop("id"),
        lambda row: row.popitem(),
        lambda row: row.clear(),
        lambda row: row.setdefault("new", 1),
        lambda row: setattr(row, "_columns", {}),
    ],
    ids=["set", "del", "update", "pop", "popitem", "clear", "setdefault", "setattr"],
)
def test_rows_refuse_every_mutation(mutate: Any) -> None:
    change = row_change()
    assert change.after is not None
    with pytest.raises(ReadOnlyRowError, match=r"read-only.*return a new dict") as caught:
        mutate(change.after)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, DbusError)
    assert change.after == ROW


def test_row_is_a_mapping_equal_to_its_dict() -> None:
    row = Row({"a": 1, "b": None})
    plain = {"a": 1, "b": None}
    assert row == plain and plain == row  # both operand orders
    assert row != {"a": 1} and row == Row({"a": 1, "b": None}) and row != [("a", 1)]
    assert list(row.items()) == [("a", 1), ("b", None)] and list(row.values()) == [1, None]
    assert list(row) == ["a", "b"] and len(row) == 2 and "a" in row and "z" not in row
    assert row.get("z", 5) == 5
    assert dict(row) == row.to_dict() == {"a": 1, "b": None}
    assert repr(row) == "Row({'a': 1, 'b': None})"


def test_merging_gives_a_new_dict_and_leaves_the_row_alone() -> None:
    row = Row({"a": 1, "b": 2})
    merged = row | {"b": 3}
    assert merged == {"a": 1, "b": 3} and type(merged) is dict
    assert {"b": 3, "c": 4} | row == {"b": 2, "c": 4, "a": 1}
    mine = row.to_dict()
    mine["a"] = 9
    assert row["a"] == 1
    local = row
    local |= {"a": 5}  # rebinds the name to a new dict, the row is untouched
    assert row == {"a": 1, "b": 2} and local == {"a": 5, "b": 2}


def test_row_copies_its_input_and_freezes_sets() -> None:
    source = {"a": 1, "s": {"x"}}
    row = Row(source)
    source["a"] = 2
    assert row["a"] == 1
    assert row["s"] == frozenset({"x"}) and isinstance(row["s"], frozenset)


def test_rows_and_changes_pickle_and_copy() -> None:
    row = Row(ROW)
    for clone in (pickle.loads(pickle.dumps(row)), copy.copy(row), copy.deepcopy(row)):
        assert isinstance(clone, Row)
        assert_same_row(clone, row)
    change = row_change()
    again = pickle.loads(pickle.dumps(change, protocol=pickle.HIGHEST_PROTOCOL))
    assert again == change and isinstance(again.after, Row)


def test_row_change_takes_plain_dicts_and_stays_frozen() -> None:
    change = row_change(Operation.INSERT)
    assert change.before is None and isinstance(change.after, Row)
    assert change.primary_key == ("id",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        change.after = {}  # type: ignore[misc]
    replaced = dataclasses.replace(change, after={"id": 1})
    assert isinstance(replaced.after, Row) and replaced.key == (1,)


def test_row_change_accepts_list_keys_and_operation_strings() -> None:
    change = row_change(primary_key=["id"], op="delete", after=None)
    assert change.primary_key == ("id",)
    assert change.op is Operation.DELETE and change.row is change.before


def test_column_types_are_a_private_copy() -> None:
    types = {"id": "int"}
    change = RowChange(
        source="s", database="d", table="t", op=Operation.INSERT, before=None,
        after={"id": 1}, primary_key=("id",), position=row_change().position,
        commit_time=row_change().commit_time, server_id="1", column_types=types,
    )
    types["id"] = "text"
    assert change.column_types == {"id": "int"}
