"""Decoding rows events into typed Python values, one compiled decoder per table.

mysql-replication frames the stream and parses table maps; the row images are
decoded here. Doing it ourselves gives the values dbus documents (``SET`` as a
frozenset even when empty, ``BIT`` as int, ``TIMESTAMP`` as aware UTC, MariaDB
``JSON`` parsed, negative fractional ``TIME`` right) and is several times faster
than the library's per-value path, which re-looks-up the table map for every
column of every row.

A value that does not decode (malformed, of a type dbus does not know, a partial JSON
update whose diffs do not apply) stops no read: the rest of its rows event becomes
one ``UndecodedRows`` item, for the dead letters (``UNDECODABLE``).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from dbus_fn.capture._column_readers import (
    Reader,
    UnknownColumnType,
    column_reader,
    column_width,
    declared_reader,
)
from dbus_fn.capture._declared_types import agreed_types
from dbus_fn.capture._json_diff import UnappliedDiff, apply_diffs, read_diffs
from dbus_fn.capture._native import native_plan
from dbus_fn.capture._wire import field_number
from dbus_fn.errors import SourceError

Images = tuple[dict[str, Any] | None, dict[str, Any] | None]
"""A row's ``(image, after_image)``: ``after_image`` only for updates; both None for a
row another shard owns."""

UNDECODABLE = (ValueError, LookupError, ArithmeticError, TypeError, struct.error)
"""What decoding a value the capture cannot read raises (``UnappliedDiff`` and
``UnknownColumnType`` are ``ValueError``; the native decoder raises ``ValueError``)."""


@dataclass(frozen=True, slots=True)
class UndecodableTable:
    """The decoder of a table version whose table map names a column dbus cannot read
    (``reason``): its first row raises, so each of its rows events is one
    ``UndecodedRows`` item."""

    database: str
    table: str
    reason: str
    primary_key: tuple[str, ...] = ()
    column_types: Mapping[str, str] = field(default_factory=dict)
    schema_version: int = 0

    def whole(self, present: bytes) -> bool:
        return True  # none of its rows is read: none is partial

    def images(self, *_: Any) -> Iterator[Images]:
        return _refused(self.reason)

    partial_images = images


def _refused(reason: str) -> Iterator[Images]:
    raise UnknownColumnType(reason)
    yield  # a generator: the error comes with its first row, as a decoder's would


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    """What the table map tells about one column, in the form the decoder needs."""

    name: str
    type_code: int
    column_type: str
    reader: Reader
    width: int | None = None
    """Bytes the value takes in a row image when that is fixed by the type."""


# (column name, reader, fixed width or None, position in the key or -1)
_Skim = tuple[tuple[str, Reader, int | None, int], ...]


@dataclass(frozen=True, slots=True)
class TableDecoder:
    """Decodes the row images of one table version."""

    database: str
    table: str
    columns: tuple[ColumnInfo, ...]
    primary_key: tuple[str, ...]
    """The table's primary key; empty when it has none."""
    column_types: Mapping[str, str]
    schema_version: int
    shard_key: tuple[str, ...] = ()
    """The columns a shard hashes: the primary key, or every column without one."""
    native: Any = None
    """The native decoder of these columns (``_native``); None: Python decodes."""

    def whole(self, present: bytes) -> bool:
        """Whether a row event's bitmap of the columns it holds names every column: a
        session with ``binlog_row_image=MINIMAL`` or ``NOBLOB`` logs fewer."""
        every = (1 << len(self.columns)) - 1
        return int.from_bytes(present, "little") & every == every

    def images(
        self,
        data: bytes,
        present: bytes,
        present_after: bytes | None,
        owns: Callable[[list[Any]], bool] | None = None,
    ) -> Iterator[Images]:
        """Yield ``(image, after_image)`` per row; ``after_image`` only for updates.

        With ``owns`` (a shard's test of a row's key values), a row it does not own
        yields ``(None, None)``: only its key columns are decoded, the others are
        measured and stepped over, which is what makes a shard cheaper than the
        whole source.
        """
        if owns is None and self.native is not None:
            if type(data) is not bytes:
                data = bytes(data)
            after_bits = None if present_after is None else bytes(present_after)
            yield from self.native.images(data, bytes(present), after_bits)
            return
        first = self._selection(present)
        second = self._selection(present_after) if present_after is not None else None
        offset, end = 0, len(data)
        decode = _decode_image
        if owns is not None:
            skim_first = self._skim(present)
            skim_second = self._skim(present_after) if present_after is not None else None
            keys = len(self.shard_key)
        while offset < end:
            if owns is not None:
                row_end, key = _skim_image(data, offset, skim_first, keys)
                if skim_second is not None:
                    row_end, key = _skim_image(data, row_end, skim_second, keys)
                if not owns(key):
                    offset = row_end
                    yield None, None
                    continue
            image, offset = decode(data, offset, first)
            if second is None:
                yield image, None
            else:
                after, offset = decode(data, offset, second)
                yield image, after

    def partial_images(
        self,
        data: bytes,
        present: bytes,
        present_after: bytes,
        owns: Callable[[list[Any]], bool] | None = None,
    ) -> Iterator[Images]:
        """Yield the ``(before, after)`` images of a MySQL ``PARTIAL_UPDATE_ROWS_EVENT``:
        a JSON column the after image holds as diffs is its before image's document
        with the diffs applied (``_json_diff``); every other column reads as ``images``
        reads it. Raises ``UnappliedDiff`` at a row whose diffs do not apply. With
        ``owns``, a row whose after image's key it does not own is ``(None, None)``."""
        first = self._selection(present)
        second = self._selection(present_after)
        json_columns = [c.name for c in self.columns if c.type_code == FIELD_TYPE.JSON]
        partial_width = (len(json_columns) + 7) >> 3
        offset, end = 0, len(data)
        while offset < end:
            before, offset = _decode_image(data, offset, first)
            options, offset = field_number(data, offset)
            partial: frozenset[str] = frozenset()
            if options & _PARTIAL_JSON:
                bits = int.from_bytes(data[offset : offset + partial_width], "little")
                offset += partial_width
                partial = frozenset(n for i, n in enumerate(json_columns) if bits >> i & 1)
            after, offset = _decode_image(data, offset, second, partial)
            for name in json_columns:
                if name not in partial or name not in after:
                    continue
                diffs = after[name]
                if before.get(name) is None:
                    raise UnappliedDiff(f"column {name!r} holds diffs of a NULL before image")
                after[name] = apply_diffs(before[name], diffs)
            if owns is not None and not owns([after[name] for name in self.shard_key]):
                yield None, None
            else:
                yield before, after

    def _skim(self, present: bytes) -> _Skim:
        bits = int.from_bytes(present, "little")
        key_at = {name: i for i, name in enumerate(self.shard_key)}
        return tuple(
            (c.name, c.reader, c.width, key_at.get(c.name, -1))
            for i, c in enumerate(self.columns)
            if bits >> i & 1
        )

    def _selection(self, present: bytes) -> tuple[tuple[str, Reader], ...]:
        bits = int.from_bytes(present, "little")
        return tuple((c.name, c.reader) for i, c in enumerate(self.columns) if bits >> i & 1)


