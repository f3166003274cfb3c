"""The per-call time budget of user functions, and the watchdog thread that enforces it.

A per-call budget must hold where the runtime calls us: inside a Spark
executor's Python worker, not necessarily in the main thread, so
``signal.setitimer`` is out, and a thread cannot be killed. Instead a watchdog
thread (one per pipeline with a budget) samples which call is running; when one
call has run longer than the budget it raises ``Overrun`` inside the calling
thread with ``PyThreadState_SetAsyncExc``. That interrupts Python code at once,
and code blocked in C (``time.sleep``, a socket read) as soon as it returns to
Python; the event is dead-lettered either way. Sampling makes the budget exact to
a tick (a tenth of the budget, at most 50 ms), and costs the hot path two
attribute stores per call instead of a system call.
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref


class Overrun(BaseException):
    """Raised inside a user's function by the watchdog; never escapes the pipeline.

    A ``BaseException`` so that a function's ``except Exception`` does not
    swallow it.
    """


class Budget:
    """What the watchdog watches: which call is running, and since which call count."""

    __slots__ = ("__weakref__", "calls", "closed", "fired", "seconds", "step", "thread")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0
        self.step: object | None = None
        self.thread = 0
        self.fired = 0
        self.closed = False


def watch(budget_ref: weakref.ReferenceType[Budget], tick: float) -> None:
    """The watchdog loop: interrupt a call that has run longer than the budget."""
    last_calls = -1
    since = 0.0
    while True:
        time.sleep(tick)
        budget = budget_ref()
        if budget is None or budget.closed:
            return
        calls, step = budget.calls, budget.step
        now = time.monotonic()
        if step is None:
            last_calls = -1
        elif calls != last_calls:
            last_calls, since = calls, now
        elif now - since >= budget.seconds and budget.calls == calls and budget.step is step:
            budget.fired = calls
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(budget.thread), ctypes.py_object(Overrun)
            )
        del budget


def disarm(budget: Budget) -> None:
    """Forget an interrupt: handled, or swallowed by the function.

    The watchdog may have raised again while the first interrupt unwound; a
    pending one would go off later in the caller's code, so it is cleared (a
    NULL exception clears the thread's pending asynchronous exception).
    """
    budget.fired = 0
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(budget.thread), None)


def start_watchdog(budget: Budget, name: str) -> threading.Thread:
    """Start the daemon thread that watches ``budget``; it ends once the budget closes."""
    thread = threading.Thread(
        target=watch,
        args=(weakref.ref(budget), min(budget.seconds / 10, 0.05)),
        name=name,
        daemon=True,
    )
    thread.start()
    return thread
