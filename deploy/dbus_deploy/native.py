"""Build and install dbus's native code (``framework/native``): the capture's row
decoder and the row images' JSON writer.

``python -m dbus_deploy.native`` (run by ``deploy/dev env`` and by each tox env that
captures) puts ``dbus_native`` into the interpreter running it: a wheel built once
per version of the crate's sources, kept in ``<home>/native/`` with cargo's build
folder, so a fresh environment installs it in seconds. Without cargo, or when the
build fails, it says so in one line and the capture decodes in Python, with the
same values (``dbus_fn.capture._native``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dbus_fn.home import dbus_home

CRATE = Path(__file__).resolve().parents[2] / "framework" / "native"
SOURCES = ("Cargo.toml", "Cargo.lock", "pyproject.toml", "src")


def crate_version(crate: Path = CRATE) -> str:
    """A digest of the crate's sources: a wheel built from other sources is stale."""
    digest = hashlib.sha256()
    for name in SOURCES:
        path = crate / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(crate)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def _wheels(home: Path) -> Path:
    return home / "native" / "wheels" / f"{crate_version()}-{sys.implementation.cache_tag}"


def native_wheel(home: Path) -> Path | None:
    """The wheel built from the crate's current sources for this Python, if any."""
    return next(iter(sorted(_wheels(home).glob("dbus_native-*.whl"))), None)


def _pip(*args: str, log: Path, env: dict[str, str] | None = None) -> bool:
    """Run pip in this interpreter, its output appended to ``log``; whether it worked."""
    with log.open("a") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
            stdout=out, stderr=subprocess.STDOUT, env=env, check=False,
        )  # fmt: skip
    return done.returncode == 0


def ensure_native(home: Path | None = None) -> str:
    """Install ``dbus_native`` here (building its wheel first if none is kept); what
    happened, in one line."""
    home = home or dbus_home()
    folder = home / "native"
    wheels = _wheels(home)
    log = home / "logs" / "native-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if not any(wheels.glob("dbus_native-*.whl")):
        if shutil.which("cargo") is None:
            return (
                "warning: no cargo on PATH, so the native code is not built and the "
                "capture decodes in Python (same values, slower); install Rust "
                "(rustup or apt-get install cargo), then run deploy/dev env"
            )
        log.write_text("")
        partial = wheels.with_name(wheels.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        env = {**os.environ, "CARGO_TARGET_DIR": str(folder / "target")}
        if not _pip("wheel", "--no-deps", "-w", str(partial), str(CRATE), log=log, env=env):
            return (
                f"warning: the native code did not build (see {log}), so the "
                "capture decodes in Python (same values, slower)"
            )
        shutil.rmtree(wheels, ignore_errors=True)
        partial.rename(wheels)
    wheel = next(wheels.glob("dbus_native-*.whl"))
    if not _pip("install", "--force-reinstall", "--no-deps", "--quiet", str(wheel), log=log):
        return f"warning: the native code did not install (see {log}); decoding in Python"
    return f"native code installed ({wheel.name})"


def main() -> None:
    print(f"dbus: {ensure_native()}")


if __name__ == "__main__":
    main()
