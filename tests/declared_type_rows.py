"""A table whose columns' declarations say more than the binlog's table map (FLOAT(M,D),
zerofill, geometry subtypes, MariaDB UUID/INET4/INET6), its rows, and SELECT of them:
the fixtures the capture and end-to-end tests of declared types share."""

from __future__ import annotations

from typing import Any

COLUMNS = {
    "f": ("FLOAT", "float"),
    "f355": ("FLOAT(35,5)", "float(35,5)"),
    "fu": ("FLOAT UNSIGNED", "float unsigned"),
    "f72z": ("FLOAT(7,2) UNSIGNED ZEROFILL", "float(7,2) unsigned zerofill"),
    "d": ("DOUBLE", "double"),
    "d103": ("DOUBLE(10,3)", "double(10,3)"),
    "du": ("DOUBLE UNSIGNED", "double unsigned"),
    "iz": ("INT(5) UNSIGNED ZEROFILL", "int(5) unsigned zerofill"),
    "tz": ("TINYINT ZEROFILL", "tinyint(3) unsigned zerofill"),
    "bz": ("BIGINT UNSIGNED ZEROFILL", "bigint(20) unsigned zerofill"),
    "dz": ("DECIMAL(10,2) ZEROFILL", "decimal(10,2) unsigned zerofill"),
    "b1": ("BOOL", "tinyint"),
    "u": ("UUID", "uuid"),
    "g": ("GEOMETRY", "geometry"),
    "p": ("POINT", "point"),
    "ls": ("LINESTRING", "linestring"),
    "pg": ("POLYGON", "polygon"),
    "mp": ("MULTIPOINT", "multipoint"),
    "mls": ("MULTILINESTRING", "multilinestring"),
    "mpg": ("MULTIPOLYGON", "multipolygon"),
    "gc": ("GEOMETRYCOLLECTION", "geometrycollection"),
    "i4": ("INET4", "inet4"),
    "i6": ("INET6", "inet6"),
}
DECLARED = {"id": "int", **{name: declared for name, (_, declared) in COLUMNS.items()}}

GEOMETRY = {
    "g": "POINT(3 4)",
    "p": "POINT(-1.5 2.25)",
    "ls": "LINESTRING(0 0,1 1,2 0)",
    "pg": "POLYGON((0 0,4 0,4 4,0 4,0 0),(1 1,2 1,2 2,1 1))",
    "mp": "MULTIPOINT(1 1,2 2)",
    "mls": "MULTILINESTRING((0 0,1 1),(2 2,3 3))",
    "mpg": "MULTIPOLYGON(((0 0,1 0,1 1,0 0)),((5 5,6 5,6 6,5 5)))",
    "gc": "GEOMETRYCOLLECTION(POINT(1 1),LINESTRING(0 0,1 1))",
}

ROWS: list[dict[str, Any]] = [
    # minimums
    dict(id=1, f=-3.40282e38, f355=-1.2345678e29, fu=0, f72z=0, d=-1.7976931348623157e308,
         d103=-9999999.999, du=0, iz=0, tz=0, bz=0, dz=0, b1=0,
         u="00000000-0000-0000-0000-000000000000", i4="0.0.0.0", i6="::"),
    # maximums, and values FLOAT shows rounded
    dict(id=2, f=3.40282e38, f355=30.12346, fu=3.4028234e38, f72z=99999.95,
         d=1.7976931348623157e308, d103=9999999.999, du=1.7976931348623157e308,
         iz=4294967295, tz=255, bz=18446744073709551615, dz=99999999.99, b1=1,
         u="ffffffff-ffff-ffff-ffff-ffffffffffff", i4="255.255.255.255",
         i6="ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
    # ordinary values; UUIDs of the versions MariaDB stores with swapped segments
    dict(id=3, f=0.1, f355=16777217, fu=1 / 3, f72z=12.345, d=0.1, d103=1 / 3, du=2.5,
         iz=42, tz=7, bz=1, dz=0.01, b1=1, u="e378711a-e968-11f1-aecc-02fc00000001",
         i4="1.2.3.4", i6="::ffff:1.2.3.4"),
    dict(id=4, f=123456.7, f355=123456.7, fu=1234567.5, f72z=0.005, d=1 / 3, d103=0.0005,
         du=5e-324, iz=99999, tz=100, bz=9223372036854775808, dz=12345.675, b1=0,
         u="45d7a48a-5123-48c0-a9c2-8063f496c55e", i4="10.0.0.1", i6="2001:db8::1:0:0:1"),
    dict(id=5, f=1.5e-30, f355=0.000004, fu=1e-45, f72z=1, d=5e-324, d103=-0.0005,
         du=1e300, iz=1, tz=1, bz=2, dz=1, b1=1, u="01234567-89ab-7def-8123-456789abcdef",
         i4="192.168.1.255", i6="1:0:2:3:4:5:6:7"),
    # NULL in every column
    dict(id=6),
]  # fmt: skip


def create(connection: Any, table: str = "t") -> None:
    """The table, keyed by ``id``, with every column of COLUMNS."""
    definition = ", ".join(f"`{name}` {sql}" for name, (sql, _) in COLUMNS.items())
    with connection.cursor() as cursor:
        cursor.execute("SET sql_mode = 'STRICT_ALL_TABLES'")
        cursor.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, {definition})")


def insert(connection: Any, values: dict[str, Any], *, geometry: bool) -> None:
    names = list(values)
    marks = ["%s"] * len(names)
    arguments = list(values.values())
    if geometry:
        names += list(GEOMETRY)
        marks += ["ST_GeomFromText(%s)"] * len(GEOMETRY)
        arguments += list(GEOMETRY.values())
    quoted = ", ".join(f"`{name}`" for name in names)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO t ({quoted}) VALUES ({', '.join(marks)})", arguments)


def select(connection: Any) -> dict[int, dict[str, Any]]:
    """Table ``t`` as SELECT shows it, by id."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM t ORDER BY id")
        names = [d[0] for d in cursor.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


def assert_equal(captured: Any, selected: dict[str, Any], what: str) -> None:
    """Every column of a captured image equals SELECT's value, of the same type."""
    assert captured is not None, what
    for name, want in selected.items():
        got = captured[name]
        assert got == want and type(got) is type(want), (
            f"{what} {name}: captured {got!r}, SELECT {want!r}"
        )


def write_and_change(connection: Any) -> tuple[dict[int, dict[str, Any]], ...]:
    """Table ``t`` (made by ``create``) with ROWS inserted, rows 1 to 5 updated, then
    rows 3 and 6 deleted: the rows as SELECT showed them after the inserts and after
    the updates."""
    for values in ROWS:
        insert(connection, values, geometry=values["id"] != 6)
    inserted = select(connection)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE t SET f = f / 3, f355 = f355 / 7, f72z = f72z / 3, d103 = d103 / 3, "
            "iz = iz DIV 2, u = IF(u IS NULL, NULL, UUID()), "
            "p = IF(p IS NULL, NULL, POINT(7, 8)), i6 = IF(i6 IS NULL, NULL, '::1') WHERE id <= 5"
        )
    updated = select(connection)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM t WHERE id IN (3, 6)")
    return inserted, updated
