"""Search in this data centre over the other one's shop: its dbus topics mirrored
into one index per table (``dc2.shop.orders``), rows as they are there.

Run it in a runtime given the other data centre's topics as a source::

    dbus runtime start --source dc2=kafka://dc2-kafka:9092/dbus.shop.* --functions functions/mirror

Events keep their ids, positions and rows; document versions follow the other
data centre's binlog, so a message read twice never turns a document back.
"""

import dbus_fn as fn


@fn.route(tables="shop.*")
def per_table_index(event: fn.RowChange) -> str:
    return f"es://dc2.{event.database}.{event.table}"
