"""Fenced position commits of a runtime's sources, and the commits held while ZooKeeper is away."""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import (
    ConnectionLoss,
    NoAuthError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError as KazooTimeout

from dbus_fn.coordination._client import dump, load, utc_timestamp
from dbus_fn.coordination._state import (
    CommitOutcome,
    CommittedPosition,
    CoordinatorState,
    Ownership,
    log,
)
from dbus_fn.errors import CoordinationError, FencedError
from dbus_fn.events import BinlogPosition


class Commits(CoordinatorState):
    """Writes a source's position only while this runtime owns it at the batch's epoch."""

    @property
    def held_commits(self) -> dict[str, tuple[BinlogPosition, int]]:
        """Commits waiting for ZooKeeper: source -> (position, epoch)."""
        with self._lock:
            return dict(self._pending)

    def committed_position(self, source: str) -> CommittedPosition | None:
        """The source's committed position (None if none was ever committed)."""
        from dbus_fn.capture import position_from_json

        try:
            raw, _ = self.client.get(self.layout.position(source))
        except NoNodeError:
            return None
        data = load(raw)
        return CommittedPosition(
            position=position_from_json(data.get("position") or {}),
            epoch=int(data.get("epoch", 0)),
            runtime=str(data.get("runtime", "")),
            committed=str(data.get("committed", "")),
            history=data.get("history"),
        )

    def commit_position(
        self,
        source: str,
        position: BinlogPosition,
        epoch: int,
        history: dict[str, Any] | None = None,
    ) -> CommitOutcome:
        """Commit ``position`` for ``source``, owned at ``epoch``, with ``history``
        (the runtime's history progress of the source, at least as new as the
        position; a held commit is written with the newest given).

        "committed": written. "held": ZooKeeper is unreachable; kept in memory
        (newest per source) and written when the session returns, if this
        runtime still owns the source then. ``FencedError``: this runtime does
        not own the source at ``epoch``; nothing was written.
        """
        with self._lock:
            own = self._owned.get(source)
            if own is None or own.epoch != epoch:
                raise self._fenced(source, epoch, "it does not own the source at that epoch")
            if history is not None:
                self._histories[source] = history
            if not self._usable():
                self._pending[source] = (position, epoch)
                self._wake.set()
                return "held"
            self._pending.pop(source, None)
        try:
            self._write_position(own, position)
        except (ConnectionLoss, KazooTimeout):
            with self._lock:
                if source in self._owned:
                    self._pending.setdefault(source, (position, epoch))
                    return "held"
            raise self._fenced(source, epoch, "ZooKeeper went away and ownership with it") from None
        except NoAuthError:
            raise CoordinationError(
                f"runtime {self.runtime_id}: ZooKeeper refused to write the position of "
                f"{source} in {self.settings.where()}; its ACL needs this runtime's "
                "credentials (DBUS_ZK_AUTH)",
                cluster=self.settings.cluster,
            ) from None
        return "committed"

    def _write_position(self, own: Ownership, position: BinlogPosition) -> None:
        from dbus_fn.capture import position_to_json

        source = own.source
        with self._lock:
            history = self._histories.get(source)
        data = dump(
            {
                "position": position_to_json(position),
                "epoch": own.epoch,
                "runtime": self.runtime_id,
                "committed": utc_timestamp(),
                **({"history": history} if history is not None else {}),
            }
        )
        for _ in range(3):
            with self._lock:
                expected = self._position_versions.get(source, None)
                known = source in self._position_versions
            if not known:
                stat = self.client.exists(self.layout.position(source))
                expected = None if stat is None else stat.version
            tx = self.client.transaction()
            tx.check(self.layout.assignment(source), own.assignment_version)
            if expected is None:
                tx.create(self.layout.position(source), data, acl=self.settings.acl)
            else:
                tx.set_data(self.layout.position(source), data, version=expected)
            try:
                results = tx.commit()
            except SessionExpiredError:
                raise self._fenced(source, own.epoch, "its ZooKeeper session expired") from None
            check, write = results[0], results[1]
            # In a failed transaction the ops that did not fail report RolledBackError.
            if isinstance(check, Exception) and not isinstance(check, RolledBackError):
                with self._lock:
                    if self._owned.get(source) == own:
                        del self._owned[source]
                    self._assign_dirty = True
                self._wake.set()
                raise self._fenced(source, own.epoch, "the source was assigned elsewhere")
            if not isinstance(write, Exception):
                with self._lock:
                    self._position_versions[source] = 0 if expected is None else expected + 1
                return
            # The position node moved. If the last write that landed is this
            # runtime's own at this epoch (a reply lost to a dropped connection),
            # adopt its version; anybody else's write means we are fenced.
            try:
                raw, stat = self.client.get(self.layout.position(source))
            except NoNodeError:
                with self._lock:
                    self._position_versions[source] = None
                continue
            found = load(raw)
            if found.get("runtime") == self.runtime_id and found.get("epoch") == own.epoch:
                with self._lock:
                    self._position_versions[source] = stat.version
                continue
            raise self._fenced(source, own.epoch, f"runtime {found.get('runtime')} wrote it since")
        raise self._fenced(source, own.epoch, "the position kept changing under this runtime")

    def _flush(self) -> None:
        with self._lock:
            if not self._confirmed or self._state != "connected":
                return
            pending = list(self._pending.items())
        for source, (position, epoch) in pending:
            with self._lock:
                if self._pending.get(source) != (position, epoch):
                    continue
                own = self._owned.get(source)
                del self._pending[source]
            if own is None or own.epoch != epoch:
                log.warning(
                    "runtime %s: dropped a held commit of %s: no longer its owner at epoch %d",
                    self.runtime_id,
                    source,
                    epoch,
                )
                continue
            try:
                self._write_position(own, position)
            except FencedError as exc:
                log.warning("runtime %s: dropped a held commit: %s", self.runtime_id, exc)
            except (ConnectionLoss, KazooTimeout):
                with self._lock:
                    self._pending.setdefault(source, (position, epoch))
                return
            log.info(
                "runtime %s: flushed the held commit of %s at epoch %d",
                self.runtime_id,
                source,
                epoch,
            )