_PARTIAL_JSON = 1
"""The bit of a partial update's after image that says JSON columns may be diffs."""


def _decode_image(
    data: bytes,
    offset: int,
    columns: tuple[tuple[str, Reader], ...],
    diffs: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], int]:
    """One row image at ``offset`` and where it ends; the columns named in ``diffs``
    hold the diffs of a partial JSON update (``_json_diff.read_diffs``), read as such."""
    width = (len(columns) + 7) >> 3
    nulls = int.from_bytes(data[offset : offset + width], "little")
    offset += width
    image: dict[str, Any] = {}
    if diffs:
        columns = tuple((n, read_diffs if n in diffs else r) for n, r in columns)
    if nulls == 0:
        for name, read in columns:
            image[name], offset = read(data, offset)
        return image, offset
    bit = 1
    for name, read in columns:
        if nulls & bit:
            image[name] = None
        else:
            image[name], offset = read(data, offset)
        bit <<= 1
    return image, offset


def _skim_image(data: bytes, offset: int, columns: _Skim, keys: int) -> tuple[int, list[Any]]:
    """Where one row image ends, and its key values; other fixed-width values are
    stepped over, variable ones read (their length comes first)."""
    width = (len(columns) + 7) >> 3
    nulls = int.from_bytes(data[offset : offset + width], "little")
    offset += width
    key: list[Any] = [None] * keys
    bit = 1
    for _, read, size, at in columns:
        if not nulls & bit:
            if at < 0 and size is not None:
                offset += size
            else:
                value, offset = read(data, offset)
                if at >= 0:
                    key[at] = value
        bit <<= 1
    return offset, key


def compile_table(
    database: str,
    table: str,
    columns: Sequence[Any],
    primary_key_indexes: Sequence[int],
    declared: Sequence[tuple[str, str]] = (),
) -> TableDecoder:
    """Build the decoder of one table version from its table-map columns.

    ``declared``: the table's columns as information_schema declares them now
    (name, ``declared_type``), which name the columns and refine their readers when
    they agree with the table map (see ``_declared_types``).

    Without ``binlog_row_metadata=FULL`` the table map carries no column names;
    such sources are refused before reading, so every column has its name here.
    """
    json_columns = {name for name, declared_as in declared if declared_as == "json"}
    from_table_map = []
    for index, column in enumerate(columns):
        if not column.name:
            raise SourceError(
                f"table {database}.{table} arrived without column names (column {index}); "
                "set binlog_row_metadata=FULL on the source"
            )
        from_table_map.append(column_reader(column, is_json=column.name in json_columns))
    agreed = agreed_types(
        [column.name for column in columns], [t for t, _ in from_table_map], declared
    )
    infos = []
    for index, column in enumerate(columns):
        column_type, reader = from_table_map[index]
        if agreed is not None:
            column_type = agreed[index]
            reader = declared_reader(column_type, reader)
        infos.append(
            ColumnInfo(column.name, column.type, column_type, reader, column_width(column))
        )
    names = tuple(info.name for info in infos)
    primary_key = tuple(names[i] for i in primary_key_indexes)
    # No primary key: the whole row is what shards hash (documented in dbus_fn.capture).
    key = primary_key or names
    types = {info.name: info.column_type for info in infos}
    signature = "\x1f".join(f"{n}\x1e{t}" for n, t in types.items()) + "\x1d" + ",".join(key)
    return TableDecoder(
        database=database,
        table=table,
        columns=tuple(infos),
        primary_key=primary_key,
        column_types=types,
        schema_version=zlib.crc32(signature.encode()),
        shard_key=key,
        native=native_plan([(info.name, info.reader) for info in infos]),
    )
