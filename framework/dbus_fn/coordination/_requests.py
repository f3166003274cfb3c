"""Requests to whichever runtimes own some sources, and their owners' answers.

A command that acts on a running cluster (`dbus fn backfill`, `dbus fn replay`)
posts one request naming the sources it concerns; the runtime that owns each
source takes it, acts on it for that source, and answers under the request. The
body and the answers are the runtime's business: JSON this module does not read.
A request is answered once per source, so a source that moves after answering is
not asked again; the poster removes the request when it has its answers.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from dbus_fn.coordination._client import ZooKeeperSettings, dump, load, utc_timestamp
from dbus_fn.coordination._layout import ClusterLayout


@dataclass(frozen=True, slots=True)
class PostedRequest:
    id: str
    body: dict[str, Any]
    sources: tuple[str, ...]
    answered: frozenset[str]


class RequestBox:
    """The cluster's open requests: posted by commands, answered per source by runtimes."""

    def __init__(self, client: KazooClient, settings: ZooKeeperSettings) -> None:
        self.client = client
        self.settings = settings
        self.layout = ClusterLayout.for_cluster(settings.cluster, settings.root)

    def post(self, body: dict[str, Any], sources: Sequence[str]) -> str:
        request_id = uuid.uuid4().hex
        data = {"body": body, "sources": list(sources), "posted": utc_timestamp()}
        self.client.create(
            self.layout.request(request_id), dump(data), acl=self.settings.acl, makepath=True
        )
        return request_id

    def open(self) -> list[PostedRequest]:
        """Every request not yet withdrawn, with the sources that answered it."""
        try:
            ids = self.client.get_children(self.layout.requests)
        except NoNodeError:
            return []
        found = []
        for request_id in sorted(ids):
            try:
                raw, _ = self.client.get(self.layout.request(request_id))
                answered = self.client.get_children(self.layout.request(request_id))
            except NoNodeError:
                continue
            data = load(raw)
            found.append(
                PostedRequest(
                    request_id,
                    dict(data.get("body", {})),
                    tuple(data.get("sources", ())),
                    frozenset(answered),
                )
            )
        return found

    def answer(self, request_id: str, source: str, reply: dict[str, Any]) -> None:
        """Answer for ``source`` (once: a second answer is ignored)."""
        # Answered already, or withdrawn by its poster: nothing to do.
        with contextlib.suppress(NodeExistsError, NoNodeError):
            self.client.create(
                self.layout.answer(request_id, source), dump(reply), acl=self.settings.acl
            )

    def answers(self, request_id: str) -> dict[str, dict[str, Any]]:
        try:
            sources = self.client.get_children(self.layout.request(request_id))
        except NoNodeError:
            return {}
        found = {}
        for source in sources:
            try:
                raw, _ = self.client.get(self.layout.answer(request_id, source))
            except NoNodeError:
                continue
            found[source] = load(raw)
        return found

    def withdraw(self, request_id: str) -> None:
        self.client.delete(self.layout.request(request_id), recursive=True)
