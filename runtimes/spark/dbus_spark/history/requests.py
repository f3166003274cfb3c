"""Requests to a running runtime: a backfill asked for by `dbus fn backfill`.

A request is a small JSON file in ``<checkpoint>.requests/``. The runtime's driver
takes it when it plans its next micro-batch, checks it against what it runs (the
deployment, the tables, the condition, what is being read already), and answers
in ``<id>.answer.json``: accepted, with the tasks it started, or refused, with
the one line that says why. The request file is removed once answered, so a
restarted runtime never takes it twice. Nothing here needs Spark.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_fn.capture import BinlogReader
from dbus_fn.errors import HistoryError, ServiceUnreachableError
from dbus_fn.manifest import Manifest
from dbus_spark.history.tasks import HistoryStore


def requests_dir(checkpoint_dir: str) -> Path:
    checkpoint = Path(checkpoint_dir)
    return checkpoint.parent / f"{checkpoint.name}.requests"


@dataclass(frozen=True, slots=True)
class BackfillRequest:
    deployment: str
    tables: tuple[str, ...] = ()
    where: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "backfill", "id": self.id, "deployment": self.deployment,
            "tables": list(self.tables), "where": self.where,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BackfillRequest:
        return cls(data["deployment"], tuple(data.get("tables", ())), data.get("where"),
                   data["id"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class RepairRequest:
    """Send these keys again, and delete these extra ones, as ``dbus fn verify
    --repair`` found them: per (source, table), the keys (as JSON) to read again and
    the (destination, key text) pairs a destination holds that the table does not."""

    deployment: str
    items: tuple[tuple[str, str, tuple[Any, ...], tuple[tuple[str, str], ...]], ...]
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "repair", "id": self.id, "deployment": self.deployment,
            "items": [[s, t, list(k), [list(d) for d in dl]] for s, t, k, dl in self.items],
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RepairRequest:
        items = tuple(
            (s, t, tuple(k), tuple((d[0], d[1]) for d in dl)) for s, t, k, dl in data["items"]
        )
        return cls(data["deployment"], items, data["id"])


Request = BackfillRequest | RepairRequest


@dataclass(frozen=True, slots=True)
class Answer:
    accepted: bool
    message: str
    tasks: tuple[tuple[str, str], ...] = ()
    """(source, task id) of every task started."""

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "message": self.message,
                "tasks": [list(t) for t in self.tasks]}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        return cls(bool(data["accepted"]), str(data["message"]),
                   tuple((s, t) for s, t in data.get("tasks", ())))  # fmt: skip


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(partial, path)


def submit(checkpoint_dir: str, request: Request) -> Path:
    path = requests_dir(checkpoint_dir) / f"{request.id}.json"
    _write(path, request.to_json())
    return path


def pending(checkpoint_dir: str) -> Iterator[Request]:
    """Requests not yet answered, oldest first (for the runtime's driver)."""
    folder = requests_dir(checkpoint_dir)
    if not folder.is_dir():
        return
    files = sorted(
        (p for p in folder.glob("*.json") if not p.name.endswith(".answer.json")),
        key=lambda p: p.stat().st_mtime,
    )
    for path in files:
        try:
            data = json.loads(path.read_text())
            kind = RepairRequest if data.get("kind") == "repair" else BackfillRequest
            yield kind.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half-written by a CLI that died, or not ours


def answer(checkpoint_dir: str, request: Request, reply: Answer) -> None:
    folder = requests_dir(checkpoint_dir)
    _write(folder / f"{request.id}.answer.json", reply.to_json())
    (folder / f"{request.id}.json").unlink(missing_ok=True)


def take_requests(
    checkpoint_dir: str,
    store: HistoryStore,
    readers: Mapping[str, BinlogReader],
    manifests: Sequence[Manifest],
) -> None:
    """Answer every pending request (the runtime's driver, between micro-batches): a
    backfill starts on each source that has the tables, or is refused as a whole."""
    for request in pending(checkpoint_dir):
        started: list[tuple[str, str]] = []
        problems: list[str] = []
        for source, reader in readers.items():
            try:
                if isinstance(request, RepairRequest):
                    tasks = [
                        store.repair(reader, manifests, request.deployment, table, keys, deletes)
                        for item_source, table, keys, deletes in request.items
                        if item_source == source
                    ]
                else:
                    tasks = store.backfill(
                        reader, manifests, request.deployment, request.tables, request.where
                    )
            except HistoryError as exc:
                problems.append(str(exc))
                continue
            started += [(source, task.id) for task in tasks]
        if started:
            reply = Answer(True, f"started {len(started)} table read(s)", tuple(started))
        else:
            reply = Answer(False, problems[0] if problems else "no source runs here")
        answer(checkpoint_dir, request, reply)


def wait_answer(checkpoint_dir: str, request: Request, *, timeout: float) -> Answer:
    """The runtime's answer; ``HistoryError`` if it refused, ``ServiceUnreachableError``
    (the request withdrawn) if no runtime took it in time."""
    folder = requests_dir(checkpoint_dir)
    path = folder / f"{request.id}.answer.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            (folder / f"{request.id}.json").unlink(missing_ok=True)
            raise ServiceUnreachableError(
                f"no runtime took the request within {timeout:.0f}s at checkpoint "
                f"{checkpoint_dir}; start one with `dbus runtime start` (and the same "
                "--checkpoint), then ask again",
                service="runtime",
            )
        time.sleep(0.1)
    reply = Answer.from_json(json.loads(path.read_text()))
    path.unlink(missing_ok=True)
    if not reply.accepted:
        raise HistoryError(reply.message)
    return reply


__all__ = [
    "Answer",
    "BackfillRequest",
    "RepairRequest",
    "answer",
    "pending",
    "requests_dir",
    "submit",
    "take_requests",
    "wait_answer",
]
