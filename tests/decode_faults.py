"""Decoding faults injected into the capture: no server writes a value the row decoders
refuse, so the tests of what happens then make the decoders refuse one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dbus_fn.capture._decode import TableDecoder


def refuse_rows_holding(monkeypatch: Any, mark: str, error: str) -> None:
    """Row decoders (native and Python alike) raise ``ValueError(error)`` at a row whose
    ``note`` column holds ``mark``, as they would at a malformed value: the rows of its
    event before it decode, the rest do not. No server writes a value the decoders
    refuse, so the fault is injected."""
    decode = TableDecoder.images

    def images(self: TableDecoder, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for image, after in decode(self, *args, **kwargs):
            if mark in ((image or {}).get("note"), (after or {}).get("note")):
                raise ValueError(error)
            yield image, after

    monkeypatch.setattr(TableDecoder, "images", images)
