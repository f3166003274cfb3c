"""Row images as JSON text, the form a Kafka message's value holds them in:
``json.dumps(row_to_json(row, column_types))`` (``dbus_fn.columns``), written natively
by ``dbus_native.ImageEncoder`` (``framework/native/src/encode.rs``) when it is built
and ``DBUS_NATIVE_ENCODE`` is not 0, and by the Python codecs otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any

from dbus_fn._native import native
from dbus_fn.column_types import ColumnFamily, parse_column_type
from dbus_fn.columns import JsonValue, _codec, _integer_bounds, row_encoder
from dbus_fn.errors import UnsupportedColumnTypeError
from dbus_fn.events import Row

NATIVE_SWITCH = "DBUS_NATIVE_ENCODE"
"""Set to 0 to write row images' JSON text in Python alone."""
_JSON_TEXT = json.JSONEncoder().encode  # what json.dumps uses with its defaults
_NATIVE_FAMILIES: dict[ColumnFamily, str] = {
    "integer": "int", "bit": "int", "float": "float", "date": "date", "time": "time",
    "datetime": "datetime", "timestamp": "timestamp", "year": "year", "text": "text",
    "enum": "text", "bytes": "bytes", "set": "set", "decimal": "pystr", "json": "python",
    "vector": "python",
}  # fmt: skip
"""How the native encoder writes each family; ``pystr``: the codec's string, quoted;
``python``: the JSON text of the codec's value."""


def row_json_encoder(column_types: Mapping[str, str]) -> Callable[[Mapping[str, Any]], str]:
    """The JSON text of rows of these column types, ``json.dumps(row_to_json(row,
    column_types))``, written natively when ``dbus_native`` is built (and
    ``DBUS_NATIVE_ENCODE`` is not 0). A row the native encoder leaves to Python (a
    value outside its common types, or one that does not fit) is written, or
    refused with the same errors, by ``row_encoder``."""
    encode = row_encoder(column_types)

    def in_python(row: Mapping[str, Any]) -> str:
        return _JSON_TEXT(encode(row))

    encoder = _native_encoder(column_types)
    if encoder is None:
        return in_python
    write = encoder.encode

    def natively(row: Mapping[str, Any]) -> str:
        columns = row._columns if type(row) is Row else row
        if type(columns) is dict:
            text: str | None = write(columns)
            if text is not None:
                return text
        return in_python(row)

    return natively


def _native_encoder(column_types: Mapping[str, str]) -> Any | None:
    module = native(NATIVE_SWITCH)
    if module is None:
        return None
    described = []
    for name, column_type in column_types.items():
        try:
            parsed = parse_column_type(column_type)
            codec = _codec(column_type)
        except UnsupportedColumnTypeError:
            return None  # every row takes the Python path, which names the column
        family = _NATIVE_FAMILIES[parsed.family]
        low, high = _integer_bounds(parsed) if family == "int" else (0, 0)
        writer = _json_text_of(codec.to_json) if family == "python" else codec.to_json
        described.append((name, family, low, high, writer))
    return module.ImageEncoder(described, (date, datetime, UTC))


def _json_text_of(to_json: Callable[[Any], JsonValue]) -> Callable[[Any], str]:
    def write(value: Any) -> str:
        return _JSON_TEXT(to_json(value))

    return write
