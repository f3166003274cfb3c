"""Elasticsearch field types of declared column types: zerofill and (M,D) change
nothing a value can hold; MariaDB's UUID and INET values are text."""

from __future__ import annotations

import pytest

from dbus_spark.sinks.elasticsearch import field_mapping


@pytest.mark.parametrize(
    ("column_type", "es_type"),
    [
        ("bigint(20) unsigned zerofill", "keyword"),  # up to 2^64 - 1: no long holds it
        ("int(5) unsigned zerofill", "long"),
        ("tinyint(3) unsigned zerofill", "long"),
        ("decimal(10,2) unsigned zerofill", "keyword"),
        ("float(35,5) unsigned", "double"),
        ("float(7,2) unsigned zerofill", "double"),
        ("double(10,3)", "double"),
        ("vector(3)", "float"),  # MySQL 9: an array of float32s
        ("uuid", "keyword"),
        ("inet4", "keyword"),
        ("inet6", "keyword"),
        ("enum('a)','b')", "keyword"),
    ],
)
def test_declared_types_map_to_what_their_values_need(column_type: str, es_type: str) -> None:
    mapping = field_mapping(column_type)
    assert mapping is not None and mapping["type"] == es_type


@pytest.mark.parametrize("column_type", ["point", "geometrycollection", "geometry"])
def test_spatial_columns_stay_dynamic_as_before(column_type: str) -> None:
    assert field_mapping(column_type) is None
