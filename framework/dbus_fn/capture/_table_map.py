"""The parts of MySQL 9's table maps mysql-replication 1.0.17 does not read: VECTOR
columns and the optional metadata fields it has no name for.

A ``VECTOR`` column (type code 242) has one byte of metadata (the width of its
length, as a BLOB's), counts among the character columns whose collations the
optional metadata lists (binary), and has its dimension in an optional metadata
field of its own (``VECTOR_DIMENSIONALITY``, 13). The library reads none of it: it
reads no metadata byte, so every later column's metadata is read from the wrong
place; it gives the next character column the vector's collation; and it refuses
the table map at the field it does not know. Here, on import, its column parser reads
that byte, its test of a character column counts VECTOR, and its optional metadata
reader takes each vector's dimension (``Column.dimensions``) and steps over any
other field it does not know, as MySQL's own readers do.
"""

from __future__ import annotations

from typing import Any

from pymysqlreplication.column import Column
from pymysqlreplication.row_event import MetadataFieldType, TableMapEvent
from pymysqlreplication.util.bytes import length_encoded_int

VECTOR = 242
"""MySQL's ``MYSQL_TYPE_VECTOR``."""
_VECTOR_DIMENSIONALITY = 13
_KNOWN_FIELDS = frozenset(field.value for field in MetadataFieldType)
_CHECKSUM = 4
"""The bytes the library leaves at the end of a table map, as its own reader does."""

_parse_column = Column._Column__parse_column_definition
_is_character_column = TableMapEvent._is_character_column
_optional_metadata = TableMapEvent._get_optional_meta_data


def _column_definition(self: Any, column_type: int, packet: Any) -> None:
    _parse_column(self, column_type, packet)
    if column_type == VECTOR:
        self.length_size = packet.read_uint8()
        self.dimensions = None


def _character_column(column_type: int, dbms: str = "mysql") -> bool:
    return (column_type == VECTOR and dbms == "mysql") or bool(
        _is_character_column(column_type, dbms=dbms)
    )


def _number(data: bytes, at: int) -> tuple[int, int]:
    """A length-encoded integer at ``at`` and where it ends."""
    value, _null, size = length_encoded_int(data[at : at + 9])
    return int(value or 0), at + size


def _metadata(self: Any) -> Any:
    """The library's optional metadata of this table map, read without the fields it
    does not know; the vectors' dimensions go to their columns."""
    packet = self.packet.packet
    data, start = packet._data, packet._position
    kept, dimensions, skipped = [], [], False
    at, end = start, len(data) - _CHECKSUM
    while at < end:
        kind = data[at]
        length, value = _number(data, at + 1)
        following = value + length
        if kind == _VECTOR_DIMENSIONALITY:
            while value < following:
                dimension, value = _number(data, value)
                dimensions.append(dimension)
        if kind in _KNOWN_FIELDS:
            kept.append(data[at:following])
        else:
            skipped = True
        at = following
    if skipped:
        packet._data = data[:start] + b"".join(kept) + data[at:]
    found = _optional_metadata(self)
    vectors = [column for column in self.columns if column.type == VECTOR]
    for column, dimension in zip(vectors, dimensions, strict=False):
        column.dimensions = dimension
    return found


Column._Column__parse_column_definition = _column_definition
TableMapEvent._is_character_column = staticmethod(_character_column)
TableMapEvent._get_optional_meta_data = _metadata
