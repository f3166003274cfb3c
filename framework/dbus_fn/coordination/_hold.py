"""``HoldCheck``: a worker process asks ZooKeeper whether its runtime still holds a source.

A runtime's workers are other processes than its ``Coordinator``; before they
make a batch's writes visible (commit a Kafka transaction), they confirm that
the runtime still owns the source at the epoch the batch was planned under::

    hold = HoldCheck(settings, runtime_id)          # one per process; connects on first use
    confirmed = hold.confirm(source, epoch)         # monotonic time, or None
    if confirmed is None:
        abort()                                      # the source is someone else's now
    # writes may be made visible until confirmed + handoff, no later

``confirm`` takes the time before it sends anything, and returns that time
only if ZooKeeper then said the assignment names this runtime at that epoch
and the runtime's member node exists. The leader waits ``handoff`` seconds
after it released a source before anyone else may own it, so writes made
visible within ``handoff`` of a confirmation cannot overlap the next owner's.

One request round trip per call: a ``sync`` (so a lagging ZooKeeper follower
cannot answer from before a release) and the two reads are pipelined on one
connection, which kazoo keeps up, and renews after a session expired; kazoo's
retry asks again when the connection drops under the request. Away 2 s (ZooKeeper
restarting), a reconnect the starting server never answers is given up after a
quarter of the session (2 s at least), not the whole of it (``answer_hosts``).
"""

from __future__ import annotations

import os
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from dbus_fn.coordination._client import (
    AwayHosts,
    ZooKeeperSettings,
    load,
    make_client,
    unavailable,
)
from dbus_fn.coordination._layout import check_name
from dbus_fn.errors import CoordinationError

_RETRY = 0.05


class HoldCheck:
    """Thread-safe; connects lazily, once per process (a forked child connects anew)."""

    def __init__(self, settings: ZooKeeperSettings, runtime_id: str) -> None:
        self.settings = settings
        self.runtime_id = check_name(runtime_id, "runtime id")
        self._layout = settings.layout
        self._lock = threading.Lock()
        self._client: KazooClient | None = None
        self._pid = 0
        self._up = threading.Event()
        self._hosts = AwayHosts(settings)
        """The servers the client reconnects with: named often once away a while."""

    def confirm(self, source: str, epoch: int, *, timeout: float = 2.0) -> float | None:
        """``time.monotonic()`` taken before asking, if this runtime holds ``source``
        at ``epoch``; None if ZooKeeper answered that it does not (another owner,
        released, another epoch, no assignment, or no member node).

        Raises ``ZooKeeperUnavailableError`` when no answer came within
        ``timeout`` seconds: the hold is unknown, so treat it as gone.
        """
        sent = time.monotonic()
        deadline = sent + timeout
        # kazoo's retry asks again, on the next connection while there is time, when
        # the connection dropped or the session ended under the request.
        retry = KazooRetry(
            max_tries=-1, delay=_RETRY, backoff=1, max_jitter=0.0, deadline=timeout
        )
        try:
            held = retry(self._holds, source, epoch, deadline)
        except NoAuthError:
            who = f"user {self.settings.user!r}" if self.settings.user else "no credentials"
            raise CoordinationError(
                f"ZooKeeper refused {who} reading the assignment of {source} in "
                f"{self.settings.where()}; give the cluster's user:password "
                "(DBUS_ZK_AUTH)",
                cluster=self.settings.cluster,
            ) from None
        except (KazooException, KazooTimeoutError):
            raise unavailable(self.settings, within=timeout) from None
        return sent if held else None

    def _holds(self, source: str, epoch: int, deadline: float) -> bool:
        """One round trip: whether the assignment names this runtime at ``epoch`` and
        its member node exists (``KazooTimeoutError`` when no answer by ``deadline``)."""
        client = self._connected(deadline)
        if client is None:
            raise KazooTimeoutError("not connected")
        assignment = self._layout.assignment(source)
        client.sync_async(assignment)
        got = client.get_async(assignment)
        alive = client.exists_async(self._layout.runtime(self.runtime_id))
        try:
            raw, _ = got.get(timeout=max(0.0, deadline - time.monotonic()))
        except NoNodeError:
            return False
        stat = alive.get(timeout=max(0.0, deadline - time.monotonic()))
        data = load(raw)
        held = data.get("runtime") == self.runtime_id and data.get("epoch") == epoch
        return held and stat is not None

    def close(self) -> None:
        """Drop the connection (the next ``confirm`` connects again)."""
        with self._lock:
            client, self._client = self._client, None
            self._up.clear()
            self._hosts.follow(None)
        if client is not None and self._pid == os.getpid():
            client.remove_listener(self._on_state)
            client.stop()
            client.close()

    def __enter__(self) -> HoldCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connected(self, deadline: float) -> KazooClient | None:
        """This process's client once connected; None if not by ``deadline``."""
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                # A client inherited through fork() has no threads here: leave it be.
                self._up.clear()
                self._client = make_client(self.settings)
                self._pid = os.getpid()
                self._hosts.follow(self._client)
                self._client.add_listener(self._on_state)
                self._client.start_async()
            client = self._client
        if self._up.wait(max(0.0, deadline - time.monotonic())) or client.connected:
            return client
        return None

    def _on_state(self, state: str) -> None:
        # kazoo's thread: flip the event; the names spread while the connection is away.
        if state == KazooState.CONNECTED:
            self._up.set()
            self._hosts.back()
        else:
            self._up.clear()
            self._hosts.away()
