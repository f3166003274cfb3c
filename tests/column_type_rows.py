"""Every column type MariaDB and MySQL share, rows of their extremes, and SELECT of
them in capture's form: the fixtures the capture and end-to-end tests of types share."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

COLUMNS = {
    "ti": ("TINYINT", "tinyint"),
    "tiu": ("TINYINT UNSIGNED", "tinyint unsigned"),
    "si": ("SMALLINT", "smallint"),
    "siu": ("SMALLINT UNSIGNED", "smallint unsigned"),
    "mi": ("MEDIUMINT", "mediumint"),
    "miu": ("MEDIUMINT UNSIGNED", "mediumint unsigned"),
    "i": ("INT", "int"),
    "iu": ("INT UNSIGNED", "int unsigned"),
    "bi": ("BIGINT", "bigint"),
    "biu": ("BIGINT UNSIGNED", "bigint unsigned"),
    "dec": ("DECIMAL(65,30)", "decimal(65,30)"),
    "dec2": ("DECIMAL(10,2)", "decimal(10,2)"),
    "dec3": ("DECIMAL(9,9)", "decimal(9,9)"),
    "fl": ("FLOAT", "float"),
    "dbl": ("DOUBLE", "double"),
    "d": ("DATE", "date"),
    "tm": ("TIME(6)", "time(6)"),
    "tm3": ("TIME(3)", "time(3)"),
    "tm0": ("TIME", "time"),
    "dt": ("DATETIME(6)", "datetime(6)"),
    "dt0": ("DATETIME", "datetime"),
    "ts": ("TIMESTAMP(6) NULL", "timestamp(6)"),
    "ts0": ("TIMESTAMP NULL", "timestamp"),
    "y": ("YEAR", "year"),
    "c": ("CHAR(10)", "char(10)"),
    "vc": ("VARCHAR(300)", "varchar(300)"),
    "vcs": ("VARCHAR(20)", "varchar(20)"),
    "tx": ("TEXT", "text"),
    "ltx": ("LONGTEXT", "longtext"),
    "l1": ("VARCHAR(10) CHARACTER SET latin1", "varchar(10)"),
    "bn": ("BINARY(4)", "binary(4)"),
    "vb": ("VARBINARY(300)", "varbinary(300)"),
    "bl": ("BLOB", "blob"),
    "tbl": ("TINYBLOB", "tinyblob"),
    "mbl": ("MEDIUMBLOB", "mediumblob"),
    "lbl": ("LONGBLOB", "longblob"),
    "e": ("ENUM('a','b','it''s')", "enum('a','b','it''s')"),
    "s": ("SET('x','y','z')", "set('x','y','z')"),
    "b1": ("BIT(1)", "bit(1)"),
    "b64": ("BIT(64)", "bit(64)"),
    "b12": ("BIT(12)", "bit(12)"),
    "j": ("JSON", "json"),
}

ROWS = [
    # minimums and negative values
    dict(ti=-128, tiu=0, si=-32768, siu=0, mi=-8388608, miu=0, i=-2147483648, iu=0,
         bi=-9223372036854775808, biu=0,
         dec="-12345678901234567890123456789012345.123456789012345678901234567891",
         dec2="-99999999.99", dec3="-0.000000001", fl=-1.5e-30, dbl=-2.2250738585072014e-308,
         d="1000-01-01", tm="-838:59:59.000000", tm3="-00:00:00.5", tm0="-12:00:01",
         dt="1000-01-01 00:00:00.000000", dt0="1000-01-01 00:00:00",
         ts="1970-01-01 00:00:01.000001", ts0="1970-01-01 00:00:01", y=1901,
         c="", vc="", vcs="", tx="", ltx="", l1="", bn=b"", vb=b"", bl=b"", tbl=b"", mbl=b"",
         lbl=b"", e="a", s="", b1=0, b64=0, b12=0, j="[]"),
    # maximums, fractions, unicode
    dict(ti=127, tiu=255, si=32767, siu=65535, mi=8388607, miu=16777215, i=2147483647,
         iu=4294967295, bi=9223372036854775807, biu=18446744073709551615,
         dec="99999999999999999999999999999999999.999999999999999999999999999999",
         dec2="12345678.9", dec3="0.123456789", fl=3.4028234e38, dbl=1.7976931348623157e308,
         d="9999-12-31", tm="838:59:59.000000", tm3="-12:34:56.789", tm0="23:59:59",
         dt="9999-12-31 23:59:59.999999", dt0="2024-02-29 12:34:56",
         ts="2038-01-19 03:14:07.999999", ts0="2024-06-01 00:00:00", y=2155,
         c="emoji 😀", vc="ünïcødé 🚀" * 20, vcs="it's \"q\" \\ ",
         tx="x😀" * 1000,
         ltx="long " * 100000, l1="café", bn=b"\x01\x00\x00\x00", vb=bytes(range(256)),
         bl=b"\x00\xff" * 1000, tbl=b"\x00", mbl=b"m" * 70000, lbl=b"\x00" * 100,
         e="it's", s="x,z", b1=1, b64=18446744073709551615, b12=0xABC,
         j='{"k": 1, "nested": {"a": [1, 2.5, "s", null, true, false]}, "ü": "😀", '
           '"big": 12345678901234567890}'),
    # ordinary values
    dict(ti=1, tiu=2, si=3, siu=4, mi=5, miu=6, i=7, iu=8, bi=9, biu=10, dec="0", dec2="0.01",
         dec3="0", fl=0.1, dbl=0.1, d="2024-02-29", tm="00:00:00.000001", tm3="-00:00:01",
         tm0="00:00:00", dt="2024-01-02 03:04:05.000001", dt0="2024-01-02 03:04:05",
         ts="2024-01-02 03:04:05.123456", ts0="2024-01-02 03:04:05", y=2024, c="a  ", vc=" b ",
         vcs="c", tx="t", ltx="l", l1="x", bn=b"ab", vb=b"\x00", bl=b"b", tbl=b"t", mbl=b"m",
         lbl=b"l", e="b", s="y", b1=1, b64=1, b12=1, j='"just a string"'),
]  # fmt: skip


def normalise_select(column: str, value: Any) -> Any:
    """SELECT's value in the form capture documents for the column's type."""
    if value is None:
        return None
    kind = COLUMNS[column][1]
    if kind.startswith("timestamp"):
        return value.replace(tzinfo=UTC)
    if kind.startswith("set("):
        if isinstance(value, str):
            return frozenset(v for v in value.split(",") if v)
        return frozenset(value)
    if kind.startswith("bit("):
        return int.from_bytes(value, "big")
    if kind == "json":
        return json.loads(value)
    return value


def insert(
    connection: Any, values: dict[str, Any], expressions: dict[str, str] | None = None
) -> None:
    """A row of ``values`` (COLUMNS' names) into ``t``, and ``expressions``: more
    columns, each given as SQL (``STRING_TO_VECTOR('[1]')``)."""
    expressions = expressions or {}
    names = ", ".join(f"`{name}`" for name in [*values, *expressions])
    marks = ", ".join(
        [*("b%s" if COLUMNS[name][1].startswith("bit(") else "%s" for name in values),
         *expressions.values()]
    )  # fmt: skip
    bit = {
        name: format(v, "b") for name, v in values.items() if COLUMNS[name][1].startswith("bit(")
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO t ({names}) VALUES ({marks})", [bit.get(n, v) for n, v in values.items()]
        )


def create(connection: Any, extra: str = "") -> None:
    """Table ``t``: an auto-increment ``id`` key, every column of COLUMNS, then ``extra``
    (more columns' definitions, if any); the session in UTC and strict."""
    definition = ", ".join(f"`{name}` {sql}" for name, (sql, _) in COLUMNS.items())
    with connection.cursor() as cursor:
        cursor.execute("SET time_zone = '+00:00'")
        cursor.execute("SET sql_mode = 'STRICT_ALL_TABLES'")
        cursor.execute(f"CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, {definition}"
                       f"{', ' + extra if extra else ''}) DEFAULT CHARSET=utf8mb4")  # fmt: skip


def write_every_type(connection: Any, reader: Any) -> tuple[Any, Any]:
    """Table ``t`` with every column type, the rows of ROWS and an all-NULL row."""
    create(connection)
    start = reader.master_position()
    for values in ROWS:
        insert(connection, values)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO t (id) VALUES (NULL)")  # NULL in every column
    return start, reader.master_position()
