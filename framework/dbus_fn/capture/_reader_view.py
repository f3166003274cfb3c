"""The reader as the parts it drives see it: what the start, snapshot, failover and
read-session code (``_start``, ``_snapshot``, ``_failover``, ``_session``) use of the
``BinlogReader`` that calls them, so that they need not import it.

``_reader.BinlogReader`` is the one implementation; the parts take it as a
``ReaderView`` and the reader imports them, never the other way round.
"""

from __future__ import annotations

from typing import Any, Protocol

from dbus_fn.capture._decode import TableDecoder
from dbus_fn.capture._dsn import ConnectionSettings, SourceSpec
from dbus_fn.capture._server import ServerInfo
from dbus_fn.errors import SourceError
from dbus_fn.events import BinlogPosition


class ReaderView(Protocol):
    """One source's reader: its settings, its control connection and queries, and the
    state of its binlog read that the read session keeps up to date."""

    spec: SourceSpec
    replica_id: int
    heartbeat: float
    stall_timeout: float
    connect_timeout: float
    server_index: int
    """Which of the source's servers it reads (``_failover``)."""
    connection_id: int | None
    """The replication connection's thread id, once it has one."""
    _connected_once: bool
    _stream_logged_in: bool
    _decoders: dict[bytes, TableDecoder]
    _read_file: str | None
    _read_pos: int
    _last_event_time: float | None
    _caught_up: bool
    _idle_at: tuple[int, int]

    @property
    def connection(self) -> ConnectionSettings: ...

    @property
    def _report_host(self) -> str: ...

    def use_server(self, index: int) -> None: ...

    def server_info(self) -> ServerInfo: ...

    def master_position(self) -> BinlogPosition: ...

    def gtid_at(self, file: str, pos: int) -> str | None: ...

    def binary_logs(self) -> list[tuple[str, int]]: ...

    def _connect(self, **extra: Any) -> Any: ...

    def _translate(self, exc: BaseException, *, doing: str) -> SourceError: ...

    def _query(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]: ...

    def _sql(self, sql: str, args: Any = None, *, doing: str) -> list[tuple[Any, ...]]: ...

    def _gtid_at(self, file: str, pos: int) -> str | None: ...

    def _declared_types_of(
        self, database: str, table: str, *, fresh: bool = False
    ) -> tuple[tuple[str, str], ...]: ...

    def _forget_declarations(self, changed: list[tuple[str, str | None]]) -> None: ...


__all__ = ["ReaderView"]
