"""Declared column types without a server: how COLUMN_TYPE is named, when it agrees
with the table map, and how values SELECT shows differently are read."""

from __future__ import annotations

import struct
import uuid
from decimal import Decimal

import pytest

from dbus_fn.capture._column_readers import _inet6_text, declared_reader
from dbus_fn.capture._declared_types import agreed_types, declared_type, table_map_type
from dbus_fn.columns import from_json_value, parse_column_type, to_json_value


@pytest.mark.parametrize(
    ("column_type", "named"),
    [
        ("int(11)", "int"),
        ("tinyint(1)", "tinyint"),
        ("bigint(20) unsigned", "bigint unsigned"),
        ("year(4)", "year"),
        ("int(5) unsigned zerofill", "int(5) unsigned zerofill"),
        ("DECIMAL(10,2) UNSIGNED ZEROFILL", "decimal(10,2) unsigned zerofill"),
        ("float(35,5)", "float(35,5)"),
        ("float unsigned", "float unsigned"),
        ("double(10,3)", "double(10,3)"),
        ("point", "point"),
        ("uuid", "uuid"),
        ("varchar(20)", "varchar(20)"),
        ("enum('a','b')", "enum('a','b')"),
    ],
)
def test_column_type_is_named_by_its_declaration(column_type: str, named: str) -> None:
    assert declared_type(column_type) == named
    assert declared_type(column_type, is_json=True) == "json"


@pytest.mark.parametrize(
    ("declared", "table_map"),
    [
        ("int(5) unsigned zerofill", "int unsigned"),
        ("tinyint(3) unsigned zerofill", "tinyint unsigned"),
        ("decimal(10,2) unsigned zerofill", "decimal(10,2) unsigned"),
        ("float(7,2) unsigned zerofill", "float"),
        ("float(35,5)", "float"),
        ("float unsigned", "float"),
        ("double(10,3) unsigned", "double"),
        ("point", "geometry"),
        ("geometrycollection", "geometry"),
        ("geometry", "geometry"),
        ("uuid", "binary(16)"),
        ("inet6", "binary(16)"),
        ("inet4", "binary(4)"),
        ("int unsigned", "int unsigned"),
        ("varchar(20)", "varchar(20)"),
    ],
)
def test_a_declaration_agrees_with_what_the_table_map_says(declared: str, table_map: str) -> None:
    assert table_map_type(declared) == table_map
    # every declared type has a JSON mapping, and a value of it reads back
    assert parse_column_type(declared).family


def test_a_declaration_is_used_only_when_it_describes_the_table_map() -> None:
    declared = [("id", "int"), ("u", "uuid"), ("f", "float(7,2)")]
    names, mapped = ["id", "u", "f"], ["int", "binary(16)", "float"]
    assert agreed_types(names, mapped, declared) == ("int", "uuid", "float(7,2)")
    assert agreed_types(names[:2], mapped[:2], declared) is None  # a column added since
    # a column information_schema does not show (a system-versioned table's row_end)
    assert agreed_types([*names, "row_end"], [*mapped, "timestamp(6)"], declared) == (
        "int", "uuid", "float(7,2)", "timestamp(6)",
    )  # fmt: skip
    assert agreed_types(["f", "u", "id"], mapped[::-1], declared) is None  # another order
    assert agreed_types(["id", "v", "f"], mapped, declared) is None  # a column renamed
    assert agreed_types(names, ["int", "binary(16)", "double"], declared) is None  # retyped
    assert agreed_types(names, mapped, ()) is None  # the table is gone


def _length_prefixed(value: bytes) -> bytes:
    return bytes([len(value)]) + value


def test_float_m_d_is_read_with_d_decimals_as_select_shows_it() -> None:
    def plain(data: bytes, offset: int) -> tuple[float, int]:
        raise AssertionError("FLOAT(M,D) has a reader of its own")

    image = struct.pack("<f", 30.12346) + struct.pack("<f", 99999.95)
    read = declared_reader("float(35,5)", plain)
    assert read(image, 0) == (30.12346, 4)
    assert declared_reader("float(7,2) unsigned zerofill", plain)(image, 4) == (99999.95, 8)


def test_uuid_and_inet_are_read_as_their_text() -> None:
    def raw(data: bytes, offset: int) -> tuple[bytes, int]:
        return data[offset + 1 : offset + 1 + data[offset]], offset + 1 + data[offset]

    text = "e378711a-e968-11f1-aecc-02fc00000001"
    assert declared_reader("uuid", raw)(_length_prefixed(uuid.UUID(text).bytes), 0) == (text, 17)
    assert declared_reader("inet4", raw)(_length_prefixed(bytes([10, 0, 0, 255])), 0) == (
        "10.0.0.255", 5,
    )  # fmt: skip
    assert declared_reader("varchar(5)", raw) is raw


@pytest.mark.parametrize(
    "address",
    [
        "::", "::1", "::2", "::100", "::0.1.0.0", "::ffff:1.2.3.4", "::ffff:0.0.0.0",
        "1::2:3:4:5:6:7", "1::", "2001:db8::1:0:0:1", "64:ff9b::102:304", "fe80::1:2:3:4",
        "1:2:3:4:5:6:7:8", "1::2:0:0:3", "abcd:ef01:2345:6789:abcd:ef01:2345:6789",
    ],
)  # fmt: skip
def test_inet6_text_is_mariadbs(address: str) -> None:
    # Each text is what MariaDB 10.11 shows for the address (CAST(... AS INET6)).
    import ipaddress

    assert _inet6_text(ipaddress.IPv6Address(address).packed) == address


@pytest.mark.parametrize(
    ("column_type", "value", "json_value"),
    [
        ("int(5) unsigned zerofill", 42, 42),
        ("bigint(20) unsigned zerofill", 2**64 - 1, 2**64 - 1),
        ("decimal(10,2) unsigned zerofill", Decimal("12.50"), "12.50"),
        ("float(35,5) unsigned", 30.12346, 30.12346),
        ("double(10,3)", 0.333, 0.333),
        ("uuid", "e378711a-e968-11f1-aecc-02fc00000001", "e378711a-e968-11f1-aecc-02fc00000001"),
        ("inet6", "::ffff:1.2.3.4", "::ffff:1.2.3.4"),
        ("point", b"\0\0\0\0\x01\x01", "AAAAAAEB"),
        ("multipolygon", b"\x01", "AQ=="),
    ],
)
def test_every_declared_type_has_its_json_form(
    column_type: str, value: object, json_value: object
) -> None:
    assert to_json_value(value, column_type) == json_value
    assert from_json_value(to_json_value(value, column_type), column_type) == value


@pytest.mark.parametrize(
    ("column_type", "named"),
    [
        (
            "enum('a\\\\b','x\\ny','q''r','n\\0l','c\\rr')",
            "enum('a\\b','x\ny','q''r','n\0l','c\rr')",
        ),
        ("enum('Up  Case','')", "enum('Up  Case','')"),
        ("ENUM('a','b')", "enum('a','b')"),
        ("set('A''','b\\\\',' c ')", "set('A''','b\\',' c ')"),
    ],
)
def test_enum_and_set_members_are_quoted_as_the_binlog_decoder_quotes_them(
    column_type: str, named: str
) -> None:
    assert declared_type(column_type) == named
    assert table_map_type(named) == named
