"""A row change's images and columns as its CloudEvent carries them, and the identity
of a row without a primary key (its image's digest).

``dbus_fn.cloudevent`` writes events from these; sinks that store rows rather than
events (Elasticsearch) use ``row_json`` and ``row_digest`` so a row reads the same,
and is named the same, in every sink.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from dbus_fn.columns import infer_column_type, row_to_json, to_json_value
from dbus_fn.errors import ColumnValueError, UnsupportedColumnTypeError
from dbus_fn.events import Row, RowChange


def encoded_images(
    change: RowChange,
) -> tuple[dict[str, str], dict[str, Any] | None, dict[str, Any] | None]:
    """The column types of the event and the JSON forms of both images.

    Declared types are used as they are whenever the values fit them, which is
    always the case for changes from capture. A column declared nowhere, or whose
    values no longer fit the declared type (a projection turned a DECIMAL into a
    float, say), gets the type inferred from its values, so the event still reads
    back as the change it came from.
    """
    declared = change.column_types
    try:
        return (
            dict(declared),
            image_to_json(change.before, declared),
            image_to_json(change.after, declared),
        )
    except (ColumnValueError, UnsupportedColumnTypeError):
        pass  # work out the columns one by one below
    images = [image for image in (change.after, change.before) if image is not None]
    types = dict(declared)
    for name in dict.fromkeys(name for image in images for name in image):
        values = [image[name] for image in images if image.get(name) is not None]
        types[name] = _fitting_type(name, values, declared.get(name))
    return types, image_to_json(change.before, types), image_to_json(change.after, types)


def _fitting_type(column: str, values: list[Any], declared: str | None) -> str:
    if declared is not None:
        to_json_value(None, declared, column=column)  # an unknown declared type is an error
        try:
            for value in values:
                to_json_value(value, declared, column=column)
            return declared
        except ColumnValueError:
            pass
    inferred = infer_column_type(values[0], column=column) if values else "json"
    for value in values:
        to_json_value(value, inferred, column=column)  # images that disagree are an error
    return inferred


def image_digest(image: Mapping[str, Any]) -> str:
    """The identity of a row image of a table without a primary key: the SHA-1 (hex)
    of its JSON form with sorted keys. Equal rows have equal digests."""
    text = json.dumps(image, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def image_digests(change: RowChange) -> tuple[str | None, str | None]:
    """``image_digest`` of the change's ``before`` and ``after`` (``None``: no image)."""
    _, before, after = encoded_images(change)
    return (
        None if before is None else image_digest(before),
        None if after is None else image_digest(after),
    )


def row_digest(change: RowChange) -> str:
    """``image_digest`` of the change's row (``after``, or ``before`` for a delete)."""
    before, after = image_digests(change)
    digest = after or before
    assert digest is not None, "a row change has at least one image"
    return digest


def row_json(change: RowChange) -> tuple[dict[str, Any], dict[str, str]]:
    """The JSON form of the change's row (``after``, or ``before`` for a delete) and
    the column types it was written with, exactly as its CloudEvent carries them.

    Sinks that store rows rather than events (Elasticsearch) use it, so a
    projected row reads the same in every sink.
    """
    types, before, after = encoded_images(change)
    image = after if after is not None else before
    assert image is not None, "a row change has at least one image"
    return image, types


def image_to_json(image: Row | None, types: Mapping[str, str]) -> dict[str, Any] | None:
    return None if image is None else row_to_json(image, types)


__all__ = [
    "encoded_images",
    "image_digest",
    "image_digests",
    "image_to_json",
    "row_digest",
    "row_json",
]
