"""Catalogue: only live rows leave the database; soft-deleted ones stay behind.

Rows carry ``deleted_at``: NULL while live, the deletion time once removed by the
application. Consumers of the catalogue topics should never see removed rows.
"""

import dbus_fn as fn

CATALOGUE = ["shop.products", "shop.categories", "shop.customers"]


@fn.filter(tables=CATALOGUE, operations=["insert", "update"])
def live_rows_only(event: fn.RowChange) -> bool:
    return event.row.get("deleted_at") is None


@fn.route(tables=CATALOGUE)
def topic_per_table(event: fn.RowChange) -> str:
    return f"kafka://catalogue.{event.table}"
