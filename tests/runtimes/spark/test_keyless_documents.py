"""Elasticsearch documents of a table without a primary key are named by the digest
of the row as captured: an insert indexes it, a delete deletes it, an update deletes
the old image's document and indexes the new one's; the _id is 40 characters, however
large the row."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dbus_fn import Operation
from dbus_fn.cloudevent import image_digests
from dbus_fn.testing import row_change
from dbus_spark.stage.documents import IndexActions
from dbus_spark.state.records import IndexAction

TYPES = {"a": "int", "doc": "json"}
OLD = {"a": 1, "doc": {"text": "x" * 600_000}}
NEW = {"a": 2, "doc": {"text": "x" * 600_000}}


def writes(op: Operation, before: Any, after: Any) -> list[IndexAction]:
    change = row_change(op, "shop.log", before, after, primary_key=[], column_types=TYPES)
    return list(IndexActions().writes(change, "log"))


def test_insert_update_and_delete_name_documents_by_their_image() -> None:
    old, new = image_digests(row_change("update", "shop.log", OLD, NEW, column_types=TYPES))
    assert old is not None and new is not None and len(old) == len(new) == 40
    [insert] = writes(Operation.INSERT, None, OLD)
    assert (insert.op, insert.doc_id, insert.document) == ("index", old, OLD)
    retire, index = writes(Operation.UPDATE, OLD, NEW)
    assert (retire.op, retire.doc_id) == ("delete", old)
    assert (index.op, index.doc_id, index.document) == ("index", new, NEW)
    assert retire.version == index.version
    [delete] = writes(Operation.DELETE, NEW, None)
    assert (delete.op, delete.doc_id) == ("delete", new)


def test_a_projected_row_keeps_the_name_of_the_row_as_captured() -> None:
    captured = row_change("update", "shop.log", OLD, NEW, primary_key=[], column_types=TYPES)
    projected = replace(captured, before=None, after={"a": 2}, column_types={"a": "int"})
    retire, index = IndexActions().writes(projected, "log", original=captured)
    assert (retire.doc_id, index.doc_id) == image_digests(captured)
    assert index.document == {"a": 2}
