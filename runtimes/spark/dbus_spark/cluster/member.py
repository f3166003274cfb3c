"""One runtime as a member of a dbus cluster: ZooKeeper decides what it reads and runs.

The ``ClusterMember`` lives in the driver process. A control loop turns the
coordinator's view (sources this runtime owns, at which epoch; the active
function versions) into the runtime's private configuration file, which the
binlog source and the function stage re-read at their next micro-batch: a
deploy, a rollback or a moved source takes effect at a batch boundary, with no
restart. A progress listener commits each finished batch's end positions to
ZooKeeper, fenced by the epoch the batch read them under, with the source's
history progress (``dbus_spark.state.history``), which so moves with the source.

Its Kafka writes are fenced too (``WriteFencing``; ``dbus_spark.sinks.kafka``
explains how): the member advertises a ``handoff`` time, and the leader gives a
source it released to a new owner only that long after.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dbus_fn.bundle import materialize
from dbus_fn.capture import BinlogReader
from dbus_fn.coordination import (
    ActiveFunction,
    Coordinator,
    FunctionStore,
    FunctionWatcher,
    RequestBox,
    ZooKeeperSettings,
    cluster_incarnation,
    read_plans,
)
from dbus_fn.errors import DbusError, FencedError
from dbus_spark.config.runtime import (
    DeploymentFolder,
    RuntimeConfig,
    SourceBinding,
    WriteFencing,
    default_decode_shards,
)
from dbus_spark.planning.mailbox import forward
from dbus_spark.sinks.kafka_admin import abort_scan_seconds
from dbus_spark.stage.worker import offset_to_position
from dbus_spark.state.checkpoint import bundles_dir, progress_path
from dbus_spark.state.history import HistoryStore
from dbus_spark.state.history.plans import open_plans
from dbus_spark.state.progress import ProgressBook

log = logging.getLogger("dbus.runtime")

REFRESH_SECONDS = 1.0
# Past the hold, the transaction and the broker's abort scan: for clock rates and
# the last round trips.
HANDOFF_MARGIN = 0.5


def handoff_seconds(fencing: WriteFencing, abort_scan: float) -> float:
    """How long after a release a source's old owner may still make Kafka writes
    visible: a confirmed hold lets a worker commit for ``hold_seconds``, and a
    transaction begun by then is committed or aborted within its timeout plus the
    broker's abort scan."""
    return fencing.hold_seconds + fencing.transaction_timeout + abort_scan + HANDOFF_MARGIN


