"""The mailbox beside a runtime's checkpoint, through which its process hands a request
to its planner and takes the planner's answer back.

The planner is a Spark Python worker of its own, so the runtime's API (and, in a
cluster, the member that carries ZooKeeper's requests, ``forward``) writes each
request (``dbus_spark.planning.request_models``) as a small JSON file in
``<checkpoint>.requests/``, private to the runtime. The planner takes it when it
plans its next micro-batch and answers in ``<id>.answer.json``. It claims a
request file (renames it) before it acts on it and removes it once answered, so a
restarted runtime never takes it twice, and a request whose asker gives up
waiting (Ctrl-C, or no answer in time) is withdrawn unless the planner claimed it
first (``withdraw``): nothing queued runs later unasked. Nothing here needs Spark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dbus_fn.files import replace_file
from dbus_spark.planning.request_models import (
    Answer,
    Request,
    answer_from_json,
    answer_to_json,
    request_from_json,
    request_to_json,
)
from dbus_spark.state.checkpoint import requests_dir


def _write(path: Path, data: dict[str, Any]) -> None:
    replace_file(path, json.dumps(data), mode=0o600, parents=True)


def submit(checkpoint_dir: str, request: Request) -> Path:
    path = requests_dir(checkpoint_dir) / f"{request.id}.json"
    _write(path, request_to_json(request))
    return path


def pending(checkpoint_dir: str) -> Iterator[tuple[Request, str | None]]:
    """Requests not yet answered, oldest first (for the runtime's driver), each with
    the one source it is for (a cluster's request, one per source) or None (all)."""
    folder = requests_dir(checkpoint_dir)
    if not folder.is_dir():
        return
    files = sorted(
        (p for p in folder.glob("*.json") if not p.name.endswith(".answer.json")),
        key=lambda p: p.stat().st_mtime,
    )
    for path in files:
        claimed = path.with_name(f".{path.stem}.claimed")
        try:
            # Claimed by renaming, so a command withdrawing it (Ctrl-C) either takes it
            # back before this runtime acts on it, or finds it taken and waits for the answer.
            path.rename(claimed)
        except FileNotFoundError:
            continue  # withdrawn meanwhile
        try:
            data = json.loads(claimed.read_text())
            only = data.pop("only", None)
            request = request_from_json(data)
        except (OSError, ValueError, AttributeError):
            claimed.rename(path)  # half-written by a CLI that died, or not ours
            continue
        yield request, only


def answer(checkpoint_dir: str, request: Request, reply: Answer) -> None:
    folder = requests_dir(checkpoint_dir)
    _write(folder / f"{request.id}.answer.json", answer_to_json(reply))
    (folder / f".{request.id}.claimed").unlink(missing_ok=True)


def withdraw(checkpoint_dir: str, request_id: str, *, wait: float = 10.0) -> Answer | None:
    """Take back a request: None when no runtime had claimed it (it never runs) or it
    was taken back already, else the answer of the runtime that claimed it first
    (None if it gives none in ``wait`` seconds)."""
    folder = requests_dir(checkpoint_dir)
    try:
        (folder / f"{request_id}.json").unlink()
        return None
    except FileNotFoundError:
        pass
    path = folder / f"{request_id}.answer.json"
    claimed = folder / f".{request_id}.claimed"  # gone once answered (see ``answer``)
    deadline = time.monotonic() + wait
    while not path.exists() and claimed.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        reply = answer_from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError):
        return None
    path.unlink(missing_ok=True)
    return reply


def forward(
    checkpoint_dir: str, body: dict[str, Any], request_id: str, source: str
) -> dict[str, Any] | None:
    """A cluster's request for ``source``, carried to this runtime's driver: its answer
    once there is one (then forgotten here), else None (the request is handed over
    once; a runtime restarted meanwhile neither loses nor repeats it)."""
    folder = requests_dir(checkpoint_dir)
    local = f"{request_id}-{source}"
    answered = folder / f"{local}.answer.json"
    if answered.exists():
        reply: dict[str, Any] = json.loads(answered.read_text())
        answered.unlink(missing_ok=True)
        (folder / f".{local}.taken").unlink(missing_ok=True)
        return reply
    taken = folder / f".{local}.taken"
    if not taken.exists():
        _write(folder / f"{local}.json", {**body, "id": local, "only": source})
        taken.touch()
    return None


def answer_of(checkpoint_dir: str, request: Request, *, timeout: float) -> Answer | None:
    """Hand ``request`` to the runtime's planner and wait for its answer (accepted or
    refused); None when the planner did not take it within ``timeout`` seconds (it is
    then withdrawn, and never runs)."""
    submit(checkpoint_dir, request)
    path = requests_dir(checkpoint_dir) / f"{request.id}.answer.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() <= deadline:
        try:
            reply = answer_from_json(json.loads(path.read_text()))
        except FileNotFoundError:
            time.sleep(0.1)
            continue
        except (OSError, ValueError, KeyError):
            return withdraw(checkpoint_dir, request.id)  # taken back meanwhile (Ctrl-C)
        path.unlink(missing_ok=True)
        return reply
    return withdraw(checkpoint_dir, request.id)


__all__ = ["answer", "answer_of", "forward", "pending", "submit", "withdraw"]
