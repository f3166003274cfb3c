"""The runtime's configuration, read in one place.

Spark passes data source options as strings that end up in query plans and logs,
so DSNs (which carry passwords) never travel as options: the runtime writes its
configuration to a private file (mode 0600) and the source and writer get only its
path. The file holds no password: the process that wrote it keeps them
(``dbus_spark.config.secrets``). They read it on the driver; what executors need of it
travels inside each task (``dbus_spark.stage.shipment``), so no executor opens a path of
the driver's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import field, fields
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import (
    PlainSerializer,
    PlainValidator,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.dataclasses import dataclass

from dbus_fn.capture import (
    SourceSpec,
    parse_servers,
    position_from_json,
    position_to_json,
    replica_id_for,
)
from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX
from dbus_fn.coordination import ZooKeeperSettings
from dbus_fn.errors import ConfigError, DbusError, DsnError
from dbus_fn.events import BinlogPosition
from dbus_fn.files import replace_file
from dbus_fn.manifest import MANIFEST_FILE, Manifest, load_manifest
from dbus_spark.config import secrets
from dbus_spark.config.json_form import JSON_FORM, JsonForm
from dbus_spark.config.kafka_source import KafkaSource

StartPolicy = str | BinlogPosition  # "earliest" | "latest" | a position
DEFAULT_CHUNK_ROWS = 10_000
# A micro-batch costs Spark a few hundred milliseconds of planning and commits; a
# reader that stays open this long past its planned end delivers in the meantime.
DEFAULT_OPEN_READ_SECONDS = 2.0
# A deployment whose sinks take longer than this to acknowledge a read's records is
# detached and catches up alone (``dbus_spark.state.progress``), so the others never wait
# on it for longer.
DEFAULT_DETACH_SECONDS = 5.0
DEFAULT_PREVIEW_WINDOW = 100
"""How many of each table's newest changes a runtime keeps for `dbus fn preview`."""
DEFAULT_API_ADDRESS = "127.0.0.1:9464"
"""Where a runtime serves its metrics unless told otherwise (see ``dbus_spark.interfaces.api``)."""
EXECUTOR_PYTHON_ENV = "DBUS_EXECUTOR_PYTHON"
"""The Python Spark's executors run (``dbus_spark.spark.session.workers_python``)."""
DEFAULT_UI_ADDRESS = "127.0.0.1:9465"
"""Where ``dbus ui`` serves a cluster's dashboard unless told otherwise."""


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class DeploymentFolder(JsonForm):
    """One deployment as this runtime runs it: the name it is deployed under, which is
    its identity everywhere (stream, sinks, metrics, pause, preview, positions), and
    the folder its files are in. One folder may run under several names."""

    name: str
    path: str

    def manifest(self) -> Manifest:
        return load_manifest(self.path).deployed_as(self.name)

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """A bare path was written before deployments had names of their own: it runs
        under its manifest's name."""
        if not isinstance(data, str):
            return data
        try:
            return {"name": load_manifest(data).name, "path": data}
        except DbusError:  # its folder is gone: loading it says so, not reading this
            return {"name": Path(data).name, "path": data}


def deployment_folders(paths: Iterable[str]) -> tuple[DeploymentFolder, ...]:
    """Folders given by path alone (``--functions``), each under its manifest's name
    (``loaded_folders``)."""
    return tuple(folder for folder, _ in loaded_folders(paths))


def loaded_folders(paths: Iterable[str]) -> list[tuple[DeploymentFolder, Manifest]]:
    """Folders given by path alone, each under its manifest's name, with that manifest.

    The same folder twice, or two folders whose manifests name one deployment, would
    run as one deployment delivering every change twice: refused in one line.
    """
    found: dict[str, tuple[str, DeploymentFolder, Manifest]] = {}
    for given in paths:
        manifest = load_manifest(given)
        folder = DeploymentFolder(manifest.name, str(Path(given).resolve()))
        if folder.name in found:
            before, known, _ = found[folder.name]
            raise ConfigError(
                f"--functions {given} is given twice; pass each folder once"
                if known.path == folder.path
                else f"--functions {before} and {given} both name deployment {folder.name!r}; "
                f"change name = in one of their {MANIFEST_FILE} files",
                setting="functions",
            )
        found[folder.name] = (given, folder, manifest)
    return [(folder, manifest) for _, folder, manifest in found.values()]


def _start_from_json(data: Any) -> StartPolicy:
    if isinstance(data, BinlogPosition):
        return data
    if isinstance(data, dict):
        return position_from_json(data)
    return str(data)


def _start_to_json(start: StartPolicy) -> Any:
    if isinstance(start, BinlogPosition):
        return position_to_json(start)
    return start


Start = Annotated[StartPolicy, PlainValidator(_start_from_json), PlainSerializer(_start_to_json)]
"""A start policy, a position as its one JSON form (``position_to_json``)."""

