"""Elasticsearch sink: bulk writes whose results never regress.

Every write carries ``version_type=external`` with a version that grows with the
binlog position (``records.document_version``), so a replayed batch or a late retry can
only rewrite a document with the value it already has or a newer one. A refused
document (mapping conflict, malformed value) goes to the dead-letter destination;
it is not retried. Overload (429) and server errors are retried with backoff.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
)

from dbus_fn.errors import DbusError
from dbus_spark.state.records import IndexAction
from dbus_spark.state.sink_activity import SinkActivity

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

log = logging.getLogger(__name__)

# Deletes leave a tombstone that external versioning checks against; keep it long
# enough to outlive any replay window (the default is 60 s).
INDEX_SETTINGS: Mapping[str, Any] = {"index.gc_deletes": "7d"}

_RETRY_STATUS = {429, 502, 503, 504}


class _Unsent(Exception):
    """Some actions are to be sent again (``ElasticsearchSink._send_buffer``)."""


class ElasticsearchSinkError(DbusError, RuntimeError):
    """Elasticsearch did not take a batch; it must not commit."""

    def __init__(self, message: str, *, index: str | None = None) -> None:
        super().__init__(message)
        self.index = index


_ES_TYPES: tuple[tuple[str, Mapping[str, Any]], ...] = (
    # Unsigned 64-bit values do not fit a long, and unsigned_long is an x-pack
    # plugin a minimal server lacks: keep them exact as keywords.
    ("bigint unsigned", {"type": "keyword"}),
    ("tinyint", {"type": "long"}),
    ("smallint", {"type": "long"}),
    ("mediumint", {"type": "long"}),
    ("bigint", {"type": "long"}),
    ("int", {"type": "long"}),
    ("year", {"type": "integer"}),
    ("bit", {"type": "keyword"}),
    # Exact decimals travel as strings; keep them exact (sortable as keyword).
    ("decimal", {"type": "keyword"}),
    ("float", {"type": "double"}),
    ("double", {"type": "double"}),
    ("datetime", {"type": "date", "format": "strict_date_optional_time"}),
    ("timestamp", {"type": "date", "format": "strict_date_optional_time"}),
    ("date", {"type": "date", "format": "strict_date"}),
    ("time", {"type": "keyword"}),
    ("enum", {"type": "keyword"}),
    ("set", {"type": "keyword"}),
    ("json", {"type": "object", "enabled": False}),
    # MySQL 9's VECTOR: an array of floats (a dense_vector needs its similarity chosen).
    ("vector", {"type": "float"}),
    ("char", {"type": "keyword"}),
    ("varchar", {"type": "text", "fields": {"raw": {"type": "keyword", "ignore_above": 256}}}),
    ("text", {"type": "text"}),
    ("tinytext", {"type": "text"}),
    ("mediumtext", {"type": "text"}),
    ("longtext", {"type": "text"}),
    # MariaDB's UUID and INET4/INET6 values are their text.
    ("uuid", {"type": "keyword"}),
    ("inet4", {"type": "keyword"}),
    ("inet6", {"type": "keyword"}),
    ("binary", {"type": "binary"}),
    ("varbinary", {"type": "binary"}),
    ("blob", {"type": "binary"}),
    ("tinyblob", {"type": "binary"}),
    ("mediumblob", {"type": "binary"}),
    ("longblob", {"type": "binary"}),
)


_ARGUMENTS = re.compile(r"\(.*\)", re.S)


def field_mapping(column_type: str) -> Mapping[str, Any] | None:
    """The Elasticsearch mapping of one MySQL column type (``None``: leave it dynamic)."""
    # "bigint(20) unsigned zerofill" is a "bigint unsigned": arguments and zerofill
    # (display only) do not change what a value can hold.
    words = _ARGUMENTS.sub(" ", column_type.lower()).split()
    base = " ".join(word for word in words if word != "zerofill")
    for name, mapping in _ES_TYPES:
        if name in (base, base.removesuffix(" unsigned")):
            return mapping
    return None


def index_mapping(document: Mapping[str, Any], column_types: Mapping[str, str]) -> dict[str, Any]:
    """Mappings for a new index, from the table's column types for the fields present."""
    properties: dict[str, Any] = {}
    for name in document:
        column_type = column_types.get(name)
        mapping = field_mapping(column_type) if column_type else None
        if mapping is not None:
            properties[name] = dict(mapping)
    return {"dynamic": True, "properties": properties}


OnRefused = Callable[[IndexAction, str], None]


