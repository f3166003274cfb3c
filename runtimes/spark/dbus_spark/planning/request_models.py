"""The requests a running runtime takes, and its answer, as one model each.

A backfill, a replay, a repair, a pause or a resume is one of these values from
the asker to the planner: the CLI makes it, the API takes it as its body
(``POST /api/v1/requests``, ``dbus_spark.interfaces.api``) and checks it field by
field here, the mailbox beside the checkpoint (``dbus_spark.planning.mailbox``) and
ZooKeeper (a cluster's requests) carry it as JSON, and the planner
(``dbus_spark.planning.requests``) acts on it. The JSON is pydantic's of these
dataclasses, tagged by ``kind``; nothing else reads or writes it.
"""

from __future__ import annotations

import uuid
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, TypeAdapter
from pydantic.dataclasses import dataclass

from dbus_fn.errors import DbusError, HistoryError, PositionError

RequestId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
"""A request's id: a uuid4 in hex, chosen by the asker (so it can withdraw it)."""
_Id = Annotated[
    str, StringConstraints(pattern=r"^[0-9a-f]{32}(-[A-Za-z0-9][A-Za-z0-9_.-]{0,127})?$")
]
"""A request's id as it travels: the asker's, and for a cluster's request carried to
the runtime of one of its sources, a dash and that source (``mailbox.forward``), a name
``dbus_fn.coordination`` takes. It names the request's files beside the checkpoint, so
it holds no NUL byte nor path separator and stays far below a file name's 255 bytes."""
Name = Annotated[str, StringConstraints(min_length=1, max_length=255)]
Text = Annotated[str, StringConstraints(max_length=4096)]

_STRICT = ConfigDict(extra="forbid")


def _kind_required(schema: dict[str, Any]) -> None:
    """A request's ``kind`` has a default for its makers in Python, but its JSON must
    carry it (it tells the kinds apart): the document says so."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.append("kind")


_REQUEST_CONFIG = ConfigDict(extra="forbid", json_schema_extra=_kind_required)


def new_request_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, config=_REQUEST_CONFIG)
class BackfillRequest:
    """Read tables again for a deployment (`dbus fn backfill`): all it reads when
    ``tables`` is empty, the rows ``where`` holds for when given."""

    deployment: Name
    tables: Annotated[tuple[Name, ...], Field(max_length=1000)] = ()
    where: Text | None = None
    id: _Id = field(default_factory=new_request_id)
    kind: Literal["backfill"] = "backfill"


@dataclass(frozen=True, config=_STRICT)
class Delete:
    """A key a destination holds that no row of the table gives it."""

    destination: Text
    key: Text
    """The key as the destination names it (a document id, a message key)."""


@dataclass(frozen=True, config=_STRICT)
class RepairItem:
    """What to mend of one table of one source."""

    source: Name
    table: Name
    keys: Annotated[tuple[Any, ...], Field(max_length=100_000)] = ()
    """The keys to read again, each its columns' values as JSON."""
    deletes: Annotated[tuple[Delete, ...], Field(max_length=100_000)] = ()


@dataclass(frozen=True, config=_REQUEST_CONFIG)
class RepairRequest:
    """Send keys again and delete extra ones, as `dbus fn verify --repair` or
    `dbus fn redrive` found them."""

    deployment: Name
    items: Annotated[tuple[RepairItem, ...], Field(max_length=10_000)]
    id: _Id = field(default_factory=new_request_id)
    kind: Literal["repair"] = "repair"


@dataclass(frozen=True, config=_REQUEST_CONFIG)
class ReplayRequest:
    """Run a deployment's current version over retained binlog (`dbus fn replay`)."""

    deployment: Name
    start: Name
    """A position (file:pos, file:pos@gtid, a GTID state or set) or an ISO time."""
    end: Name | None = None
    route: Name | None = None
    source: Name | None = None
    id: _Id = field(default_factory=new_request_id)
    kind: Literal["replay"] = "replay"


@dataclass(frozen=True, config=_REQUEST_CONFIG)
class PaceRequest:
    """Pause a deployment (its position holds, it gets nothing) or resume it (it
    catches up): `dbus fn pause` / `dbus fn resume`, see ``dbus_spark.state.progress``."""

    deployment: Name
    pause: bool
    id: _Id = field(default_factory=new_request_id)
    kind: Literal["pace"] = "pace"


Request = Annotated[
    BackfillRequest | RepairRequest | ReplayRequest | PaceRequest, Field(discriminator="kind")
]


_Started = Annotated[tuple[str, ...], Field(min_length=2, max_length=2)]
"""A read a request started: (source, task id)."""


@dataclass(frozen=True)
class Answer:
    """The planner's answer: accepted with the (source, task id) of each read it
    started, or refused with the one line saying why (``error``: its class, so the
    CLI exits with its code)."""

    accepted: bool
    message: str
    tasks: tuple[_Started, ...] = ()
    error: str = "HistoryError"

    @classmethod
    def refused(cls, error: DbusError) -> Answer:
        return cls(False, str(error), error=type(error).__name__)

    def raise_refusal(self) -> None:
        if self.error == "PositionError":
            raise PositionError(self.message, choices=("backfill",))
        raise HistoryError(self.message)


_REQUEST: TypeAdapter[Request] = TypeAdapter(Request)
_ANSWER = TypeAdapter(Answer)


def request_to_json(request: Request) -> dict[str, Any]:
    data: dict[str, Any] = _REQUEST.dump_python(request, mode="json")
    return data


def request_from_json(data: Any) -> Request:
    """A request as ``request_to_json`` wrote it; ``ValueError`` (pydantic's, naming
    each field it refuses) when it is none."""
    return _REQUEST.validate_python(data)


def answer_to_json(answer: Answer) -> dict[str, Any]:
    data: dict[str, Any] = _ANSWER.dump_python(answer, mode="json")
    return data


def answer_from_json(data: Any) -> Answer:
    """An answer as ``answer_to_json`` wrote it; ``ValueError`` when it is none."""
    return _ANSWER.validate_python(data)


__all__ = [
    "Answer",
    "BackfillRequest",
    "Delete",
    "Name",
    "PaceRequest",
    "RepairItem",
    "RepairRequest",
    "ReplayRequest",
    "Request",
    "RequestId",
    "answer_from_json",
    "answer_to_json",
    "new_request_id",
    "request_from_json",
    "request_to_json",
]
