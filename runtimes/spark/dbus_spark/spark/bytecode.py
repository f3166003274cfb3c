"""Spark's Python processes start faster from byte code.

Spark starts every Python process of a runtime (each planner's daemon and worker,
the streaming source's runner, the task workers' daemon, the sink's runner: a dozen
through a query's start, one after another) with ``$SPARK_HOME/python/lib/pyspark.zip``
first on its path, so each imports pyspark from that zip. The zip holds source only,
and Python keeps no compiled cache for a zip: every one of those processes compiled
the pyspark modules it imports, 0.5-0.8 s of a core each (``import pyspark.daemon``
0.75-0.97 s from the zip against 0.25-0.27 s from the same zip with byte code, one
planner's module 0.87-1.00 s against 0.35 s), while the query's start waited for it.

``python -m dbus_spark.spark.bytecode`` writes the byte code of every module into that zip,
beside its source (``deploy/dev``, the integration tests' tox environment and the
runtime image run it; a few seconds, once per environment). Each module's byte code
is checked against its source's hash when it is imported (PEP 552), so it is never
used for another source; an interpreter of another version ignores it and compiles
the source, as before. A zip that cannot be written (a read-only install) is left as
it is, with one warning line: the runtime only starts slower.
"""

from __future__ import annotations

import contextlib
import importlib.util
import marshal
import os
import shutil
import sys
import time
import warnings
import zipfile
from pathlib import Path

ZIP_NAME = "pyspark.zip"
_CHECKED_HASH = 0b11
"""A byte code file's flags (PEP 552): made from its source's hash, checked on import."""
_FIRST = "pyspark/__init__.pyc"


def worker_zip() -> Path | None:
    """The zip Spark puts first on its Python processes' path (None: there is none)."""
    from pyspark.find_spark_home import _find_spark_home

    path = Path(_find_spark_home()) / "python" / "lib" / ZIP_NAME
    return path if path.is_file() else None


def compiled(path: Path) -> bool:
    """Whether the zip at ``path`` holds byte code this interpreter imports."""
    with zipfile.ZipFile(path) as archive:
        try:
            with archive.open(_FIRST) as first:
                return first.read(4) == importlib.util.MAGIC_NUMBER
        except KeyError:
            return False


def _byte_code(source: bytes, filename: str) -> bytes | None:
    """A module's byte code file for ``source`` (PEP 552, hash-checked); None for a
    source this interpreter cannot compile (a test of another Python version)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyspark's own SyntaxWarnings
            code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None
    flags = _CHECKED_HASH.to_bytes(4, "little")
    header = importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def compile_zip(path: Path) -> int:
    """Rewrite the zip at ``path`` with each module's byte code beside its source (byte
    code already there, of any version, is made again); replaced whole, at once.
    How many modules it holds byte code for."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    count = 0
    try:
        with (
            zipfile.ZipFile(path) as source,
            zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out,
        ):
            names = set(source.namelist())
            for info in source.infolist():
                name = info.filename
                if name.endswith(".pyc") and name[:-1] in names:
                    continue  # made again below, by this interpreter
                data = source.read(info)
                out.writestr(info, data)
                if not name.endswith(".py"):
                    continue
                code = _byte_code(data, str(path / name))
                if code is None:
                    continue
                entry = zipfile.ZipInfo(f"{name}c", date_time=info.date_time)
                entry.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(entry, code)
                count += 1
        shutil.copymode(path, partial)
        partial.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return count


def main() -> int:
    path = worker_zip()
    if path is None:
        return 0
    began = time.monotonic()
    try:
        if compiled(path):
            return 0
        count = compile_zip(path)
    except Exception as exc:  # a faster start is a bonus: never fail an install for it
        print(f"dbus: warning: no byte code in Spark's {path} ({exc}); Spark's Python "
              "processes start slower", file=sys.stderr)  # fmt: skip
        return 0
    took = time.monotonic() - began
    print(f"dbus: byte code for {count} modules written into {path} in {took:.0f} s: "
          "Spark's Python processes start faster")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
