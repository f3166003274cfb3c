"""Files replaced whole: a reader sees the old text or the new one, never half of it.

State that another process reads while it may be rewritten (the sources file, a
runtime's configuration and positions, history requests, batch reports) goes
through ``replace_file``: the text is written to a sibling file, then renamed
over the old one, which is atomic on every local file system. Where such a file
(or an output, or a checkpoint) is to be made, ``cannot_create_in`` says first,
before any work, whether the folder takes a new entry.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path


def replace_file(path: Path, text: str, *, mode: int = 0o666, parents: bool = False) -> None:
    """Make ``path`` hold ``text`` (UTF-8) in one step.

    ``mode`` is the new file's permission before the umask, set as it is made (so
    0o600 never exposes a secret for a moment); ``parents`` makes missing folders.
    """
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per process and thread; a name a killed process left is written over.
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def cannot_create_in(folder: Path) -> OSError | None:
    """Why no new entry can be made in the existing ``folder``, or None when one can.

    It is found out by making one and removing it at once: permission bits do not
    tell (root passes them), and a read-only mount, an immutable folder or ``/proc``
    and ``/sys`` refuse root too.
    """
    try:
        probe = tempfile.mkdtemp(dir=folder, prefix=".dbus-probe-")
    except OSError as exc:
        return exc
    os.rmdir(probe)
    return None
