"""The diffs of MySQL's partial JSON updates on bytes built here: how they read, and
the ones the capture refuses to apply (a real server writes none of those, so they
are built; ``test_capture_mysql`` reads the ones it writes)."""

from __future__ import annotations

from typing import Any

import pytest

from dbus_fn.capture._json_diff import (
    INSERT,
    REMOVE,
    REPLACE,
    Diff,
    UnappliedDiff,
    apply_diffs,
    read_diffs,
)


def _diff(operation: int, path: str, value: bytes = b"") -> bytes:
    encoded = path.encode()
    body = bytes([operation, len(encoded)]) + encoded
    return body if operation == REMOVE else body + bytes([len(value)]) + value


def _column(*diffs: bytes) -> bytes:
    body = b"".join(diffs)
    return len(body).to_bytes(4, "little") + body


TRUE = b"\x04\x01"  # binary JSON: a literal, true
INT16_7 = b"\x05\x07\x00"  # binary JSON: an int16, 7


def test_a_columns_diffs_read_with_their_paths_and_values() -> None:
    data = b"\xaa" + _column(
        _diff(REPLACE, "$.a", TRUE),
        _diff(INSERT, '$."b c"[last-1]', INT16_7),
        _diff(REMOVE, "$[3]"),
    ) + b"\xbb"  # fmt: skip
    diffs, end = read_diffs(data, 1)
    assert diffs == [
        Diff(REPLACE, "$.a", True), Diff(INSERT, '$."b c"[last-1]', 7), Diff(REMOVE, "$[3]")
    ]  # fmt: skip
    assert data[end:] == b"\xbb"


def test_diffs_apply_as_a_replica_applies_them_and_leave_the_before_image_alone() -> None:
    before = {"bb": [1, 2, 3], "a": {"x": 1}}
    after = apply_diffs(before, [
        Diff(INSERT, "$.c", "new"),
        Diff(INSERT, "$.bb[last]", 2.5),
        Diff(INSERT, "$.bb[99]", "end"),
        Diff(REMOVE, "$.a.x"),
        Diff(REPLACE, "$.bb[0]", None),
    ])  # fmt: skip
    assert before == {"bb": [1, 2, 3], "a": {"x": 1}}
    assert after == {"a": {}, "c": "new", "bb": [None, 2, 2.5, 3, "end"]}
    # MySQL orders an object's members by key length, then bytes: a new one too.
    assert list(after) == ["a", "c", "bb"]


@pytest.mark.parametrize(
    ("document", "diff", "why"),
    [
        ({"a": 1}, Diff(REPLACE, "$.b", 2), "lacks that member"),
        ({"a": 1}, Diff(INSERT, "$.a", 2), "already has that member"),
        ({"a": 1}, Diff(REMOVE, "$.b"), "lacks that member"),
        ([1, 2], Diff(REPLACE, "$[2]", 0), "no such element"),
        ([1, 2], Diff(REMOVE, "$[last-2]"), "no such element"),
        ({"a": 1}, Diff(REPLACE, "$.x.y", 2), "no such path"),
        ({"a": 1}, Diff(REPLACE, "$[0]", 2), "does not fit"),
        ("text", Diff(REPLACE, "$.a", 2), "does not fit"),
        ({"a": 1}, Diff(REPLACE, "$", 2), "whole document"),
        ({"a": 1}, Diff(REPLACE, "$.*", 2), "other than a member name"),
        ([1, 2], Diff(REMOVE, "$[0 to 1]"), "other than an array cell"),
        ({"a": 1}, Diff(REPLACE, "a", 2), "does not start with $"),
    ],
)  # fmt: skip
def test_a_diff_that_does_not_apply_is_refused_naming_it(
    document: Any, diff: Diff, why: str
) -> None:
    with pytest.raises(UnappliedDiff) as refused:
        apply_diffs(document, [diff])
    message = str(refused.value)
    assert why in message and diff.path in message and "\n" not in message


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_column(_diff(REPLACE, "$.a", TRUE))[:-1], "past the end"),
        (_column(bytes([7, 3]) + b"$.a"), "operation 7"),
        (_column(_diff(REPLACE, "$.a", b"")), "cut short"),
    ],
)
def test_diffs_that_do_not_read_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(UnappliedDiff, match=why):
        read_diffs(data, 0)
