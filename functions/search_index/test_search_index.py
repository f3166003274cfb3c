from decimal import Decimal

from dbus_fn.testing import delete, insert

PRODUCT = {
    "id": 11,
    "name": "Trail shoe",
    "price": Decimal("89.00"),
    "attributes": {"colour": "red", "size": {"eu": 42, "us": 9}},
    "tags": frozenset({"running", "outdoor"}),
}


def test_products_become_flat_documents(dbus_run):
    outcome = dbus_run(insert("shop.products", PRODUCT))
    assert outcome.destinations == ["es://products"]
    assert outcome.deliveries[0].payload == {
        "id": 11,
        "name": "Trail shoe",
        "price": Decimal("89.00"),
        "attributes.colour": "red",
        "attributes.size.eu": 42,
        "attributes.size.us": 9,
        "tags": ["outdoor", "running"],
        "suggest": "Trail shoe outdoor running",
    }


def test_rows_without_attributes(dbus_run):
    payload = dbus_run(insert("shop.products", id=12, name="Sock", attributes=None)).deliveries[0]
    assert payload.payload["tags"] == [] and payload.payload["suggest"] == "Sock"


def test_deletes_go_to_the_index(dbus_run):
    assert dbus_run(delete("shop.products", PRODUCT)).destinations == ["es://products"]
