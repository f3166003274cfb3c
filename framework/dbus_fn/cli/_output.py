"""Files a command writes (``-o``): a user's existing file is never emptied by a failed run.

The output goes to a hidden temporary file beside the target and replaces it only
when the command ends without an error (a Ctrl-C that ends a recording is not an
error); an existing file is replaced only with ``--force``, or added to with
``--append``. A folder that does not exist, or that takes no new file (read-only,
``/proc``...), is refused before anything runs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from dbus_fn.errors import ConfigError
from dbus_fn.files import cannot_create_in


def check_output(
    path: Path, *, option: str = "--output", force: bool = False, append: bool = False
) -> None:
    """Refuse, before any work, an output file that cannot or must not be written."""
    if force and append:
        raise ConfigError(
            f"{option}: --force and --append exclude each other; choose one", setting=option
        )
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ConfigError(f"{option} {path} is a folder; name a file in it", setting=option)
    if not folder.is_dir():
        raise ConfigError(
            f"{option} {path}: the folder {folder} does not exist; create it first "
            f"(mkdir -p {folder}) or choose another file",
            setting=option,
        )
    refused = cannot_create_in(folder)
    if refused is not None:
        raise ConfigError(
            f"{option} {path}: cannot create a file in {folder} ({refused.strerror}); "
            f"choose a writable path with {option}",
            setting=option,
        )
    if path.exists() and not (force or append):
        raise ConfigError(
            f"{option} {path} already exists; pass --force to replace it, --append to add "
            "to it, or choose another file",
            setting=option,
        )


@contextlib.contextmanager
def output_file(path: Path, *, binary: bool, append: bool = False) -> Iterator[IO[Any]]:
    """The file to write ``path`` through; it is in place only if the block succeeds.

    With ``append``, lines go straight to the end of ``path``: what it held stays.
    """
    text: dict[str, Any] = {} if binary else {"encoding": "utf-8"}
    if append:
        with open(path, "ab" if binary else "a", **text) as out:
            yield out
        return
    folder = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "wb" if binary else "w", **text) as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
