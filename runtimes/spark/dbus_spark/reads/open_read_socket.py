"""How an open read and the tasks of its source talk: a Unix socket in Linux's
abstract namespace, named by the checkpoint and the source, on which the read
listens and a task asks with one JSON line and gets one back, rows and errors in
it as written here (``dbus_spark.reads.open_read``)."""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import pickle
import socket
import time
from collections.abc import Iterable
from typing import Any

from dbus_fn.errors import DbusError

LISTEN_WAIT = 5.0
"""How long a read waits for the socket name an ended read of its source held."""


def digest(checkpoint: str, source: str) -> str:
    return hashlib.sha256(f"{os.path.abspath(checkpoint)}\0{source}".encode()).hexdigest()[:32]


def listen(name: str, source: str) -> socket.socket:
    """A listening socket on ``name``. A read that just ended may hold the name a
    moment longer (its socket is released when its last call on it returns): the
    bind is tried again for up to ``LISTEN_WAIT`` seconds."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + LISTEN_WAIT
    try:
        while True:
            try:
                listener.bind(name)
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise DbusError(
                        f"source {source!r}: its open read's socket is still taken "
                        f"after {LISTEN_WAIT:.0f}s ({exc.strerror}); the batch is read again"
                    ) from exc
                time.sleep(0.02)
        listener.listen(4)
    except BaseException:
        listener.close()
        raise
    return listener


def address(checkpoint: str, source: str) -> str:
    """The socket a source's open read answers on (Linux's abstract namespace: no
    file, and gone with its process)."""
    return f"\0dbus-open-read-{digest(checkpoint, source)}"


def ask(
    checkpoint: str, source: str, request: dict[str, Any], timeout: float | None = None
) -> dict[str, Any] | None:
    """What the source's open read answers (None: no read, it ended meanwhile, or it
    did not answer within ``timeout`` seconds; None: wait as long as it takes)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(address(checkpoint, source))
            conn.sendall(json.dumps(request).encode() + b"\n")
            line = conn.makefile("rb").readline()
    except OSError:
        return None
    if not line:
        return None
    answer: dict[str, Any] = json.loads(line)
    return answer


def rows_to_json(rows: Iterable[tuple[str, bytes]]) -> list[list[str]]:
    """A read's rows for Spark, (kind, value) each, as an answer carries them."""
    return [[kind, base64.b64encode(value).decode()] for kind, value in rows]


def rows_from_json(rows: Iterable[list[str]]) -> tuple[tuple[str, bytes], ...]:
    """The rows an answer carried (``rows_to_json``), as they were."""
    return tuple((kind, base64.b64decode(value)) for kind, value in rows)


def error_to_json(exc: BaseException) -> dict[str, str]:
    """A task's error as an answer carries it: pickled, and its text for a process
    that cannot make its class again."""
    try:
        pickled = pickle.dumps(exc)
    except Exception:  # an error that does not pickle arrives as its text
        pickled = pickle.dumps(DbusError(str(exc)))
    return {"error": base64.b64encode(pickled).decode(), "text": str(exc)}


def error_from_json(answer: dict[str, Any]) -> BaseException:
    """The error an answer carried (``error_to_json``), to raise in the asking task."""
    try:
        error: BaseException = pickle.loads(base64.b64decode(answer["error"]))
    except Exception:  # a class this process cannot make again: its text
        error = DbusError(answer["text"])
    return error
