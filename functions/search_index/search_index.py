"""Search team: one flat document per product for the `products` index.

The ``attributes`` JSON column is nested (``{"size": {"eu": 42}}``); the index
wants flat keys (``attributes.size.eu``) so each one can be mapped and
filtered. Tags (a SET column) become a sorted list, and a ``suggest`` field
joins what users type into the search box.
"""

from collections.abc import Mapping
from typing import Any

import dbus_fn as fn


def flatten(value: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}.{key}"
        if isinstance(item, Mapping):
            flat.update(flatten(item, name))
        else:
            flat[name] = item
    return flat


@fn.projection(tables="shop.products")
def search_document(event: fn.RowChange) -> dict:
    row = event.row
    document = {k: v for k, v in row.items() if k not in ("attributes", "tags")}
    document.update(flatten(row.get("attributes") or {}, "attributes"))
    document["tags"] = sorted(row.get("tags") or ())
    document["suggest"] = " ".join([row.get("name") or "", *document["tags"]]).strip()
    return document


@fn.route(tables="shop.products")
def products_index(event: fn.RowChange) -> str:
    return "es://products"
