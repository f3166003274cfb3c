"""A column's declared type as capture names it, for the binlog and the snapshot alike.

information_schema's ``COLUMN_TYPE`` is the declaration. The binlog's table map
says less: no ``zerofill``, no ``FLOAT(M,D)``, no geometry subtype, and MariaDB's
``UUID``/``INET4``/``INET6`` arrive as ``binary(n)``. Capture names a column by its
declaration (``declared_type``) when the declaration and the table map agree
(``agreed_types``); when they do not, the table changed since the row was written
and the table map, the only account of that row, is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["agreed_types", "declared_type", "table_map_type"]

_DISPLAY_WIDTH = re.compile(r"^(tinyint|smallint|mediumint|int|bigint|year)\(\d+\)")
_ZEROFILL = re.compile(
    r"^(?P<name>tinyint|smallint|mediumint|int|bigint|decimal\(\d+,\d+\))(?:\(\d+\))?"
    r" unsigned zerofill$"
)
_REAL = re.compile(r"^(?P<name>float|double)(?:\(\d+,\d+\))?(?: unsigned)?(?: zerofill)?$")
_SPATIAL = frozenset(
    {"point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
     "geometrycollection"}
)  # fmt: skip
_FIXED_BINARY = {"uuid": "binary(16)", "inet6": "binary(16)", "inet4": "binary(4)"}
_ENUM_OR_SET = re.compile(r"\s*(enum|set)\s*\((.*)\)\s*", re.I | re.S)
_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'", re.S)
_ESCAPE = re.compile(r"''|\\(.)", re.S)
_ESCAPED = {"0": "\0", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "b": "\b"}


def _members_as_quoted(kind: str, members: str) -> str:
    """``enum(...)``/``set(...)`` with each member as the binlog decoder quotes it.

    COLUMN_TYPE escapes a backslash, newline, carriage return and NUL in a member
    with a backslash (``'a\\\\b'``); the table map gives the member itself, which the
    decoder quotes by doubling a quote only. Members keep their case and spaces.
    """

    def unescape(match: re.Match[str]) -> str:
        if match[0] == "''":
            return "'"
        return _ESCAPED.get(match[1], match[1])

    values = [_ESCAPE.sub(unescape, body) for body in _MEMBER.findall(members)]
    quoted = ",".join("'" + value.replace("'", "''") + "'" for value in values)
    return f"{kind.lower()}({quoted})"


def declared_type(column_type: str, *, is_json: bool = False) -> str:
    """``COLUMN_TYPE`` as capture names the column.

    Lowercase (``enum``/``set`` members kept as they are, quoted as the binlog
    decoder quotes them); MariaDB's JSON (``longtext`` with a ``json_valid`` check) is ``json``;
    the display width of an integer or ``year`` (``int(11)``, ``tinyint(1)``) is
    dropped, as MySQL 8 drops it and it changes no value, except beside
    ``zerofill``, where it is the width the value is padded to.
    """
    if is_json:
        return "json"
    members = _ENUM_OR_SET.fullmatch(column_type)
    if members:
        return _members_as_quoted(members[1], members[2])
    text = " ".join(column_type.lower().split())
    if text.endswith(" zerofill"):
        return text
    return _DISPLAY_WIDTH.sub(r"\1", text)


def table_map_type(declared: str) -> str:
    """The type the binlog's table map alone gives a column declared ``declared``
    (a ``declared_type``): what the two must agree on."""
    zerofill = _ZEROFILL.match(declared)
    if zerofill:
        return f"{zerofill['name']} unsigned"
    real = _REAL.match(declared)
    if real:
        return real["name"]
    if declared in _SPATIAL:
        return "geometry"
    return _FIXED_BINARY.get(declared, declared)


def agreed_types(
    names: Sequence[str], from_table_map: Sequence[str], declared: Sequence[tuple[str, str]]
) -> tuple[str, ...] | None:
    """The types of a table's columns by their declarations, or None when the
    declaration (``(name, declared_type)`` in order) does not describe the table
    map's columns (``names`` and the types ``from_table_map`` gives them): a column
    the table map lacks (added since the row was written), another order, or a
    column whose table-map type is not what its declaration gives. A column only
    the table map has keeps its table-map type: information_schema does not show
    the hidden ``row_start``/``row_end`` of a system-versioned table, and a column
    dropped since leaves the others' declarations true."""
    declared_as = dict(declared)
    if not declared_as or len(declared_as) != len(declared):
        return None
    if [name for name in names if name in declared_as] != [name for name, _ in declared]:
        return None
    types = []
    for name, mapped in zip(names, from_table_map, strict=True):
        if name not in declared_as:
            types.append(mapped)
        elif table_map_type(declared_as[name]) == mapped:
            types.append(declared_as[name])
        else:
            return None
    return tuple(types)
