from __future__ import annotations

from pathlib import Path

import pytest
from fn_modules import make_module

from dbus_fn.emulator import Emulator, read_event_file
from dbus_fn.errors import EventFormatError
from dbus_fn.events import TransactionCommit
from dbus_fn.json_format import event_to_json, write_jsonl
from dbus_fn.registry import deployment_from_module
from dbus_fn.testing import delete, insert, row_change, update

SOURCE = """
import dbus_fn as fn

@fn.filter(tables="shop.users")
def real_users(event) -> bool:
    return not event.row["email"].endswith("@example.test")

@fn.projection(tables="shop.users")
def hide_email(event) -> dict:
    if event.row["email"] == "boom":
        raise ValueError("cannot hide")
    return {**event.row, "email": "***"}
"""


@pytest.fixture
def emulator(tmp_path: Path) -> Emulator:
    module = make_module(tmp_path, SOURCE)
    deployment = deployment_from_module(
        module, name="users", default_route="kafka://users", dead_letter_route="kafka://users.dlq"
    )
    return Emulator(deployment)


def test_records_for_a_jsonl_file(tmp_path: Path, emulator: Emulator) -> None:
    events = tmp_path / "events.jsonl"
    first = insert("shop.users", id=1, email="ann@shop.test")
    commit = TransactionCommit(
        source="test",
        position=first.position,
        commit_time=first.commit_time,
        server_id=first.server_id,
    )
    write_jsonl(
        events,
        [
            first,
            commit,
            update("shop.users", {"id": 1, "email": "ann@shop.test"}, email="ann@new.test"),
            insert("shop.users", id=2, email="bot@example.test"),
            insert("shop.users", id=3, email="boom"),
            delete("shop.users", id=1, email="ann@new.test"),
        ],
    )
    records = list(emulator.run_file(events))
    report = emulator.close()
    assert [str(r.destination) for r in records] == [
        "kafka://users",
        "kafka://users",
        "kafka://users.dlq",
        "kafka://users",
    ]
    inserted, updated, dead, deleted = records
    assert inserted.event.get_data()["after"] == {"id": 1, "email": "***"}  # type: ignore[index]
    # The old image of an update did not go through the projection: not delivered.
    assert updated.event.get_data()["before"] is None  # type: ignore[index]
    assert deleted.event.get_data()["before"] == {"id": 1, "email": "***"}  # type: ignore[index]
    assert dead.dead_letter and dead.event.get_type() == "io.dbus.deadletter"
    data = dead.event.get_data()
    assert isinstance(data, dict)
    assert data["function"].endswith(":hide_email") and data["stage"] == "projection"
    assert "raised ValueError: cannot hide" in data["error"]["message"]
    assert data["original"]["data"]["after"]["email"] == "boom"
    assert dead.to_json()["error"] == dead.error
    assert (report.events, report.markers, report.deliveries) == (5, 1, 3)
    assert (report.filtered, report.dead_letters) == (1, 1)
    assert report.summary() == (
        "5 row events, 3 deliveries, 1 filtered, 1 dead-lettered, "
        "1 transaction/schema markers passed by"
    )
    assert report.stats is not None and report.stats.user_errors == 1


def test_missing_events_file(tmp_path: Path, emulator: Emulator) -> None:
    with pytest.raises(EventFormatError, match="no such events file; expected JSONL"):
        list(emulator.run_file(tmp_path / "none.jsonl"))


def test_malformed_line_names_file_and_line(tmp_path: Path, emulator: Emulator) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(event_to_json(insert("shop.users", id=1, email="a@b.c")) + b"\n{oops\n")
    with pytest.raises(EventFormatError, match=r"events\.jsonl:2 is not valid JSON"):
        list(emulator.run_file(events))


def test_single_event_file(tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    path.write_bytes(event_to_json(insert("shop.users", id=1, email="a@b.c")))
    assert read_event_file(path).get_type() == "io.dbus.row.inserted"
    with pytest.raises(EventFormatError, match="cannot read the event file"):
        read_event_file(tmp_path / "missing.json")


def test_projected_columns_keep_or_lose_their_types(tmp_path: Path) -> None:
    module = make_module(
        tmp_path,
        """
import dbus_fn as fn

@fn.projection(tables="shop.products")
def reshape(event) -> dict:
    row = event.row
    if row["id"] == 2:
        return {"id": 2, "odd": object()}
    return {"id": row["id"], "email": "masked", "tags": sorted(row["tags"]), "note": None}
""",
    )
    emulator = Emulator(deployment_from_module(module, default_route="es://products"))
    types = {"id": "bigint", "email": "varchar(9)", "tags": "set('a','b')", "note": "text"}
    good = row_change(
        "insert",
        "shop.products",
        None,
        {"id": 1, "email": "a@b.c", "tags": frozenset({"b", "a"}), "note": "x"},
        column_types=types,
    )
    (record,) = emulator.run_change(good)
    data = record.event.get_data()
    assert isinstance(data, dict)
    assert data["after"] == {"id": 1, "email": "masked", "tags": ["a", "b"], "note": None}
    assert data["columns"]["email"] == "varchar(9)" and data["columns"]["note"] == "text"
    assert data["columns"]["tags"] != "set('a','b')"
    bad = row_change("insert", "shop.products", None, {"id": 2}, column_types={"id": "bigint"})
    (dead,) = emulator.run_change(bad)
    assert dead.dead_letter and dead.error is not None
    assert "the payload for es://products has no CloudEvent form" in dead.error
    assert emulator.close().dead_letters == 1
