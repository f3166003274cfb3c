"""Column type strings: a MySQL ``COLUMN_TYPE`` parsed into the family that decides its JSON."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from dbus_fn.errors import UnsupportedColumnTypeError

__all__ = ["ColumnFamily", "ColumnType", "parse_column_type"]

ColumnFamily = Literal[
    "integer",
    "decimal",
    "float",
    "date",
    "time",
    "datetime",
    "timestamp",
    "year",
    "text",
    "bytes",
    "enum",
    "set",
    "bit",
    "json",
    "vector",
]

_INTEGER_BITS = {
    "tinyint": 8,
    "smallint": 16,
    "mediumint": 24,
    "int": 32,
    "integer": 32,
    "bigint": 64,
}
_SPATIAL = (
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
    "geomcollection",
)
_FAMILIES: dict[str, ColumnFamily] = {
    **{name: "integer" for name in _INTEGER_BITS},
    "bool": "integer",
    "boolean": "integer",
    "decimal": "decimal",
    "numeric": "decimal",
    "dec": "decimal",
    "fixed": "decimal",
    "float": "float",
    "double": "float",
    "double precision": "float",
    "real": "float",
    "date": "date",
    "time": "time",
    "datetime": "datetime",
    "timestamp": "timestamp",
    "year": "year",
    **{
        name: "text"
        for name in (
            "char",
            "varchar",
            "tinytext",
            "text",
            "mediumtext",
            "longtext",
            "uuid",
            "inet4",
            "inet6",
        )
    },
    **{
        name: "bytes"
        for name in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", *_SPATIAL)
    },
    "enum": "enum",
    "set": "set",
    "bit": "bit",
    "json": "json",
    "vector": "vector",
}
_NUMERIC_FAMILIES = frozenset({"integer", "decimal", "float"})

_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_TYPE = re.compile(
    r"\s*(?P<name>[a-z][a-z0-9_]*(?:\s+precision)?)\s*(?:\((?P<args>.*)\))?"
    r"(?P<attrs>(?:\s+(?:unsigned|signed|zerofill))*)\s*",
    re.I | re.S,
)
_MEMBER = re.compile(r"\s*'((?:[^']|'')*)'\s*(?:,|$)", re.S)


@dataclass(frozen=True, slots=True)
class ColumnType:
    """A parsed column type string.

    ``name`` is the lowercase base type (``"int"``, ``"varchar"``, ``"enum"``),
    ``family`` the family that decides the Python value and JSON form, ``args`` the
    parenthesised arguments (numbers as strings; members for ``enum``/``set``).
    """

    text: str
    name: str
    family: ColumnFamily
    args: tuple[str, ...] = ()
    unsigned: bool = False

    @property
    def bits(self) -> int | None:
        """Width in bits of an integer or ``bit`` column, else ``None``."""
        if self.family == "bit":
            return int(self.args[0]) if self.args else 1
        if self.family == "integer":
            return _INTEGER_BITS.get(self.name, 8)
        return None


def _unsupported(text: str, why: str) -> UnsupportedColumnTypeError:
    return UnsupportedColumnTypeError(
        f"column type {text!r} is not supported: {why}; expected a lowercase MySQL "
        "COLUMN_TYPE such as 'int unsigned', 'varchar(255)' or \"enum('a','b')\" "
        "(the table in dbus_fn.columns lists every type)",
        column_type=text,
    )


@lru_cache(maxsize=4096)
def parse_column_type(column_type: str) -> ColumnType:
    """Parse a ``COLUMN_TYPE`` string; raise ``UnsupportedColumnTypeError`` if unknown."""
    if not isinstance(column_type, str):
        raise _unsupported(repr(column_type), f"a {type(column_type).__name__}, not a string")
    match = _TYPE.fullmatch(_COMMENT.sub(" ", column_type))
    if match is None:
        raise _unsupported(column_type, "it does not read as 'name[(args)] [unsigned]'")
    name = " ".join(match["name"].lower().split())
    family = _FAMILIES.get(name)
    if family is None:
        raise _unsupported(column_type, f"dbus has no JSON mapping for type {name!r}")
    attrs = match["attrs"].lower().split()
    unsigned = "unsigned" in attrs or "zerofill" in attrs
    if attrs and family not in _NUMERIC_FAMILIES:
        raise _unsupported(column_type, f"{' '.join(attrs)!r} applies to numeric types only")
    raw_args = match["args"]
    args: tuple[str, ...] = ()
    if family in ("enum", "set"):
        args = _parse_members(column_type, raw_args or "")
    elif raw_args is not None:
        args = tuple(part.strip() for part in raw_args.split(","))
        if not all(part.isdigit() for part in args):
            raise _unsupported(column_type, f"arguments ({raw_args}) are not numbers")
    parsed = ColumnType(text=column_type, name=name, family=family, args=args, unsigned=unsigned)
    if family == "bit" and not 1 <= (parsed.bits or 0) <= 64:
        raise _unsupported(column_type, "bit width must be 1 to 64")
    return parsed


def _parse_members(text: str, raw: str) -> tuple[str, ...]:
    members: list[str] = []
    position = 0
    while position < len(raw):
        match = _MEMBER.match(raw, position)
        if match is None:
            raise _unsupported(text, "members must be quoted like ('a','b')")
        members.append(match[1].replace("''", "'"))
        position = match.end()
    return tuple(members)
