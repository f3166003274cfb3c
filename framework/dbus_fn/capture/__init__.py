"""Binlog capture: MySQL/MariaDB row changes as ``RowChange`` values, resumable.

```python
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for

spec = SourceSpec(name="shop", dsn="mysql://dbus:dbus@127.0.0.1:3306", tables=("shop.*",))
reader = BinlogReader(spec, replica_id=replica_id_for("shop/tail"))
start = reader.resolve_start("latest")
for item in reader.read(start, idle_timeout=5):
    ...  # RowChange | SchemaChange | TransactionCommit, in commit order
```

Guarantees and choices:

* Items come strictly after the start position, in commit order. A position is
  only ever a transaction boundary: ``TransactionCommit.position`` is where to
  resume after that transaction; one is emitted for every transaction, also
  those with no captured rows, so positions keep moving. Resume by file:pos, or
  on MariaDB by a GTID state alone (``BinlogPosition("", 0, "0-1-42")``).
* Every read checks its start: a purged file, an offset past the end, not at an
  event or inside a transaction is a ``PositionError`` with the explicit choices
  (``--from earliest|latest|snapshot``). Never a skip.
* ``read("snapshot")`` hands out every row of the captured tables as inserts at
  one position (MariaDB's consistent snapshot: no table locked), then a
  ``TransactionCommit`` at that position, then the binlog from exactly there.
* A fault (connection killed, server restart, network stall past
  ``stall_timeout``) reconnects with backoff from the last commit and skips what
  was already handed out from the interrupted transaction: no loss, no duplicate.
  A missing privilege is a ``SourceAccessError`` naming the grant; an unreachable
  source on first contact a ``SourceError``; neither is retried.
* Column names come from the binlog (``binlog_row_metadata=FULL``, required and
  checked, with ``binlog_format=ROW`` and ``binlog_row_image=FULL``), so they are
  right before and after any ALTER or table swap. DDL becomes a ``SchemaChange``;
  a statement whose table cannot be read has ``table=None`` and never stops capture.
* Online schema change tools: the rows of pt-online-schema-change's and gh-ost's
  helper tables (``_t_new``, ``_t_old``, ``_t_gho``, ``_t_ghc``, ``_t_del``) are
  the tool's copy of ``t``, not changes, and are left out, as are the DDL of those
  tables; the RENAME that swaps the copy in is a ``SchemaChange`` of ``t``.
  ``SourceSpec(keep_helper_tables=True)`` keeps them as tables of their own.
* Key: the primary key; a table without one has ``primary_key == ()``, and its
  whole row is its key inside dbus (``RowChange.key``, what shards hash).
* Values: see ``dbus_fn.columns``; ``RowChange.column_types`` holds each column's
  declared type, looked up in information_schema as the table is now: lowercase
  COLUMN_TYPE without integer display widths except beside ``zerofill``
  (``int unsigned``, ``int(5) unsigned zerofill``, ``float(35,5)``, ``point``,
  ``uuid``, ``enum('a','b')``), or what the table map says when the table changed
  since the row was written (``_declared_types``). MariaDB ``JSON`` (a
  ``LONGTEXT`` with a ``json_valid`` check) is recognised by that check; values
  are what SELECT shows: ``FLOAT`` with 6 significant digits, ``FLOAT(M,D)`` with
  ``D`` decimals, MariaDB ``UUID``/``INET4``/``INET6`` as their text; zero
  and partial dates are their text (``"0000-00-00"``); ``TIMESTAMP`` is aware UTC;
  MySQL 9's ``VECTOR`` is a list of floats (``_column_readers.vector_values``).
* Shards: ``read(..., shard=Shard(i, n))`` yields only the rows whose key hashes
  to shard ``i`` of ``n`` (and every schema change and commit): ``n`` readers of
  one range share its decoding, and one key's changes stay in one shard, in order.
* Memory: rows are decoded one rows event at a time; transactions are streamed,
  never buffered.
* Lag: ``BinlogReader.lag()`` gives seconds (last event time vs now, 0 once a
  heartbeat shows nothing waits) and bytes (source's binlog end vs read position).
* server ids: each replication connection needs its own; ``replica_id_for(name)``
  gives a stable one in a range replicas rarely use; the source's own id and an
  id another replica reports are refused.
* Named sources for the CLI live in ``sources_file()`` (``$DBUS_SOURCES_FILE``,
  ``$DBUS_HOME/sources.json`` or ``~/.config/dbus/sources.json``, mode 0600).
"""

from __future__ import annotations

from dbus_fn.capture._chunks import (
    ChunkedTable,
    ChunkRead,
    KeyValues,
    chunked_table,
    key_from_json,
    key_to_json,
    next_boundary,
    read_chunk,
)
from dbus_fn.capture._dsn import (
    ConnectionSettings,
    SourceSpec,
    parse_dsn,
    parse_servers,
    redact_dsn,
)
from dbus_fn.capture._positions import (
    TRANSACTION_END,
    coordinates,
    is_neutral,
    parse_gtid,
    parse_gtid_state,
    parse_position,
    position_from_json,
    position_to_json,
)
from dbus_fn.capture._reader import BinlogReader
from dbus_fn.capture._replica_id import replica_id_for, validate_replica_id
from dbus_fn.capture._server import CaptureLag, ServerInfo
from dbus_fn.capture._session import behind
from dbus_fn.capture._shard import Shard
from dbus_fn.capture._sources import SourceStore, sources_file

__all__ = [
    "TRANSACTION_END",
    "BinlogReader",
    "CaptureLag",
    "ChunkRead",
    "ChunkedTable",
    "ConnectionSettings",
    "KeyValues",
    "ServerInfo",
    "Shard",
    "SourceSpec",
    "SourceStore",
    "behind",
    "chunked_table",
    "coordinates",
    "is_neutral",
    "key_from_json",
    "key_to_json",
    "next_boundary",
    "parse_dsn",
    "parse_gtid",
    "parse_gtid_state",
    "parse_position",
    "parse_servers",
    "position_from_json",
    "position_to_json",
    "read_chunk",
    "redact_dsn",
    "replica_id_for",
    "sources_file",
    "validate_replica_id",
]
