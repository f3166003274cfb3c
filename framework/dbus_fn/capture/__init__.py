"""Binlog capture: MySQL/MariaDB row changes as ``RowChange`` values, resumable.

```python
from dbus_fn.capture import SourceSpec, BinlogReader

spec = SourceSpec(name="shop", dsn="mysql://dbus:dbus@127.0.0.1:3306", tables=("shop.*",))
reader = BinlogReader(spec, server_id=server_id_for("shop/tail"))
start = reader.resolve_start("latest")
for item in reader.read(start, idle_timeout=5):
    ...  # RowChange | SchemaChange | TransactionCommit, in commit order
```

Guarantees and choices:

* Items come strictly after the start position, in commit order. A position is
  only ever a transaction boundary: ``TransactionCommit.position`` is where to
  resume after that transaction; one is emitted for every transaction, also
  those with no captured rows, so positions keep moving.
* A fault (connection killed, server restart, network stall) reconnects with
  backoff from the last commit and skips what was already handed out from the
  interrupted transaction: no loss, no duplicate. A purged or invalid start is a
  ``PositionError``, a missing privilege a ``SourceAccessError``; neither retries.
* Column names come from the binlog (``binlog_row_metadata=FULL``, required), so
  they are right before and after any ALTER or table swap.
* Key: the primary key; a table without one is keyed by all its columns.
* Values: see ``dbus_fn.columns``. MariaDB ``JSON`` (a ``LONGTEXT`` with a
  ``json_valid`` check) is recognised by that check as the table is now; ``FLOAT``
  is rounded to 6 significant digits, as the server shows it; zero dates are None.
"""

from __future__ import annotations

from dbus_fn.capture._dsn import ConnectionSettings, SourceSpec, parse_dsn, redact_dsn
from dbus_fn.capture._positions import (
    parse_gtid,
    parse_gtid_state,
    parse_position,
    position_from_json,
    position_to_json,
)
from dbus_fn.capture._reader import BinlogReader, CaptureLag, ServerInfo
from dbus_fn.capture._server_id import server_id_for, validate_server_id
from dbus_fn.capture._sources import SourceStore, sources_file

__all__ = [
    "BinlogReader",
    "CaptureLag",
    "ConnectionSettings",
    "ServerInfo",
    "SourceSpec",
    "SourceStore",
    "parse_dsn",
    "parse_gtid",
    "parse_gtid_state",
    "parse_position",
    "position_from_json",
    "position_to_json",
    "redact_dsn",
    "server_id_for",
    "sources_file",
    "validate_server_id",
]
