from datetime import datetime

from dbus_fn.testing import delete, insert, update

PRODUCT = {"id": 3, "name": "Lamp", "deleted_at": None}


def test_live_rows_go_to_their_table_topic(dbus_run):
    assert dbus_run(insert("shop.products", PRODUCT)).destinations == ["kafka://catalogue.products"]


def test_soft_deleted_rows_are_dropped(dbus_run):
    removed = update("shop.products", PRODUCT, deleted_at=datetime(2024, 5, 1, 12, 0))
    assert dbus_run(removed).filtered


def test_hard_deletes_still_go_out(dbus_run):
    assert dbus_run(delete("shop.customers", id=9, deleted_at=None)).destinations == [
        "kafka://catalogue.customers"
    ]