class ElasticsearchSink:
    """Buffers ``IndexAction``s and sends them as bulk requests."""

    def __init__(
        self,
        url: str | tuple[str, ...],
        *,
        on_refused: OnRefused,
        options: Mapping[str, Any] | None = None,
        bulk_actions: int = 2000,
        retry_for: float = 300.0,
        client: Elasticsearch | None = None,
        activity: SinkActivity | None = None,
    ) -> None:
        self._url = url if isinstance(url, str) else ",".join(url)
        self._hosts = url if isinstance(url, str) else list(url)
        self._options = {"request_timeout": 60, **(options or {})}
        """The client's options: a deployment's own (``dbus_spark.config.routes``)."""
        # Made on first use: the client library costs a Python worker ~17 MiB, and
        # most workers of a runtime that routes to Kafka only never need it.
        self._client = client
        self._on_refused = on_refused
        self._bulk_actions = bulk_actions
        self._retry_for = retry_for
        self._buffer: list[IndexAction] = []
        self._known_indices: set[str] = set()
        self._written = 0
        self._sending = 0
        self.activity = activity or SinkActivity(in_flight=lambda: self.in_flight)

    @property
    def in_flight(self) -> int:
        return len(self._buffer) + self._sending

    def write(self, action: IndexAction, *, within: float | None = None) -> None:
        """Buffer ``action``, sending the buffer when full; ``within``: how long a send
        may retry before it raises (default: the sink's ``retry_for``)."""
        self._buffer.append(action)
        if len(self._buffer) >= self._bulk_actions:
            self._send(within)

    def flush(self, *, within: float | None = None) -> int:
        """Send what is buffered; the number of actions acknowledged since the last flush."""
        self._send(within)
        written, self._written = self._written, 0
        return written

    def drop(self) -> None:
        """Forget what is buffered and the count written (its deployment was detached:
        its own read sends it all again)."""
        self._buffer = []
        self._written = 0

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    @property
    def _es(self) -> Elasticsearch:
        if self._client is None:
            from elasticsearch import Elasticsearch

            self._client = Elasticsearch(self._hosts, **self._options)
        return self._client

    def _ensure_index(self, action: IndexAction) -> None:
        if action.index in self._known_indices:
            return
        from elasticsearch import ApiError

        if not self._es.indices.exists(index=action.index):
            try:
                self._es.indices.create(
                    index=action.index,
                    settings=dict(INDEX_SETTINGS),
                    mappings=index_mapping(action.document or {}, action.column_types),
                )
            except ApiError as exc:
                if exc.status_code != 400 or "already_exists" not in str(exc):
                    raise
        self._known_indices.add(action.index)

    def _send(self, within: float | None = None) -> None:
        try:
            self._send_buffer(self._retry_for if within is None else within)
        finally:
            self._sending = 0

    def _send_buffer(self, retry_for: float) -> None:
        if not self._buffer:
            return
        pending = self._buffer
        self._buffer = []
        # 0.5 s, doubling to 10 s, while the next try would still start in time.
        attempts = Retrying(
            retry=retry_if_exception_type(_Unsent),
            wait=wait_exponential(multiplier=0.5, max=10.0),
            stop=stop_before_delay(retry_for),
        )
        try:
            for attempt in attempts:
                with attempt:
                    pending = self._send_pending(pending, retry_for)
                    if pending:
                        raise _Unsent  # some actions got a status worth retrying
        except RetryError:
            raise ElasticsearchSinkError(
                f"Elasticsearch at {self._url} did not take {len(pending)} action(s) "
                f"within {retry_for:.2g}s"
            ) from None

    def _send_pending(self, pending: list[IndexAction], retry_for: float) -> list[IndexAction]:
        """One try at ``pending``: the actions to try again; ``_Unsent`` when the
        cluster did not answer or was busy, ``ElasticsearchSinkError`` when it refused."""
        from elasticsearch import ApiError, ConnectionError, TransportError

        self._sending = len(pending)
        try:
            for action in pending:
                if action.op == "index":
                    self._ensure_index(action)
            return self._bulk_once(pending, timeout=max(1.0, min(60.0, retry_for)))
        except (ConnectionError, TransportError) as exc:
            self.activity.retried()
            log.warning("elasticsearch %s unreachable (%s); retrying", self._url, exc)
            raise _Unsent from exc
        except ApiError as exc:
            if exc.status_code not in _RETRY_STATUS:
                raise ElasticsearchSinkError(
                    f"Elasticsearch at {self._url} refused a bulk request: {exc}"
                ) from exc
            self.activity.retried()
            log.warning("elasticsearch busy (%s); retrying", exc.status_code)
            raise _Unsent from exc

    def _bulk_once(self, actions: list[IndexAction], timeout: float = 60.0) -> list[IndexAction]:
        """Send one bulk request; return the actions to retry."""
        body: list[Mapping[str, Any]] = []
        for action in actions:
            meta = {
                "_index": action.index,
                "_id": action.doc_id,
                "version": action.version,
                "version_type": "external",
            }
            body.append({action.op: meta})
            if action.op == "index":
                body.append(action.document or {})
        response = self._es.options(request_timeout=timeout).bulk(operations=body)
        if not response.get("errors"):
            self._written += len(actions)
            for action in actions:
                self.activity.acknowledged(action.index, action.size)
            return []
        retry: list[IndexAction] = []
        for action, item in zip(actions, response["items"], strict=True):
            result = item.get(action.op, {})
            status = result.get("status", 500)
            # 409: a newer (or the same) version is already there; 404 of a delete:
            # already gone. Either way this write is done.
            if status < 300 or status == 409 or (status == 404 and action.op == "delete"):
                self._written += 1
                self.activity.acknowledged(action.index, action.size)
            elif status in _RETRY_STATUS or status >= 500:
                retry.append(action)
            else:
                reason = result.get("error", {})
                self._on_refused(action, f"{status} {reason.get('type')}: {reason.get('reason')}")
                self.activity.failed()
                self._written += 1
        return retry
