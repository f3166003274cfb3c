"""Homes of deleted checkouts: a clone in a private folder keeps its services' state
in ``/var/tmp/dbus-<id>`` (``dbus_fn.home``), over a gigabyte with the Kafka and
Elasticsearch installs, and deleting the clone leaves it behind. ``up`` notes which
checkout its home serves and removes the homes whose checkout is gone, unless a
process still runs from one (services started from a clone deleted under them)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from dbus_fn.home import SHARED_ROOT, checkout, forgotten_homes, mark_checkout


def _in_use(home: Path) -> bool:
    """Whether a process names ``home`` on its command line (a service started from
    it does: its own directory is among its arguments) or runs in it."""
    import psutil

    inside = str(home)
    for process in psutil.process_iter(["cmdline", "cwd"]):
        cwd = process.info.get("cwd") or ""
        if cwd == inside or cwd.startswith(inside + "/"):
            return True
        if any(inside in arg for arg in process.info.get("cmdline") or ()):
            return True
    return False


def tidy_homes(home: Path, say: Callable[[str], None], root: Path = SHARED_ROOT) -> list[Path]:
    """Mark ``home`` as this checkout's (when it is kept under ``root``), and remove
    every home under ``root`` whose checkout is gone and that nothing runs from."""
    repo = checkout()
    if repo is not None and home.parent == root:
        mark_checkout(home, repo)
    removed = []
    for forgotten in forgotten_homes(root):
        if forgotten == home or _in_use(forgotten):
            continue
        shutil.rmtree(forgotten, ignore_errors=True)
        if not forgotten.exists():
            say(f"removed {forgotten}: the services' home of a deleted checkout")
            removed.append(forgotten)
    return removed
