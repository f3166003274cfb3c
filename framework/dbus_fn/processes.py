"""Waiting for processes to end, where one that exited counts as ended whether or not
anybody has reaped it yet.

A process whose parent ends first is handed to the nearest subreaper, which may wait
for it late (an init that reaps every second or so) or never (a bench adopting its
orphans, a container's first process that reaps nothing). psutil's ``wait_procs``
waits until such a zombie is reaped, so a runtime's stop or ``dbus services down``
waited out its whole timeout on a process that had long exited. A zombie that is this
process's own child is reaped here, as ``wait_procs`` would.

psutil is imported where used: the SDK's own install does not bring it, and only the
runtime and the services (whose installs do) call this.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

POLL_SECONDS = 0.05


def still_running(processes: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``processes`` that still run after ``timeout`` seconds (none: at once)."""
    deadline = time.monotonic() + timeout
    left = [p for p in processes if runs(p)]
    while left and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        left = [p for p in left if runs(p)]
    return left


def runs(process: psutil.Process) -> bool:
    """Whether ``process`` runs: not gone, and not a zombie (one of this process's own
    children that is, it reaps)."""
    import psutil

    try:
        if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
            return True
        if process.ppid() == os.getpid():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, os.WNOHANG)
    except psutil.Error:
        pass
    return False
