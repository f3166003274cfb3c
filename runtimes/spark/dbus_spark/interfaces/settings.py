"""Build the runtime's configuration from flags, environment and local defaults.

Precedence: flag, environment (click reads ``DBUS_*``), then the local services'
endpoints written by ``dbus services up``. This is the only place that decides.
"""

from __future__ import annotations

from pathlib import Path

from dbus_fn.capture import SourceSpec, redact_dsn, replica_id_for
from dbus_fn.errors import ConfigError, DsnError
from dbus_fn.home import dbus_home as default_home  # where a runtime keeps state unless told
from dbus_fn.local_services import Endpoints, local_endpoints
from dbus_spark.config.kafka_source import is_kafka_url, parse_kafka_source
from dbus_spark.config.runtime import (
    DEFAULT_CHUNK_ROWS,
    DEFAULT_DETACH_SECONDS,
    DEFAULT_OPEN_READ_SECONDS,
    DEFAULT_PREVIEW_WINDOW,
    RuntimeConfig,
    SourceBinding,
    loaded_folders,
)
from dbus_spark.state.checkpoint import check_creatable, resolve

DEFAULT_SOURCE = "local"


def runtime_config(
    *,
    sources: tuple[str, ...],
    deployments: tuple[str, ...],
    kafka: str | None,
    elasticsearch: str | None,
    checkpoint: str | None,
    start: str = "latest",
    trigger: float = 0.0,
    decode_shards: int = 0,
    open_read: float = DEFAULT_OPEN_READ_SECONDS,
    detach_after: float = DEFAULT_DETACH_SECONDS,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    keep_helper_tables: bool | None = None,
    preview_window: int = DEFAULT_PREVIEW_WINDOW,
    home: Path | None = None,
) -> RuntimeConfig:
    """Resolve every setting of a runtime; raise ``ConfigError`` naming the fix.

    ``keep_helper_tables`` applies to every source (``SourceSpec``); None: skip them."""
    local = local_endpoints() if not (sources and kafka and elasticsearch) else None
    named = named_sources(sources)
    kafka_sources = tuple(
        parse_kafka_source(name, dsn, start) for name, dsn in named if is_kafka_url(dsn)
    )
    named = [(name, dsn) for name, dsn in named if not is_kafka_url(dsn)]
    if not named and not kafka_sources:
        if local is None:
            raise ConfigError(
                "no source given and no local services found: pass --source NAME=DSN, "
                "or run `dbus services up` first",
                setting="source",
            )
        named.append((DEFAULT_SOURCE, local.mariadb.dsn))
    kafka, elasticsearch = _sinks(kafka, elasticsearch, local)
    loaded = loaded_folders(deployments)
    folders = tuple(folder for folder, _ in loaded)
    manifests = [manifest for _, manifest in loaded]
    tables = tuple(sorted({t for m in manifests for t in m.tables}))
    checkpoint = _runtime_checkpoint(checkpoint, home)
    bindings = tuple(
        SourceBinding(
            spec=_source_spec(name, dsn, tables, bool(keep_helper_tables)),
            # Two runtimes reading one server under the same source name (two teams,
            # each with the default) must not share a server id: the server would drop
            # one connection each time the other connects. The checkpoint tells them
            # apart, and a restarted runtime keeps its id.
            replica_id=replica_id_for(f"{name}/runtime/{checkpoint}"),
            start=start,
        )
        for name, dsn in named
    )
    return RuntimeConfig(
        sources=bindings,
        deployments=folders,
        kafka_bootstrap=kafka,
        elasticsearch_url=elasticsearch,
        checkpoint_dir=checkpoint,
        trigger_seconds=trigger,
        decode_shards=decode_shards,
        open_read_seconds=open_read,
        detach_seconds=detach_after,
        chunk_rows=chunk_rows,
        kafka_sources=kafka_sources,
        preview_window=preview_window,
        exactly_once_deployments=tuple(
            folder.name for folder, manifest in loaded if manifest.delivery == "exactly-once"
        ),
    )


