"""Where a runtime's checkpoint is, what Spark wrote there, and the runtime's own
files that go with it.

A checkpoint is a local folder (the fast path, read with plain file calls) or any
Hadoop file system URI the driver can reach (``hdfs://``, ``s3a://``, ``abfs://``,
``file://`` ...), read through the driver's JVM. Spark writes ``offsets/<id>`` when
it plans a micro-batch and ``commits/<id>`` once the sinks took it; those two logs
are all the runtime reads back.

The runtime's own files stay on the driver's disk: beside a local checkpoint as
``<name>.config.json`` and so on, and for a URI under ``<home>/checkpoints/<slug>``
(see ``local_twin``), where every command given the same ``--checkpoint`` finds
them. This module names each of them, and says what it holds (``last_config_path``,
``progress_path``, ``reports_dir``, ``requests_dir``, ``slots_dir``, ``address_path``,
``bundles_dir``); nothing else makes a path beside a checkpoint. (A read carried
across micro-batches keeps its lock and stop files on the host that reads, not
here: ``dbus_spark.reads.open_read``.)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from dbus_fn.capture import coordinates, position_from_json
from dbus_fn.errors import ConfigError
from dbus_fn.events import BinlogPosition
from dbus_fn.files import cannot_create_in, replace_file
from dbus_fn.home import dbus_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$")


def is_uri(checkpoint: str) -> bool:
    """A Hadoop file system URI (``scheme://...``), not a local path."""
    return _URI.match(checkpoint) is not None


def resolve(checkpoint: str) -> str:
    """The checkpoint as the runtime keeps it: a local path made absolute, a URI
    checked for a path and kept as given; ``ConfigError`` naming the fix."""
    match = _URI.match(checkpoint)
    if match is None:
        local = Path(checkpoint).resolve()
        _refuse_a_file(checkpoint, local)
        return str(local)
    scheme, rest = match["scheme"].lower(), match["rest"].rstrip("/")
    path = rest if scheme == "file" else rest.partition("/")[2]
    if not path or (scheme == "file" and not rest.startswith("/")):
        example = f"{scheme}://{'' if scheme == 'file' else 'host'}/var/lib/dbus/checkpoint"
        raise ConfigError(
            f"--checkpoint {checkpoint!r} names no folder; write it as {example}",
            setting="checkpoint",
        )
    if scheme == "file":
        _refuse_a_file(checkpoint, Path(rest))
    return f"{scheme}://{rest}"


def _refuse_a_file(checkpoint: str, local: Path) -> None:
    """``ConfigError`` when ``local``, or the nearest of its folders that exists, is a
    file: Spark would fail on it only once started, and the runtime's own files
    (``<name>.config.json`` ...) would already lie beside it."""
    existing = next((p for p in (local, *local.parents) if p.exists()), None)
    if existing is None or existing.is_dir():
        return
    what = "is a file" if existing == local else f"lies under the file {existing}"
    raise ConfigError(
        f"--checkpoint {checkpoint!r} {what}; it wants a folder (made if missing) or a "
        "Hadoop file system URI such as hdfs://host/var/lib/dbus/checkpoint",
        setting="checkpoint",
    )


def check_creatable(checkpoint: str) -> None:
    """``ConfigError`` when a runtime could not make or write its checkpoint (local, or a
    ``file://`` URI's folder) and its own files beside it: found before Spark starts,
    not by Spark's first write with a traceback (issue #46). Another file system's
    URI is left to the driver's Hadoop client."""
    match = _URI.match(checkpoint)
    if match is not None and match["scheme"].lower() != "file":
        return
    local = Path(checkpoint if match is None else match["rest"])
    if local.is_dir():
        # Spark writes in it; the runtime's own files lie beside a local one (``beside``).
        checks = [(local, f"write in {local}")]
        if match is None:
            checks.append((local.parent, f"write in {local.parent}"))
    else:
        # Made in the nearest folder that exists (one that is a file, ``resolve`` refused).
        existing = next(p for p in local.parents if p.exists())
        checks = [(existing, f"create {existing / local.relative_to(existing).parts[0]}")]
    for folder, what in checks:
        refused = cannot_create_in(folder)
        if refused is not None:
            raise ConfigError(
                f"checkpoint {checkpoint}: cannot {what} ({refused.strerror}); choose a "
                "writable folder with --checkpoint",
                setting="checkpoint",
            )


def local_twin(checkpoint: str) -> Path:
    """The local path the runtime's own files are named after: the checkpoint itself
    when local; for a URI, ``<home>/checkpoints/<slug>`` (slug: the URI made a file
    name, with a hash of it so two URIs never share one)."""
    if not is_uri(checkpoint):
        return Path(checkpoint)
    readable = re.sub(r"[^A-Za-z0-9.]+", "-", checkpoint).strip("-")[-80:]
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:10]
    return dbus_home() / "checkpoints" / f"{readable}-{digest}"