class ClusterMember:
    """Joins the cluster, keeps the runtime's configuration in step with it, commits."""

    def __init__(
        self,
        settings: ZooKeeperSettings,
        runtime_id: str,
        base: RuntimeConfig,
        config_path: Path,
        *,
        capacity: float = 1.0,
        start: str = "latest",
    ) -> None:
        fencing = WriteFencing(settings, runtime_id)
        self.handoff = handoff_seconds(fencing, abort_scan_seconds(base.kafka_bootstrap))
        self.coordinator = Coordinator.from_settings(
            settings, runtime_id, capacity, handoff=self.handoff
        )
        self._base = replace(base, fencing=fencing)
        self.checkpoint_dir = base.checkpoint_dir
        # Key shards' connections get claimed server ids too: as many as a local
        # query uses (local[*]); a query on more cores derives the rest.
        self._shards = base.decode_shards or default_decode_shards(os.cpu_count() or 1)
        self.config_path = config_path
        self._start = start
        self._watcher: FunctionWatcher | None = None
        self._bindings: dict[str, SourceBinding] = {}
        self._generations = 0
        self._written: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._history = HistoryStore(progress_path(base.checkpoint_dir))
        self._book = ProgressBook(base.checkpoint_dir)
        self._ship: Callable[[Sequence[str]], None] | None = None
        self._shipped: set[str] = set()
        """Digests of the function versions whose packages reached Spark."""
        self._refused: set[str] = set()
        """Digests of the function versions whose packages do not resolve (said once)."""

    def ship_with(self, ship: Callable[[Sequence[str]], None]) -> None:
        """Hand each function version's packages to the executors with ``ship`` before
        the configuration names it (those written so far at once)."""
        with self._lock:
            self._ship = ship
            assert self._watcher is not None
            for function in self._watcher.current:
                self._shippable(function)

    def _shippable(self, function: ActiveFunction) -> bool:
        """Whether ``function``'s packages reached the executors (shipped now if not): a
        version whose set does not resolve or import is left out, said once; the other
        deployments go on."""
        if self._ship is None or function.content_hash in self._shipped:
            return True
        if function.content_hash in self._refused:
            return False
        try:
            self._ship([str(function.path)])
        except DbusError as exc:
            self._refused.add(function.content_hash)
            log.error(
                "cluster: %s %s is not run here: its packages cannot be given to the "
                "executors: %s",
                function.name,
                function.version,
                exc,
            )
            return False
        self._shipped.add(function.content_hash)
        return True

    def start(self) -> RuntimeConfig:
        """Join (one-line errors if ZooKeeper or the cluster is missing); write the
        first configuration and keep it current in the background."""
        self.coordinator.start()
        # Exactly-once lanes are this making of the cluster's (``RuntimeConfig.incarnation``).
        made = cluster_incarnation(self.coordinator.client, self.coordinator.settings)
        self._base = replace(self._base, incarnation=made)
        self._watcher = self.coordinator.function_watcher(
            cache_dir=bundles_dir(self._base.checkpoint_dir)
        )
        log.info(
            "cluster: Kafka writes are transactional and fenced; a source this runtime "
            "releases moves %.1f s later",
            self.handoff,
        )
        config = self.refresh()
        self._thread = threading.Thread(target=self._loop, name="dbus-cluster", daemon=True)
        self._thread.start()
        return config

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._watcher is not None:
            self._watcher.stop()
        self.coordinator.stop()

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            try:
                self.refresh()
                self.take_requests()
            except DbusError as exc:
                log.warning("cluster: %s", exc)
            except Exception:  # the loop must outlive one bad refresh
                log.exception("cluster: refresh failed; trying again")

    def refresh(self) -> RuntimeConfig:
        """Write the configuration the cluster asks for now; return it."""
        with self._lock:
            assert self._watcher is not None
            self._watcher.poll()
            functions = [
                f for f in sorted(self._watcher.current, key=lambda f: f.name)
                if self._shippable(f)
            ]  # fmt: skip
            # While ZooKeeper is away, and once the same session is back until the
            # coordinator has read the assignments again, keep the current work
            # (commits are held) and start nothing new.
            owned = self.coordinator.owned_sources() or {
                name: epoch
                for name, epoch in self.coordinator.kept_sources().items()
                if name in self._bindings and self._bindings[name].epoch == epoch
            }
            bindings = {}
            for name, epoch in owned.items():
                known = self._bindings.get(name)
                bindings[name] = (
                    known if known is not None and known.epoch == epoch
                    else self._acquire(name, epoch)
                )  # fmt: skip
            self._bindings = bindings
            config = replace(
                self._base,
                sources=tuple(bindings[name] for name in sorted(bindings)),
                deployments=tuple(DeploymentFolder(f.name, str(f.path)) for f in functions),
            )
            wanted = config.to_json()
            if wanted != self._written:
                config.save(self.config_path)
                self._written = wanted
                log.info(
                    "cluster: sources %s, functions %s",
                    {n: b.epoch for n, b in bindings.items()},
                    [f"{f.name}@{f.version}" for f in functions],
                )
            return config

    def previous_version(self, name: str, version: str) -> tuple[str, Path] | str:
        """The version of ``name`` deployed before ``version`` and its folder, or why
        there is none (the dashboard's preview compares the two)."""
        store = FunctionStore(self.coordinator.client, self.coordinator.settings)
        versions = store.versions(name)
        if version not in versions or versions.index(version) == 0:
            return f"{name} {version} is its first version here: there is none before it"
        earlier = versions[versions.index(version) - 1]
        folder = materialize(
            store.bundle(name, earlier), bundles_dir(self._base.checkpoint_dir)
        )
        return earlier, folder

    def take_requests(self) -> None:
        """Carry the cluster's history requests (`dbus fn backfill`, `replay`) for the
        sources this runtime owns to its driver, and its answers back."""
        with self._lock:
            owned = set(self._bindings)
        if not owned:
            return
        box = RequestBox(self.coordinator.client, self.coordinator.settings)
        for request in box.open():
            for source in set(request.sources) & owned - request.answered:
                reply = forward(self.checkpoint_dir, request.body, request.id, source)
                if reply is not None:
                    box.answer(request.id, source, reply)

    def _acquire(self, source: str, epoch: int) -> SourceBinding:
        """A source newly owned at ``epoch``: resume from its committed position."""
        spec = self.coordinator.sources.get(source).spec()
        replica_id = self.coordinator.replica_id(source)
        shard_ids = tuple(self.coordinator.replica_id(source, i) for i in range(1, self._shards))
        committed = self.coordinator.committed_position(source)
        # The history progress committed with the position moves with the source: a
        # bootstrap half done by the last owner goes on from its last chunk here. A
        # source never committed starts afresh; read from a given position, the
        # binlog is its history (see ``HistoryStore.consider``).
        history: dict[str, Any] = {}
        if committed is not None:
            begin = committed.position
            history = dict(committed.history or {})
            # What the last owner planned after that and may have sent: read again
            # first, as it was planned (see ``dbus_spark.state.history.plans``).
            history["plans"] = open_plans(
                read_plans(self.coordinator.client, self.coordinator.settings, source), history
            )
        else:
            history = {"from_binlog": True} if self._start != "latest" else {}
            reader = BinlogReader(spec, replica_id=replica_id)
            try:
                begin = reader.resolve_start(self._start)
            finally:
                reader.close()
        self._generations += 1
        log.info(
            "cluster: now reading %s from %s (epoch %d, generation %d)",
            source, begin, epoch, self._generations,
        )  # fmt: skip
        return SourceBinding(
            spec=spec,
            replica_id=replica_id,
            start=begin,
            epoch=epoch,
            generation=self._generations,
            shard_replica_ids=shard_ids,
            history=history,
            taken=f"{self.coordinator.runtime_id}/{uuid.uuid4().hex}",
        )

    def commit(self, end_offsets: Mapping[str, Any]) -> None:
        """Commit a finished batch's end positions, each under the epoch it was read at.

        A position read under an earlier generation is not committed: that batch
        read nothing of the source (see ``dbus_spark.planning.source``), or this runtime has
        since taken it up again from its committed position.
        """
        with self._lock:
            bindings = dict(self._bindings)
        self._history.reload()
        for source, offset in end_offsets.items():
            epoch = int(offset.get("epoch", 0))
            binding = bindings.get(source)
            if binding is None or binding.generation != int(offset.get("generation", 0)):
                log.info("cluster: not committing %s, read under an earlier hold of it", source)
                continue
            # The history file is written before Spark records a batch, so it is at
            # least as new as this position: a chunk it has is in the sinks.
            # So is the book (``dbus_spark.state.progress``): the deployments not with the
            # stream, at their positions, move with the source.
            history = (
                {**self._history.section(source), "pace": self._book.section(source)}
                if self._history.adopted(source) == binding.taken
                else binding.history
            )
            try:
                self.coordinator.commit_position(
                    source, offset_to_position(offset), epoch, dict(history or {})
                )
            except FencedError as exc:
                # Another runtime owns it now; it resumes from the last commit.
                log.warning("cluster: %s", exc)


class PositionCommitter:
    """Commits positions when Spark reports a finished (checkpointed) micro-batch."""

    def __init__(self, member: ClusterMember) -> None:
        self._member = member

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if not progress.numInputRows and not progress.sources:
            return
        for source in progress.sources:
            if source.endOffset:
                self._member.commit(json.loads(source.endOffset))
