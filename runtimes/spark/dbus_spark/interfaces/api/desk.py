"""The requests a runtime's API takes, and where it hands them.

``POST /api/v1/requests`` is how a running runtime is asked to backfill, replay,
repair, pause or resume: `dbus fn backfill` and the other commands send it, and
so can anything that speaks HTTP. The body is checked here, field by field (a
request that reaches the planner is one it can act on); the ``RequestDesk`` then
hands it to the runtime's planner (``dbus_spark.planning.requests``) and waits for
its answer. ``DELETE /api/v1/requests/{id}`` withdraws one the planner has not
taken yet.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from dbus_spark.planning.requests import (
    Answer,
    Request,
    answer_of,
    request_from_json,
    withdraw,
)

RequestId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
"""A request's id: a uuid4 in hex, chosen by the asker (so it can withdraw it)."""
_Name = Annotated[str, StringConstraints(min_length=1, max_length=255)]
_Text = Annotated[str, StringConstraints(max_length=4096)]

LONGEST_WAIT = 300.0
"""The longest an asker may wait for an answer, in seconds."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: RequestId
    deployment: _Name


class BackfillBody(_Body):
    """Read tables again for a deployment (`dbus fn backfill`)."""

    kind: Literal["backfill"]
    tables: list[_Name] = Field(default_factory=list, max_length=1000)
    where: _Text | None = None


class ReplayBody(_Body):
    """Run a deployment over retained binlog (`dbus fn replay`)."""

    kind: Literal["replay"]
    start: _Name
    end: _Name | None = None
    route: _Name | None = None
    source: _Name | None = None


class _Delete(BaseModel):
    model_config = ConfigDict(extra="forbid")

    destination: _Text
    key: _Text
    """The key as the destination names it (a document id, a message key)."""


class _RepairItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: _Name
    table: _Name
    keys: list[list[Any]] = Field(default_factory=list, max_length=100_000)
    """The keys to read again, each its columns' values as JSON."""
    deletes: list[_Delete] = Field(default_factory=list, max_length=100_000)
    """What a destination holds that the table does not."""


class RepairBody(_Body):
    """Send keys again and delete extra ones (`dbus fn verify --repair`, `redrive`)."""

    kind: Literal["repair"]
    items: list[_RepairItem] = Field(max_length=10_000)


class PaceBody(_Body):
    """Pause a deployment (``pause``: true) or resume it (`dbus fn pause`, `resume`)."""

    kind: Literal["pace"]
    pause: bool


RequestBody = Annotated[
    BackfillBody | ReplayBody | RepairBody | PaceBody, Field(discriminator="kind")
]


class AnswerBody(BaseModel):
    """The planner's answer: accepted with the (source, task id) of each read it
    started, or refused with the one line saying why (``error``: its class)."""

    accepted: bool
    message: str
    tasks: list[Annotated[list[str], Field(min_length=2, max_length=2)]]
    """[source, task id] of each read started."""
    error: str

    @classmethod
    def of(cls, answer: Answer) -> AnswerBody:
        return cls.model_validate(answer.to_json())


class RequestDesk:
    """Hands what the API is asked to the planner of the runtime at a checkpoint,
    once the runtime's query runs (``open``)."""

    def __init__(self) -> None:
        self.folder: str | None = None

    def open(self, checkpoint_dir: str) -> None:
        self.folder = checkpoint_dir

    def ask(self, body: BackfillBody | ReplayBody | RepairBody | PaceBody,
            wait: float) -> Answer | None:  # fmt: skip
        """The planner's answer; None when it did not take the request within
        ``wait`` seconds (it is withdrawn)."""
        assert self.folder is not None
        request: Request = request_from_json(body.model_dump(exclude_none=True))
        return answer_of(self.folder, request, timeout=min(wait, LONGEST_WAIT))

    def withdraw(self, request_id: str) -> Answer | None:
        """None when the planner had not taken it (it never runs), else its answer."""
        assert self.folder is not None
        return withdraw(self.folder, request_id, wait=5.0)


__all__ = ["LONGEST_WAIT", "AnswerBody", "RequestBody", "RequestDesk", "RequestId"]