def beside(checkpoint: str, suffix: str) -> Path:
    """The runtime's own file or folder ``suffix`` names (``.config.json``,
    ``.history.json``, ``.reports`` ...) for this checkpoint, on the driver's disk."""
    twin = local_twin(checkpoint)
    return twin.parent / f"{twin.name}{suffix}"


def local_folder(checkpoint: str) -> Path:
    """The driver-side folder that holds the runtime's own files."""
    return local_twin(checkpoint).parent


def last_config_path(checkpoint: str) -> Path:
    """``<checkpoint>.config.json``: the configuration the runtime last ran with, its
    sources' DSNs without passwords; every ``dbus fn`` command given the checkpoint
    finds the runtime's sources and deployments here."""
    return beside(checkpoint, ".config.json")


def progress_path(checkpoint: str) -> Path:
    """``<checkpoint>.progress/``: each deployment's progress beyond the positions
    Spark's offset log holds, its history tasks included (``ProgressFolder``)."""
    return beside(checkpoint, PROGRESS)


def reports_dir(checkpoint: str) -> Path:
    """``<checkpoint>.reports/``: each micro-batch's report to the driver
    (``dbus_spark.state.batch_reports``), and the workers' live counters
    (``dbus_spark.state.live_counters``)."""
    return beside(checkpoint, ".reports")


def requests_dir(checkpoint: str) -> Path:
    """``<checkpoint>.requests/``: the mailbox through which the runtime's process
    hands requests to its planner, and the planner's answers
    (``dbus_spark.planning.mailbox``)."""
    return beside(checkpoint, ".requests")


def slots_dir(checkpoint: str) -> Path:
    """``<checkpoint>.slots/``: one lock file per write slot of a standalone runtime
    whose Kafka writes are exactly once; a worker's sinks hold one while they live, and
    write under its stable transactional id (``dbus_spark.sinks.write_slots``)."""
    return beside(checkpoint, ".slots")


def address_path(checkpoint: str) -> Path:
    """``<checkpoint>.api``: the URL of the running runtime's API, replaced in one
    step when it starts (``dbus_spark.interfaces.api``)."""
    return beside(checkpoint, ".api")


def bundles_dir(checkpoint: str) -> Path:
    """``bundles/`` in the folder of the runtime's files: the deployments' bundles a
    cluster member fetched from ZooKeeper (``dbus_spark.cluster.member``)."""
    return local_folder(checkpoint) / "bundles"


PROGRESS = ".progress"
"""The one folder that holds each deployment's progress beside Spark's offset log."""
SECTIONS = ("deployments", "reached", "delivered", "history", "incarnation")
_LEGACY = {"deployments": ".progress.json", "reached": ".reached.json", "history": ".history.json"}
"""Where an older runtime kept each section, read once on upgrade."""