def named_sources(sources: tuple[str, ...]) -> list[tuple[str, str]]:
    """``--source NAME=DSN`` values (``DBUS_SOURCES``: space-separated) as (name, DSN)."""
    named: list[tuple[str, str]] = []
    for item in _split(sources):
        name, sep, dsn = item.partition("=")
        # A DSN without its name, whose password holds a '=', has no name either.
        if not sep or not name or not dsn or any(c in name for c in ":/@"):
            raise ConfigError(
                f"--source {redact_dsn(item)!r} is not NAME=DSN; "
                "write it as name=mysql://user:password@host:port",
                setting="source",
            )
        if any(name == known for known, _ in named):
            raise ConfigError(
                f"--source {name} is given twice; give each source one name", setting="source"
            )
        named.append((name, dsn))
    return named


def _source_spec(
    name: str, dsn: str, tables: tuple[str, ...], keep_helper_tables: bool
) -> SourceSpec:
    """The binlog source ``--source NAME=DSN`` names; a DSN that does not parse is one
    line quoting it without its password."""
    try:
        return SourceSpec(name, dsn, tables, keep_helper_tables)
    except DsnError as exc:
        raise ConfigError(
            f"--source {name + '=' + redact_dsn(dsn)!r}: {exc}", setting="source"
        ) from None


def member_config(
    *,
    kafka: str | None,
    elasticsearch: str | None,
    checkpoint: str | None,
    trigger: float = 0.0,
    decode_shards: int = 0,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    detach_after: float = DEFAULT_DETACH_SECONDS,
    preview_window: int = DEFAULT_PREVIEW_WINDOW,
    home: Path | None = None,
) -> RuntimeConfig:
    """The settings of a cluster member; ZooKeeper gives its sources and functions."""
    local = local_endpoints() if not (kafka and elasticsearch) else None
    kafka, elasticsearch = _sinks(kafka, elasticsearch, local)
    return RuntimeConfig(
        sources=(),
        deployments=(),
        kafka_bootstrap=kafka,
        elasticsearch_url=elasticsearch,
        checkpoint_dir=_runtime_checkpoint(checkpoint, home),
        trigger_seconds=trigger,
        decode_shards=decode_shards,
        chunk_rows=chunk_rows,
        detach_seconds=detach_after,
        preview_window=preview_window,
    )


def _sinks(
    kafka: str | None, elasticsearch: str | None, local: Endpoints | None
) -> tuple[str, str]:
    kafka = kafka or (local.kafka.bootstrap_servers if local else None)
    elasticsearch = elasticsearch or (local.elasticsearch.url if local else None)
    if not kafka:
        raise ConfigError("no Kafka given: pass --kafka HOST:PORT", setting="kafka")
    if not elasticsearch:
        raise ConfigError(
            "no Elasticsearch given: pass --elasticsearch http://HOST:PORT", setting="elasticsearch"
        )
    return kafka, elasticsearch


def checkpoint_dir(checkpoint: str | None = None) -> str:
    """The checkpoint folder a runtime uses for ``--checkpoint`` (None: the default)."""
    return _checkpoint(checkpoint, None)


def _runtime_checkpoint(checkpoint: str | None, home: Path | None) -> str:
    """The checkpoint a runtime starts with: one it can make and write, checked before
    Spark starts (``check_creatable``)."""
    folder = _checkpoint(checkpoint, home)
    check_creatable(folder)
    return folder


def _checkpoint(checkpoint: str | None, home: Path | None) -> str:
    if checkpoint is not None and not checkpoint.strip():
        # Given, but naming nothing: taking the default would share its state unasked.
        raise ConfigError(
            f"--checkpoint {checkpoint!r} names no folder; give a folder or a URI, or leave "
            "the option out for the default (runtime/checkpoint in the local services' home)",
            setting="checkpoint",
        )
    return resolve(checkpoint or str((home or default_home()) / "runtime" / "checkpoint"))


def _split(values: tuple[str, ...]) -> list[str]:
    # DBUS_SOURCES arrives as one space-separated string.
    return [part for value in values for part in value.split()]
