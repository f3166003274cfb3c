"""The options dbus starts Spark's JVMs with: its class archive, and the user's own.

Most of a runtime's start is Spark's session: its JVM loads and links some
thousands of classes from the pyspark package's jars. Java's class-data sharing
keeps them, parsed and laid out, in an archive the JVM maps instead
(``-XX:SharedArchiveFile``); one session started with ``-XX:ArchiveClassesAtExit``
writes it when its JVM ends. Measured on 2 cores: a session in 10.7-10.9 s with the
archive, 17.1-17.3 s without (docs/performance.md).

The archive belongs to one environment's jars, so it lives in that environment
(``<sys.prefix>/share/dbus/``), named after the pyspark version. ``python -m
dbus_spark.config.jvm`` makes it when it is missing (``deploy/dev`` runs it); the runtime
uses it when it is there (``java_options``). A JVM that cannot use it (another Java,
a damaged file) starts as without it, and says nothing: ``-Xlog`` silences it.
``DBUS_SPARK_CLASS_ARCHIVE`` names another file, or ``off``.

``DBUS_SPARK_JAVA_OPTIONS`` adds JVM options of the user's to the driver's and the
executors' (``added_options``): a heap setting, a GC, a flag for a profiler. Spark
starts its JVMs with ``-XX:+IgnoreUnrecognizedVMOptions``, so a ``-XX`` option the
JVM does not know is passed over; one it cannot start with is a ``ConfigError``
quoting the JVM (``refused_options``). The test
suite's runtimes run seconds each, so it sets ``-XX:TieredStopAtLevel=1
-XX:+UseSerialGC`` there: no optimising compiler and one GC thread, which measured
40% less CPU for a short session on 2 cores (tests/README.md). A long-running
runtime wants Java's defaults.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil

from dbus_fn.errors import ConfigError

ARCHIVE_ENV = "DBUS_SPARK_CLASS_ARCHIVE"
OPTIONS_ENV = "DBUS_SPARK_JAVA_OPTIONS"
_DUMP_ENV = "DBUS_SPARK_CLASS_ARCHIVE_DUMP"
"""Set by ``build`` for its session's process: where that JVM writes the archive."""
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
BUILD_SECONDS = 600.0


def archive_path() -> Path | None:
    """Where this environment's archive is (or goes); None when turned off."""
    chosen = os.environ.get(ARCHIVE_ENV, "").strip()
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    import pyspark

    return Path(sys.prefix) / "share" / "dbus" / f"spark-classes-{pyspark.__version__}.jsa"


def java_options() -> str:
    """The JVM options that start Spark from the archive, when there is one (or, in
    ``build``'s session, that write it)."""
    dump = os.environ.get(_DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def added_options() -> list[str]:
    """The JVM options ``DBUS_SPARK_JAVA_OPTIONS`` adds, split as a shell splits them.
    Raises ``ConfigError`` (one line, with the fix) when they are not options."""
    raw = os.environ.get(OPTIONS_ENV, "")
    try:
        options = shlex.split(raw)
    except ValueError as exc:
        raise ConfigError(
            f"{OPTIONS_ENV}={raw!r} does not split into options ({exc}): "
            "quote each option whole, or unset it",
            setting=OPTIONS_ENV,
        ) from None
    for option in options:
        if not option.startswith("-"):
            raise ConfigError(
                f"{OPTIONS_ENV}: {option!r} is not a JVM option (they begin with '-', "
                "as in -Xmx2g): fix it or unset it",
                setting=OPTIONS_ENV,
            )
    return options


def refused_options() -> str | None:
    """What the JVM says of ``DBUS_SPARK_JAVA_OPTIONS`` when it will not start with
    them (its first line), or None: asked once Spark's JVM has failed to start, of
    the java Spark runs (``JAVA_HOME``'s, else the one on ``PATH``)."""
    options = added_options()
    if not options:
        return None
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else "java"
    try:
        done = subprocess.run([java, *options, "-version"],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except OSError:
        return None
    if done.returncode == 0:
        return None
    said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return said[0] if said else f"exit {done.returncode}"


def build(path: Path, timeout: float = BUILD_SECONDS) -> float:
    """Make the archive at ``path``: a session started and stopped in a process of its
    own, whose JVM writes it as it ends (to a temporary name, renamed when whole).
    Seconds it took."""
    began = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    env = {**os.environ, _DUMP_ENV: str(partial)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dbus_spark.spark.session"],
            env=env, check=True, timeout=timeout, capture_output=True, text=True,
        )  # fmt: skip
        # The JVM outlives the Python process a moment: it writes the archive as it ends.
        pids = [line for line in done.stdout.split() if line.isdigit()]
        if not pids:
            raise RuntimeError("the archive's Spark session did not say its JVM's pid")
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(int(pids[-1])).wait(timeout)
        if not partial.is_file():
            raise RuntimeError(f"Spark's JVM wrote no class archive at {partial}")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return time.monotonic() - began


def main() -> int:
    path = archive_path()
    if path is None:
        print(f"dbus: Spark's class archive is off ({ARCHIVE_ENV}=off)")
        return 0
    if path.is_file():
        return 0
    try:
        took = build(path)
    except Exception as exc:  # a faster start is a bonus: never fail an install for it
        detail: str = getattr(exc, "stderr", None) or ""  # the session's, as text
        last = detail.strip().splitlines()[-1:] or [str(exc) or type(exc).__name__]
        print(f"dbus: warning: no class archive for Spark ({last[0]}); "
              "the runtime starts without it, a few seconds slower", file=sys.stderr)  # fmt: skip
        return 0
    print(f"dbus: Spark's class archive made in {took:.0f} s ({path}): sessions start faster")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
