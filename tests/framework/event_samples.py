"""Sample capture items shared by the event envelope tests: every column type."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from dbus_fn import BinlogPosition, Operation, RowChange, SchemaChange, TransactionCommit

EVERY_TYPE: dict[str, tuple[str, Any]] = {
    "id": ("bigint unsigned", 18446744073709551615),
    "tiny": ("tinyint", -128),
    "flag": ("tinyint(1)", 1),
    "small": ("smallint unsigned", 65535),
    "medium": ("mediumint", -8388608),
    "i": ("int unsigned", 4294967295),
    "i_signed": ("int(11)", -2147483648),
    "big_signed": ("bigint", -(2**63)),
    "zero_filled": ("int(5) unsigned zerofill", 42),
    "dec": (
        "decimal(65,30)",
        Decimal("12345678901234567890123456789012345.123456789012345678901234567890"),
    ),
    "dec_small": ("decimal(10,2)", Decimal("-0.01")),
    "dec_zero": ("decimal(65,30)", Decimal("0E-30")),
    "dbl": ("double", 1.7976931348623157e308),
    "dbl_neg_zero": ("double", -0.0),
    "flt": ("float", 1.100000023841858),
    "d": ("date", date(1000, 1, 1)),
    "t_neg": ("time(6)", -timedelta(hours=838, minutes=59, seconds=59, microseconds=999999)),
    "t_max": ("time", timedelta(hours=838, minutes=59, seconds=59)),
    "t_small_neg": ("time(3)", -timedelta(microseconds=1000)),
    "dt": ("datetime(6)", datetime(9999, 12, 31, 23, 59, 59, 999999)),
    "dt_whole": ("datetime", datetime(1000, 1, 1, 0, 0, 0)),
    "ts": ("timestamp(6)", datetime(2038, 1, 19, 3, 14, 7, 499999, tzinfo=UTC)),
    "y": ("year", 2155),
    "c": ("char(10)", "abc"),
    "vc": ("varchar(255)", 'emoji 😀 ünïcode "quoted" \n\t newline 漢字'),
    "txt": ("text", ""),
    "long_txt": ("longtext", "x" * 10_000),
    "bin": ("binary(16)", bytes(range(16))),
    "vb": ("varbinary(64)", b"\x00\xff"),
    "blb": ("blob", b""),
    "lb": ("longblob", bytes(range(256)) * 4),
    "e": ("enum('a','b','it''s')", "it's"),
    "s": ("set('x','y','z')", frozenset({"z", "x"})),
    "s_empty": ("set('x','y')", frozenset()),
    "b1": ("bit(1)", 1),
    "b64": ("bit(64)", 2**64 - 1),
    "j": ("json", {"a": [1, 2.5, {"b": None}], "c": "😀", "d": True, "big": 2**70}),
    "j_scalar": ("json", "just a string"),
    "null_int": ("int", None),
    "null_dec": ("decimal(10,2)", None),
    "null_txt": ("text", None),
    "null_blob": ("blob", None),
    "null_ts": ("timestamp", None),
    "null_set": ("set('a')", None),
    "null_json": ("json", None),
}

COLUMN_TYPES = {name: column_type for name, (column_type, _) in EVERY_TYPE.items()}
ROW = {name: value for name, (_, value) in EVERY_TYPE.items()}
POSITION = BinlogPosition("mysql-bin.000042", 123456789, "0-1-77")
COMMIT_TIME = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def row_change(op: Operation = Operation.UPDATE, **overrides: Any) -> RowChange:
    """A change of a table with one column of every type."""
    before = {**ROW, "vc": "before", "s": frozenset({"y"})}
    fields: dict[str, Any] = {
        "source": "shop-primary",
        "database": "shop",
        "table": "every_type",
        "op": op,
        "before": None if op in (Operation.INSERT, Operation.SNAPSHOT) else before,
        "after": None if op is Operation.DELETE else ROW,
        "primary_key": ("id",),
        "position": POSITION,
        "commit_time": COMMIT_TIME,
        "server_id": "1",
        "row_index": 3,
        "transaction_id": "0-1-77",
        "column_types": COLUMN_TYPES,
        "schema_version": 7,
    }
    fields.update(overrides)
    return RowChange(**fields)


def schema_change(table: str | None = "orders") -> SchemaChange:
    return SchemaChange(
        source="shop-primary",
        database="shop",
        table=table,
        statement="ALTER TABLE orders ADD COLUMN note varchar(20)",
        position=POSITION,
        commit_time=COMMIT_TIME,
        server_id="1",
    )


def transaction_commit() -> TransactionCommit:
    return TransactionCommit(
        source="shop-primary",
        position=BinlogPosition("mysql-bin.000042", 123457000, "0-1-77"),
        commit_time=COMMIT_TIME,
        server_id="1",
        transaction_id="0-1-77",
        rows=3,
    )


def assert_same_row(actual: Any, expected: Any) -> None:
    """Equal values of identical types; decimals with identical digits and exponent."""
    if expected is None:
        assert actual is None
        return
    assert list(actual) == list(expected)
    for name, value in expected.items():
        got = actual[name]
        assert type(got) is type(value), (name, type(got), type(value))
        assert got == value, name
        if isinstance(value, Decimal):
            assert got.as_tuple() == value.as_tuple(), name
        if isinstance(value, float):
            assert repr(got) == repr(value), name  # keeps -0.0 apart from 0.0
        if isinstance(value, datetime):
            assert got.utcoffset() == value.utcoffset(), name


def assert_same_change(actual: RowChange, expected: RowChange) -> None:
    assert actual == expected
    assert_same_row(actual.before, expected.before)
    assert_same_row(actual.after, expected.after)
    assert dict(actual.column_types) == dict(expected.column_types)