_SPEC_FIELDS = tuple(f.name for f in fields(SourceSpec) if f.init)


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class SourceBinding(JsonForm):
    """One binlog source as this runtime reads it.

    Its JSON holds the spec's fields (name, DSN, tables...) beside its own, as the
    configuration file always had them."""

    spec: SourceSpec
    replica_id: int
    """The server_id this runtime's reader registers with (see ``replica_id_for``)."""
    start: Start = "latest"
    epoch: int = 0
    """Ownership epoch in a cluster (0 alone): a new epoch means "resume from
    ``start``", the committed position, not from this runtime's checkpoint."""
    generation: int = 0
    """Which of this runtime's acquisitions of the source (a cluster member counts
    them, 0 alone). A micro-batch planned under another generation reads nothing
    and its position is not committed: the source moved away, or came back after
    this runtime lost sight of it, and is read again from ``start``."""
    shard_replica_ids: tuple[int, ...] = ()
    """Server ids of the extra connections of key shards 1, 2, ... as claimed in a
    cluster; a shard past them (or any, alone) derives its id from ``replica_id``."""
    history: Mapping[str, Any] | None = None
    """In a cluster, the source's history progress as its last owner committed it
    with ``start`` (``HistoryStore.section``): the driver takes it over once per
    ``taken``. None alone: the runtime's own history file is the truth."""
    taken: str = ""
    """Which gain of the source this is (unique per acquisition)."""

    def reader_replica_id(self, shard: int) -> int:
        """The replication server id of key shard ``shard``'s connection."""
        if not shard:
            return self.replica_id
        if shard <= len(self.shard_replica_ids):
            return self.shard_replica_ids[shard - 1]
        return replica_id_for(f"{self.replica_id}/shard/{shard}")

    @model_validator(mode="before")
    @classmethod
    def _spec_beside(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "spec" not in data:
            spec = {key: data[key] for key in _SPEC_FIELDS if key in data}
            return {**{k: v for k, v in data.items() if k not in _SPEC_FIELDS}, "spec": spec}
        return data

    @model_serializer(mode="wrap")
    def _spec_flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {**data.pop("spec"), **data}


def default_decode_shards(cores: int) -> int:
    """One key shard per two Spark cores: each shard is a reader and a writer process,
    and together they keep two cores busy. Measured on 2 cores (bench_runtime.py):
    one shard 0.69 of bare decode, two shards 0.68, so two only cost memory there."""
    return max(1, cores // 2)


MAX_DECODE_SHARDS = 64
"""The most key shards (``--decode-shards``) one source is read with. Each shard is a
replication connection of its own to the source server (with a server id claimed for
it) and a reader and a writer task. MySQL and MariaDB take 151 connections by
default and, during a handoff, the old and the new owner of a source are both
connected: 64 each leaves the applications room. It is also the default of a
128-core master; past the cores, more shards only queue behind one another."""


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class WriteFencing(JsonForm):
    """A cluster member's Kafka writes are fenced by its holds (``dbus_spark.sinks.kafka``)."""

    zookeeper: ZooKeeperSettings
    runtime_id: str
    transaction_timeout: float = 2.0
    """Kafka transaction timeout, seconds: a transaction open longer is aborted."""
    hold_seconds: float = 2.0
    """How long one confirmation of a hold lets a worker commit Kafka transactions
    (so how long writing goes on while ZooKeeper is away)."""


@dataclass(frozen=True, slots=True, config=JSON_FORM)
class RuntimeConfig(JsonForm):
    sources: tuple[SourceBinding, ...]
    deployments: tuple[DeploymentFolder, ...]
    kafka_bootstrap: str
    elasticsearch_url: str
    checkpoint_dir: str
    trigger_seconds: float = 0.0
    type_prefix: str = DEFAULT_TYPE_PREFIX
    topic_partitions: int = 3
    decode_shards: int = 0
    """Readers per busy source in one micro-batch (0: one per two Spark cores); see
    ``dbus_spark.planning.source``."""
    fencing: WriteFencing | None = None
    """Set in a cluster member: Kafka writes are transactional and fenced."""
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """Rows per chunk of a history read (see ``dbus_spark.state.history``)."""
    open_read_seconds: float = DEFAULT_OPEN_READ_SECONDS
    """How long a micro-batch's one reader of a source goes on past the batch's planned
    end, handing out changes as they are committed (0: never); see
    ``dbus_spark.planning.source``."""
    detach_seconds: float = DEFAULT_DETACH_SECONDS
    """How long a deployment's sinks may take to acknowledge a read's records before
    it is detached and catches up alone (0: never; everyone waits); see
    ``dbus_spark.state.progress``."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    kafka_sources: tuple[KafkaSource, ...] = ()
    """Sources of CloudEvents in Kafka topics (``dbus_spark.config.kafka_source``)."""
    preview_window: int = DEFAULT_PREVIEW_WINDOW
    """How many of each table's newest changes the runtime keeps for previews (0:
    none); see ``dbus_spark.interfaces.preview``."""
    exactly_once_deployments: tuple[str, ...] = ()
    """The deployments of a standalone runtime whose manifests ask for exactly-once
    Kafka delivery (``delivery = "exactly-once"``); see ``exactly_once``."""
    incarnation: str = ""
    """Which making of its checkpoint (alone: ``state.checkpoint.checkpoint_incarnation``)
    or of its cluster (a member: ``dbus_fn.coordination.cluster_incarnation``) this
    runtime writes for: part of its exactly-once lanes' scope
    (``dbus_spark.sinks.kafka_positions.scope_of``). "" for one begun before."""

    @property
    def exactly_once(self) -> bool:
        """Whether its Kafka writes are exactly once for ``read_committed`` consumers:
        transactional, each carrying how far its lanes go
        (``dbus_spark.sinks.kafka_positions``): a cluster member's, and a standalone
        runtime's with a deployment that asks for it."""
        return self.fencing is not None or bool(self.exactly_once_deployments)

    def writes_once(self, deployment: str) -> bool:
        """Whether ``deployment``'s Kafka writes are exactly once (``exactly_once``)."""
        return self.fencing is not None or deployment in self.exactly_once_deployments

    def source(self, name: str) -> SourceBinding:
        for binding in self.sources:
            if binding.spec.name == name:
                return binding
        raise ConfigError(f"source {name!r} is not configured in this runtime", setting="sources")

    def kafka_source(self, name: str) -> KafkaSource:
        for source in self.kafka_sources:
            if source.name == name:
                return source
        raise ConfigError(f"source {name!r} is not configured in this runtime", setting="sources")

    def reads(self, name: str, epoch: int, generation: int) -> bool:
        """Whether this runtime reads ``name`` now as it did when a batch was planned."""
        return any(
            b.spec.name == name and (b.epoch, b.generation) == (epoch, generation)
            for b in self.sources
        )

    def save(self, path: Path) -> Path:
        """Write the config privately and return its path; its DSNs go without their
        passwords, which this process keeps (``dbus_spark.config.secrets``) from now on.

        The file is replaced atomically: Spark's workers re-read it when it
        changes (new deployments, sources gained or lost) and must never see half.
        """
        data = self.to_json()
        kept = {}
        for source in data["sources"]:
            public = _public_dsn(source["dsn"])
            if public != source["dsn"]:
                kept[source["name"]] = source["dsn"]
                source["dsn"], source["secret"] = public, True
        if kept:
            data["secrets"] = secrets.keep(path, kept)
        replace_file(path, json.dumps(data), mode=0o600, parents=True)
        return path


def load_config(
    path: str | Path, *, with_secrets: bool = True, dsns: Mapping[str, str] | None = None
) -> RuntimeConfig:
    """The configuration a runtime saved at ``path``; its DSNs with their passwords,
    asked of the runtime's process, unless not ``with_secrets``. ``dsns``: the full
    DSN of some sources, given by the caller (then that runtime need not run)."""
    try:
        data = json.loads(Path(path).read_text())
        for source in data["sources"]:
            given = (dsns or {}).get(source["name"])
            if given is not None:
                source["dsn"] = given
            elif with_secrets and data.get("secrets") and source.get("secret"):
                source["dsn"] = secrets.ask(data["secrets"], source["name"], path)
        return RuntimeConfig.from_json(data)
    except ConfigError:
        raise  # a password no runtime answers for: it says so itself
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"cannot read runtime config {path}: {exc}", setting="config") from exc


class ConfigFile:
    """The configuration a runtime saved at ``path``, read again only when the file
    changed (its modification time or size).

    The source's planner asks for it every micro-batch and the metrics on every
    scrape; each reading parses the file and asks the runtime's process for the
    passwords. A runtime saves a new configuration by replacing the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._read: tuple[tuple[int, int] | None, RuntimeConfig] | None = None

    def current(self) -> RuntimeConfig:
        """The configuration in the file now (``ConfigError`` when it cannot be read)."""
        try:
            status = os.stat(self.path)
            stamp: tuple[int, int] | None = (status.st_mtime_ns, status.st_size)
        except OSError:
            stamp = None  # load_config says why
        if self._read is None or stamp is None or self._read[0] != stamp:
            # Looked at before reading: a change in between is read again next time.
            self._read = (stamp, load_config(self.path))
        return self._read[1]


def _public_dsn(dsn: str) -> str:
    """``dsn`` without its password (as it is when it has none)."""
    try:
        first, *others = parse_servers(dsn)
    except DsnError:
        return "<invalid DSN>"
    if not first.password:
        return dsn
    public = f"{first.scheme}://{quote(first.user, safe='')}@{first.address}"
    return ",".join([public, *(server.address for server in others)])
