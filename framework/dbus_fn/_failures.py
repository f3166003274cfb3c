"""How a user function's failure is worded in its dead letter: values, lines, frames, hints."""

from __future__ import annotations

import traceback

from dbus_fn.events import Operation, RowChange

TRACEBACK_FRAMES = 6
"""How many of the user's innermost frames a dead letter keeps."""


def missing_image_hint(change: RowChange, exc: BaseException) -> str:
    """The likeliest cause of a ``NoneType`` error: reading the image an operation lacks."""
    if not isinstance(exc, AttributeError | TypeError) or "NoneType" not in str(exc):
        return ""
    if change.op is Operation.DELETE:
        missing = "event.after is None for a delete"
    elif change.op in (Operation.INSERT, Operation.SNAPSHOT):
        missing = "event.before is None for an insert"
    else:
        return ""
    return (
        f"; hint: {missing}: read event.row (the row as it is, or as it was before a "
        "delete), or limit the function with operations=[...]"
    )


def short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "(no message)"


def user_traceback(exc: BaseException, *, skip: int = 1) -> str:
    """The last frames of ``exc``'s traceback, skipping the pipeline's own frame."""
    tb = exc.__traceback__
    for _ in range(skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    frames = traceback.extract_tb(tb)[-TRACEBACK_FRAMES:]
    lines = [f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames]
    lines.append(f"{type(exc).__name__}: {first_line(exc)}")
    return "\n".join(lines)
