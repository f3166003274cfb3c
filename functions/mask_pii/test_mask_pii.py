from mask_pii import email_token, masked_phone

from dbus_fn.testing import insert, update

USER = {"id": 1, "name": "Ada", "email": "Ada.Lovelace@Example.com", "phone": "+44 20 7946 0958"}


def test_contact_details_are_masked(dbus_run):
    payload = dbus_run(insert("shop.users", USER)).deliveries[0].payload
    assert payload["email"].endswith("@example.com") and "ada" not in payload["email"].lower()
    assert payload["phone"] == "**********58"
    assert payload["name"] == "Ada"


def test_the_same_address_gives_the_same_token():
    assert email_token("ada@example.com") == email_token("ADA@example.com")
    assert email_token("ada@example.com") != email_token("alan@example.com")


def test_missing_values_stay_missing(dbus_run):
    payload = dbus_run(update("shop.users", USER, email=None, phone="")).deliveries[0].payload
    assert payload["email"] is None and payload["phone"] == ""


def test_short_numbers():
    assert masked_phone("7") == "7"
