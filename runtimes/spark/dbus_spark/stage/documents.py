"""The Elasticsearch document of a row change: its id, its version and its body.

Every delivery to an ``es://`` destination becomes an ``IndexAction`` here, and
``dbus fn verify`` builds the documents it expects the same way, so an index and
its check never disagree on what a row's document is.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from dbus_fn.cloudevent import image_digests, key_json, primary_key_text, row_digest, row_json
from dbus_fn.columns import row_encoder
from dbus_fn.errors import ColumnValueError, UnsupportedColumnTypeError
from dbus_fn.events import Operation, RowChange
from dbus_spark.state.records import IndexAction, document_version


class IndexActions:
    """The Elasticsearch writes of row changes: each row is its document.

    The document's ``_id`` is the primary key (a one-column key as its plain value,
    a composite key as its JSON array); a row of a table without a primary key is
    named by its image (``dbus_fn.cloudevent.image_digest`` of the row as captured,
    before projections), so an update deletes the old image's document and writes
    the new one's. Its version grows with the binlog position; a delete removes the
    document. The row is in its JSON form, as the change's
    CloudEvent carries it, so a row reads the same in every sink, with one
    exception: a zero or partial date (``"0000-00-00"``) is ``null``, because a date
    field holds no year 0 or month 0. Rows of one set of column types share their
    codecs, built once. ``dbus fn verify`` builds its expected documents here too.
    """

    _LIMIT = 512

    def __init__(self) -> None:
        self._shapes: dict[tuple[tuple[str, str], ...], _DocumentShape] = {}

    def writes(
        self,
        change: RowChange,
        index: str,
        *,
        dead_letter: str = "",
        original: RowChange | None = None,
    ) -> Iterator[IndexAction]:
        """The writes of one delivered change: its ``build``, after, for an update of a
        table without a primary key whose row image changed, the delete of the
        document of its old image (the row's identity is its image)."""
        action = self.build(change, index, dead_letter=dead_letter, original=original)
        if not change.primary_key and change.op is Operation.UPDATE:
            old, _ = image_digests(original or change)
            if old is not None and old != action.doc_id:
                yield replace(action, doc_id=old, document=None)
        yield action

    def build(
        self,
        change: RowChange,
        index: str,
        *,
        dead_letter: str = "",
        original: RowChange | None = None,
    ) -> IndexAction:
        """The write of the change's row: ``original`` is the change as captured, before
        projections, whose row names the document of a table without a primary key."""
        types: Mapping[str, str] = change.column_types
        encode, calendar = self._shape(types)
        try:
            image = encode(change.row)
        except (ColumnValueError, UnsupportedColumnTypeError):
            image, types = row_json(change)  # infers what the declared types do not fit
            calendar = _calendar_columns(types)
        if not change.primary_key:
            doc_id = row_digest(original or change)
        elif any(name not in image for name in change.primary_key):
            primary_key_text(change)  # raises the event format's error naming the column
            raise AssertionError("unreachable: a missing key column is an error")
        else:
            doc_id = document_id([image[name] for name in change.primary_key])
        return IndexAction(
            index=index,
            doc_id=doc_id,
            # A snapshot row sits between the changes before its position and after.
            version=document_version(
                change.position, 0 if change.op is Operation.SNAPSHOT else change.row_index
            ),
            document=None
            if change.op is Operation.DELETE
            else _without_zero_dates(image, change.row, calendar),
            column_types=types,
            dead_letter=dead_letter,
            change=pickle.dumps(change, protocol=pickle.HIGHEST_PROTOCOL),
        )

    def _shape(self, types: Mapping[str, str]) -> _DocumentShape:
        shape = tuple(types.items())
        found = self._shapes.get(shape)
        if found is None:
            if len(self._shapes) >= self._LIMIT:
                self._shapes.clear()
            found = self._shapes[shape] = (row_encoder(types), _calendar_columns(types))
        return found


# A row encoder, and the DATE/DATETIME/TIMESTAMP columns a zero date may be in.
_DocumentShape = tuple[Callable[..., dict[str, Any]], tuple[str, ...]]


def _calendar_columns(types: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(
        name
        for name, column_type in types.items()
        if column_type.split("(", 1)[0].strip() in ("date", "datetime", "timestamp")
    )


def _without_zero_dates(
    image: dict[str, Any], row: Mapping[str, Any], calendar: tuple[str, ...]
) -> dict[str, Any]:
    """The document of a row: a zero or partial date, held as text in the row (see
    ``dbus_fn.columns``), is ``null``, as no Elasticsearch date holds year 0 or month 0."""
    zero = [name for name in calendar if isinstance(row.get(name), str)]
    return {**image, **dict.fromkeys(zero)} if zero else image


def document_id(key: list[Any]) -> str:
    """A document's ``_id``: a one-column key as its plain value, else its JSON array."""
    single = len(key) == 1 and isinstance(key[0], int | str)
    return str(key[0]) if single else key_json(key)


def index_action(change: RowChange, index: str, *, dead_letter: str = "") -> IndexAction:
    """The Elasticsearch write of one row change (see ``IndexActions``)."""
    return IndexActions().build(change, index, dead_letter=dead_letter)


__all__ = ["IndexActions", "document_id", "index_action"]
