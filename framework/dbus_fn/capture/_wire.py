"""MySQL's length-encoded integers, as binlog events and their row images write them.

One value takes 1, 3, 4 or 9 bytes: below 251 the byte itself, else a marker (252,
253, 254) and 2, 3 or 8 little-endian bytes (``net_field_length`` in MySQL's
sources). Payload headers, a row event's extra options and a partial JSON update's
lengths are all written this way.
"""

from __future__ import annotations

_WIDTHS = {252: 2, 253: 3, 254: 8}


def field_number(data: bytes, offset: int) -> tuple[int, int]:
    """The length-encoded integer at ``offset``, and where it ends."""
    first = data[offset]
    if first < 251:
        return first, offset + 1
    width = _WIDTHS[first]
    return int.from_bytes(data[offset + 1 : offset + 1 + width], "little"), offset + 1 + width