class ProgressFolder:
    """``<checkpoint>.progress/``: what a runtime knows of its progress beyond the
    positions Spark's offset log holds, in one folder, one JSON file per section:

    - ``deployments``: per source, the deployments not with the stream, where each
      stands and why (``dbus_spark.state.progress.ProgressBook``);
    - ``reached``: per source, how far an open read delivered past its batch's
      planned end (``record_reached``);
    - ``delivered``: per source, how far a carried open read had its sinks
      acknowledge everything while it read, noted about every second
      (``record_delivered``), taken into ``reached`` when a run starts;
    - ``history``: bootstrap, backfill and replay tasks and how far each got
      (``dbus_spark.state.history.HistoryStore``).
    - ``incarnation``: which making of the checkpoint it is
      (``checkpoint_incarnation``).

    Spark's Python workers on the driver (the planner, the writer's commit), the
    runtime's own process and the ``dbus fn`` commands all read it. Each change is
    a read, change and replace under a lock on the folder, so two processes never
    lose each other's change; a section is its own file, so the small ones written
    every batch never rewrite (or make anyone read again) a long history. Each file
    is replaced in one step: a runtime killed mid-write leaves the old text or the
    new.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._held: dict[str, Any] | None = None
        """Inside ``held``: each section read or changed so far."""
        self._changed: set[str] = set()
        self._depth = 0

    @classmethod
    def of(cls, checkpoint: str) -> ProgressFolder:
        return cls(progress_path(checkpoint))

    def file(self, section: str) -> Path:
        if section not in SECTIONS:
            raise ValueError(f"no progress section {section!r} (sections: {SECTIONS})")
        return self.path / f"{section}.json"

    def read(self, section: str) -> Any:
        """The section as last written ({} when never)."""
        if self._held is not None:
            if section not in self._held:
                self._held[section] = self._load(section)
            return self._held[section]
        return self._load(section)

    def stamp(self, section: str) -> int:
        """Changes whenever ``section`` is replaced (0: it never was)."""
        try:
            return self.file(section).stat().st_mtime_ns
        except FileNotFoundError:
            return 0

    def write(self, section: str, value: Any) -> None:
        """Replace ``section`` with ``value`` ({} or None empties it)."""
        self.update(section, lambda _: value)

    def update(self, section: str, change: Callable[[Any], Any]) -> Any:
        """Replace ``section`` with ``change(section)`` while no other process writes
        the folder; what ``change`` returned."""
        with self.held():
            assert self._held is not None
            value = change(self.read(section)) or {}
            self._held[section] = value
            self._changed.add(section)
            return value

    def forget(self, *sections: str) -> None:
        with self.held():
            for section in sections:
                self.write(section, None)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Changes made inside are written at the end, each changed section once, and
        no other process writes the folder meanwhile (a batch's commit)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.path.mkdir(parents=True, exist_ok=True)
        folder = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            self._held, self._changed, self._depth = {}, set(), 1
            try:
                yield
                for section in sorted(self._changed):
                    text = json.dumps(self._held[section], sort_keys=True)
                    replace_file(self.file(section), text, mode=0o600)
                    legacy = self._legacy(section)
                    if legacy is not None:
                        legacy.unlink(missing_ok=True)
            finally:
                self._held, self._changed, self._depth = None, set(), 0
        finally:
            os.close(folder)  # and with it the lock

    def _load(self, section: str) -> Any:
        for path in (self.file(section), self._legacy(section)):
            if path is None:
                continue
            try:
                data = json.loads(path.read_text())
            except (FileNotFoundError, NotADirectoryError, ValueError):
                continue
            return data if isinstance(data, dict) else {}
        return {}

    def _legacy(self, section: str) -> Path | None:
        if not self.path.name.endswith(PROGRESS) or section not in _LEGACY:
            return None
        name = self.path.name[: -len(PROGRESS)]
        return self.path.with_name(name + _LEGACY[section])


def record_reached(checkpoint: str, reached: dict[str, dict[str, Any]]) -> None:
    """Note, per source, the position an open read delivered up to (past its batch's
    planned end). Called once the sinks acknowledged everything up to there, so the
    next batch may start there without losing a change."""
    ProgressFolder.of(checkpoint).update("reached", lambda known: {**known, **reached})


def load_reached(checkpoint: str) -> dict[str, dict[str, Any]]:
    """Per source, where its last open read delivered up to ({} when none has)."""
    return dict(ProgressFolder.of(checkpoint).read("reached"))


def forget_reached(checkpoint: str) -> None:
    """A new checkpoint starts where it is told, whatever an old one reached."""
    ProgressFolder.of(checkpoint).forget("reached", "delivered")


def record_delivered(
    checkpoint: str, source: str, position: dict[str, Any], deployments: Iterable[str]
) -> None:
    """Note that ``deployments`` had everything of ``source`` up to ``position`` (a
    transaction boundary) acknowledged by their sinks. A carried open read notes this
    as it reads, about every second, while no batch commits: a runtime killed
    meanwhile starts its next run there (``take_delivered``), not at its last batch."""
    note = {"position": position, "deployments": sorted(deployments)}
    ProgressFolder.of(checkpoint).update("delivered", lambda known: {**known, source: note})


def take_delivered(checkpoint: str, deployments: Iterable[str]) -> dict[str, dict[str, Any]]:
    """At a run's start: what the last run's carried reads noted as delivered
    (``record_delivered``) becomes ``reached`` where it is further, for each source
    whose note covers every deployment the run has (a deployment added since got
    none of it: the source then starts where its last batch did); the notes are
    forgotten. What became reached, per source."""
    wanted = set(deployments)
    folder = ProgressFolder.of(checkpoint)
    taken: dict[str, dict[str, Any]] = {}
    with folder.held():
        reached = folder.read("reached")
        for source, note in folder.read("delivered").items():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                if not wanted <= set(note["deployments"]):
                    continue
                further = position_from_json(note["position"])
                known = reached.get(source)
                if known is None or coordinates(further) > coordinates(position_from_json(known)):
                    taken[source] = note["position"]
        if taken:
            folder.update("reached", lambda known: {**known, **taken})
        folder.forget("delivered")
    return taken


class _Files(Protocol):
    def names(self, folder: str) -> list[str]: ...

    def read(self, path: str) -> str | None: ...


class _LocalFiles:
    def names(self, folder: str) -> list[str]:
        path = Path(folder)
        return [p.name for p in path.iterdir()] if path.is_dir() else []

    def read(self, path: str) -> str | None:
        try:
            return Path(path).read_text()
        except FileNotFoundError:
            return None


class _HadoopFiles:
    """The checkpoint's files through Hadoop's ``FileSystem`` in the driver's JVM,
    with the session's Hadoop settings (``spark.hadoop.*``)."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        context = spark.sparkContext
        self._jvm: Any = context._jvm
        self._conf = context._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        self._checkpoint = checkpoint

    def _open(self, path: str) -> tuple[Any, Any]:
        from py4j.protocol import Py4JJavaError

        hadoop_path = self._jvm.org.apache.hadoop.fs.Path(path)
        try:
            return hadoop_path.getFileSystem(self._conf), hadoop_path
        except Py4JJavaError as error:
            cause = str(error.java_exception.getMessage()).splitlines()[0]
            raise ConfigError(
                f"--checkpoint {self._checkpoint}: the driver cannot open it ({cause}); "
                "put the file system's jars on the driver (spark.jars.packages) and its "
                "settings in spark.hadoop.*, or use a local folder",
                setting="checkpoint",
            ) from None

    def names(self, folder: str) -> list[str]:
        fs, path = self._open(folder)
        if not fs.exists(path):
            return []
        return [str(status.getPath().getName()) for status in fs.listStatus(path)]

    def read(self, path: str) -> str | None:
        fs, hadoop_path = self._open(path)
        if not fs.exists(hadoop_path):
            return None
        stream = fs.open(hadoop_path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


def _files(checkpoint: str, spark: SparkSession | None) -> _Files:
    if not is_uri(checkpoint):
        return _LocalFiles()
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is None:
        raise ConfigError(
            f"--checkpoint {checkpoint} is read through Spark's Hadoop file systems, and "
            "no Spark session runs in this process; read it while the runtime runs",
            setting="checkpoint",
        )
    return _HadoopFiles(spark, checkpoint)


def checkpoint_incarnation(checkpoint: str, spark: SparkSession | None = None) -> str:
    """Which making of ``checkpoint`` this is, for a run about to start: a new id when
    Spark has planned nothing there (a new checkpoint, or one deleted and begun again
    at the same path), recorded in its progress folder; else the one recorded, or ""
    for a checkpoint begun before it had one. ``spark``: the session that reads a URI.

    A run's exactly-once lanes are scoped by it (``RuntimeConfig.incarnation``): no
    mark written before the checkpoint was begun again can be taken for its own. No
    mark can be written under an id before Spark plans a batch, so a first run that
    ends before planning one loses nothing when the next makes another."""
    folder = ProgressFolder.of(checkpoint)
    if SparkLog(checkpoint, spark).started():
        return str(folder.read("incarnation").get("id", ""))
    made = uuid.uuid4().hex[:16]
    folder.write("incarnation", {"id": made})
    return made


class PendingBatch(NamedTuple):
    """A micro-batch Spark planned (wrote its offsets) but never committed."""

    batch: int
    planned_at: float
    """Epoch seconds Spark planned it."""
    positions: dict[str, str]
    """Per source, the position the batch reads up to."""


class SparkLog:
    """What Spark wrote in a checkpoint: the batches it planned and committed."""

    def __init__(self, checkpoint: str, spark: SparkSession | None = None) -> None:
        self.checkpoint = checkpoint.rstrip("/")
        self._files = _files(checkpoint, spark)

    def newest(self, log: str) -> int:
        """The newest batch id in ``offsets`` or ``commits``; -1 for none."""
        names = self._files.names(f"{self.checkpoint}/{log}")
        return max((int(name) for name in names if name.isdigit()), default=-1)

    def offsets(self, batch: int) -> tuple[dict[str, Any], dict[str, BinlogPosition]]:
        """A planned batch's metadata and, per source, the position it reads up to."""
        text = self._files.read(f"{self.checkpoint}/offsets/{batch}")
        if text is None:
            return {}, {}
        lines = text.splitlines()
        metadata = json.loads(lines[1]) if len(lines) > 1 else {}
        positions: dict[str, BinlogPosition] = {}
        for line in lines[2:]:
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                for source, offset in json.loads(line).items():
                    if "kafka" not in offset:  # a Kafka source's offsets name no position
                        positions[source] = position_from_json(offset)
        return metadata, positions

    def started(self) -> bool:
        """Spark has planned a batch here before: this is not the first run."""
        return self.newest("offsets") >= 0

    def pending(self) -> int | None:
        """The newest batch Spark planned and has not committed; None when every batch
        it planned is committed (or it planned none)."""
        planned = self.newest("offsets")
        return planned if planned > self.newest("commits") else None


def pending_batch(checkpoint: str, spark: SparkSession | None = None) -> PendingBatch | None:
    """The newest planned micro-batch whose sinks never acknowledged it, if any; it is
    replayed from its start positions at the next start."""
    spark_log = SparkLog(checkpoint, spark)
    planned = spark_log.pending()
    if planned is None:
        return None
    metadata, offsets = spark_log.offsets(planned)
    positions = {source: str(position) for source, position in offsets.items()}
    return PendingBatch(planned, metadata.get("batchTimestampMs", 0) / 1000, positions)


def committed_positions(
    checkpoint: str, spark: SparkSession | None = None
) -> dict[str, BinlogPosition]:
    """Per source, the position the newest committed micro-batch read up to."""
    return _newest_commit(SparkLog(checkpoint, spark))[1]


def _newest_commit(spark_log: SparkLog) -> tuple[int, dict[str, BinlogPosition]]:
    batch = spark_log.newest("commits")
    return batch, spark_log.offsets(batch)[1] if batch >= 0 else {}


def delivered_positions(
    checkpoint: str, spark: SparkSession | None = None
) -> tuple[int, dict[str, BinlogPosition]]:
    """The newest committed micro-batch (-1: none) and, per source, how far the sinks
    have acknowledged everything: that batch's end, or further where an open read
    delivered past it. The next start with this checkpoint goes on from there."""
    batch, positions = _newest_commit(SparkLog(checkpoint, spark))
    for source, reached in load_reached(checkpoint).items():
        known = positions.get(source)
        with contextlib.suppress(ValueError, KeyError, TypeError):
            further = position_from_json(reached)
            if known is not None and coordinates(further) > coordinates(known):
                positions[source] = further
    return batch, positions


__all__ = [
    "PROGRESS",
    "SECTIONS",
    "PendingBatch",
    "ProgressFolder",
    "SparkLog",
    "address_path",
    "beside",
    "bundles_dir",
    "committed_positions",
    "delivered_positions",
    "forget_reached",
    "is_uri",
    "last_config_path",
    "load_reached",
    "local_folder",
    "local_twin",
    "pending_batch",
    "progress_path",
    "record_delivered",
    "record_reached",
    "reports_dir",
    "requests_dir",
    "resolve",
    "take_delivered",
]
