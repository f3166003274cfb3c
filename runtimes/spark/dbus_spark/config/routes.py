"""Where one deployment's sinks write: its manifest's ``[sinks.kafka]`` and
``[sinks.es]`` options, made into client settings in the worker that writes.

A deployment without them writes to the runtime's Kafka and Elasticsearch. With
them it writes to its own cluster, with its own client settings:

- ``[sinks.kafka]``: ``bootstrap_servers``, and any librdkafka producer setting,
  an underscore read as a dot (``security_protocol`` is ``security.protocol``); a
  quoted dotted key is taken as written. dbus keeps ``acks``, idempotence and
  transactions to itself (``dbus_fn.manifest`` refuses them).
- ``[sinks.es]``: ``hosts`` or ``url``, ``username`` with ``password_env``,
  ``api_key_env``, ``verify_certs``, ``ca_certs`` and ``request_timeout``.

Secrets never travel in a manifest (it is stored in ZooKeeper): ``KEY_env =
"VARIABLE"`` sets ``KEY`` from the environment variable ``VARIABLE`` of the
process that writes, and ``KEY_file = "/path"`` from that file on its host (a
mounted secret, its one trailing newline dropped), so a runtime's operator gives
each tenant's credentials to the runtime. A variable that is not set, or a file
that cannot be read, is a ``SinkSettingsError`` for that deployment alone: it is
detached with that reason, as an unreachable cluster is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbus_fn.errors import DbusError
from dbus_fn.manifest import Manifest

Routes = Mapping[str, Mapping[str, Mapping[str, Any]]]
"""Per deployment that declares any, its manifest's ``[sinks.*]`` tables."""


def routes_of(manifests: list[Manifest]) -> Routes:
    """The ``Routes`` of these deployments: their manifests' sink tables, as plain data."""
    return {
        m.name: {scheme: dict(options) for scheme, options in m.sinks.items()}
        for m in manifests
        if m.sinks
    }


class SinkSettingsError(DbusError, ValueError):
    """A deployment's sink options cannot be made into client settings here."""


@dataclass(frozen=True, slots=True)
class KafkaCluster:
    """A Kafka cluster and the producer settings one deployment reaches it with."""

    bootstrap: str
    settings: Mapping[str, Any]

    @property
    def key(self) -> str:
        """Who shares a producer: the deployments with the same cluster and settings."""
        text = json.dumps([self.bootstrap, sorted(self.settings.items())], default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ElasticsearchCluster:
    """An Elasticsearch cluster and the client options one deployment reaches it with."""

    hosts: str | tuple[str, ...]
    options: Mapping[str, Any]


def _resolved(deployment: str, scheme: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every ``KEY_env`` (``KEY_file``) replaced by ``KEY`` and the
    variable's value (the file's text)."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key.endswith("_file"):
            try:
                text = Path(str(value)).read_text()
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
                raise SinkSettingsError(
                    f"deployment {deployment}: sinks.{scheme}.{key} names the file {value}, "
                    f"which cannot be read where the runtime writes ({why}); put it on "
                    "every host of the runtime, readable by its user"
                ) from None
            out[key.removesuffix("_file")] = text.removesuffix("\n")
        elif key.endswith("_env"):
            found = os.environ.get(str(value))
            if found is None:
                raise SinkSettingsError(
                    f"deployment {deployment}: sinks.{scheme}.{key} names the environment "
                    f"variable {value}, which is not set where the runtime writes; export it "
                    "in the runtime's environment and restart the runtime"
                )
            out[key.removesuffix("_env")] = found
        else:
            out[key] = tuple(value) if isinstance(value, list) else value
    return out


def _setting(value: Any) -> Any:
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else value


def kafka_cluster(deployment: str, routes: Routes) -> KafkaCluster | None:
    """``deployment``'s own Kafka cluster (None: the runtime's)."""
    options = routes.get(deployment, {}).get("kafka")
    if not options:
        return None
    settings = {
        key.replace("_", "."): _setting(value)
        for key, value in _resolved(deployment, "kafka", options).items()
    }
    bootstrap = settings.pop("bootstrap.servers", None)
    if bootstrap is None:
        return None if not settings else KafkaCluster("", settings)
    return KafkaCluster(str(bootstrap), settings)


def elasticsearch_cluster(deployment: str, routes: Routes) -> ElasticsearchCluster | None:
    """``deployment``'s own Elasticsearch cluster (None: the runtime's)."""
    options = routes.get(deployment, {}).get("es")
    if not options:
        return None
    resolved = _resolved(deployment, "es", options)
    hosts = resolved.pop("hosts", None) or resolved.pop("url", None) or ""
    client: dict[str, Any] = {}
    if "username" in resolved or "password" in resolved:
        client["basic_auth"] = (resolved.pop("username", ""), resolved.pop("password", ""))
    client.update(resolved)
    return ElasticsearchCluster(hosts, client)
