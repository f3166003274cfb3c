from decimal import Decimal

from dbus_fn.testing import delete, insert, update

ORDER = {"id": 7, "status": "paid", "total": Decimal("19.90"), "customer_email": "ada@example.com"}


def test_paid_orders_go_to_their_topic_and_the_index(dbus_run):
    outcome = dbus_run(insert("shop.orders", ORDER, is_test=False))
    assert outcome.destinations == ["kafka://orders.paid", "es://orders"]


def test_test_accounts_are_dropped(dbus_run):
    assert dbus_run(insert("shop.orders", ORDER, is_test=True)).filtered


def test_only_public_fields_are_delivered(dbus_run):
    outcome = dbus_run(update("shop.orders", ORDER, status="shipped"))
    assert outcome.deliveries[0].payload == {
        "id": 7,
        "status": "shipped",
        "total": Decimal("19.90"),
    }
    assert outcome.destinations[0] == "kafka://orders.shipped"


def test_deletes_reach_the_index(dbus_run):
    assert "es://orders" in dbus_run(delete("shop.orders", ORDER)).destinations
