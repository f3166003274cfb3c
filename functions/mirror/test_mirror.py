from dbus_fn.testing import delete, insert, update

ORDER = {"id": 7, "status": "paid", "total": 12}


def test_each_table_goes_to_its_own_index(dbus_run):
    assert dbus_run(insert("shop.orders", ORDER)).destinations == ["es://dc2.shop.orders"]
    assert dbus_run(insert("shop.stock", id=1, left=3)).destinations == ["es://dc2.shop.stock"]


def test_rows_are_mirrored_as_they_are(dbus_run):
    outcome = dbus_run(update("shop.orders", ORDER, status="shipped"))
    assert outcome.deliveries[0].payload == {**ORDER, "status": "shipped"}


def test_deletes_reach_the_index(dbus_run):
    assert dbus_run(delete("shop.orders", ORDER)).destinations == ["es://dc2.shop.orders"]


def test_other_databases_are_not_mirrored(dbus_run):
    assert dbus_run(insert("crm.contacts", id=1)).filtered
