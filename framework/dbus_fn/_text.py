"""The text files a user writes for dbus (``dbus.toml``, ``requirements.txt``, events) are
UTF-8: reading one, and naming in words what is wrong with one that is not.

Editors on some systems save UTF-16 with a byte order mark, or UTF-8 with one: the
first is named as such (issue #46: it was a ``UnicodeDecodeError`` traceback), the
second is read past, as every UTF-8 reader of dbus does.
"""

from __future__ import annotations

import codecs
from pathlib import Path

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def read_utf8(path: Path) -> str:
    """The text of ``path`` (a leading UTF-8 byte order mark read past).

    Raises ``UnicodeDecodeError`` for bytes that are not UTF-8 (``not_utf8`` says
    what they are) and ``OSError`` for a file that cannot be read.
    """
    return path.read_bytes().decode("utf-8-sig")


def not_utf8(exc: UnicodeDecodeError) -> str:
    """What a ``UnicodeDecodeError`` of UTF-8 means, for a message: ``is not UTF-8 text
    but UTF-16 (...)`` or ``is not UTF-8 text (byte 0xff at offset 12)``."""
    data = bytes(exc.object)
    if data.startswith(_UTF16_BOMS):
        return "is not UTF-8 text but UTF-16 (it starts with a UTF-16 byte order mark)"
    return f"is not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})"
