"""Where a runtime's API hands the requests it takes.

``POST /api/v1/requests`` is how a running runtime is asked to backfill, replay,
repair, pause or resume: `dbus fn backfill` and the other commands send it, and
so can anything that speaks HTTP. Its body is a request as
``dbus_spark.planning.request_models`` defines it, checked field by field there (a
request that reaches the planner is one it can act on); the ``RequestDesk`` hands
it to the runtime's planner (``dbus_spark.planning.mailbox``) and waits for its
answer. ``DELETE /api/v1/requests/{id}`` withdraws one the planner has not taken yet.
"""

from __future__ import annotations

from dbus_spark.planning.mailbox import answer_of, withdraw
from dbus_spark.planning.request_models import Answer, Request

LONGEST_WAIT = 300.0
"""The longest an asker may wait for an answer, in seconds."""


class RequestDesk:
    """Hands what the API is asked to the planner of the runtime at a checkpoint,
    once the runtime's query runs (``open``)."""

    def __init__(self) -> None:
        self.folder: str | None = None

    def open(self, checkpoint_dir: str) -> None:
        self.folder = checkpoint_dir

    def ask(self, request: Request, wait: float) -> Answer | None:
        """The planner's answer; None when it did not take the request within
        ``wait`` seconds (it is withdrawn)."""
        assert self.folder is not None
        return answer_of(self.folder, request, timeout=min(wait, LONGEST_WAIT))

    def withdraw(self, request_id: str) -> Answer | None:
        """None when the planner had not taken it (it never runs), else its answer."""
        assert self.folder is not None
        return withdraw(self.folder, request_id, wait=5.0)


__all__ = ["LONGEST_WAIT", "RequestDesk"]
