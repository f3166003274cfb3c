"""Checkout team: order changes for the order topics and the search index."""

import dbus_fn as fn

PUBLIC_FIELDS = ("id", "status", "total", "updated_at")


@fn.filter(tables="shop.orders")
def skip_test_accounts(event: fn.RowChange) -> bool:
    return not event.row.get("is_test", False)


@fn.projection(tables="shop.orders")
def public_fields(event: fn.RowChange) -> dict:
    return {k: event.row[k] for k in PUBLIC_FIELDS if k in event.row}


@fn.route(tables="shop.orders")
def by_status(event: fn.RowChange) -> list[str]:
    return [f"kafka://orders.{event.row['status']}", "es://orders"]
