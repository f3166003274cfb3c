"""The runtime a history command talks to: its configuration and deployments, found
by its checkpoint folder (as `dbus runtime start --checkpoint` was given); or a
cluster's runtimes, through ZooKeeper."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dbus_fn.errors import ConfigError, HistoryError, ServiceUnreachableError
from dbus_fn.manifest import Manifest
from dbus_fn.registry import LoadedDeployment, with_packages
from dbus_spark.config.runtime import RuntimeConfig, load_config
from dbus_spark.interfaces.settings import checkpoint_dir
from dbus_spark.state.checkpoint import last_config_path
from dbus_spark.state.history.tasks import HistoryStore


def runtime_at(
    checkpoint: str | None, *, with_secrets: bool = False, dsns: Mapping[str, str] | None = None
) -> tuple[str, RuntimeConfig]:
    """The checkpoint folder (default: the local one) and the configuration the runtime
    there last ran with: its sources' DSNs without passwords, unless ``with_secrets``
    (asked of the running runtime, see ``dbus_spark.config.secrets``) or given in ``dsns``
    (by source name)."""
    folder = checkpoint_dir(checkpoint)
    config_file = last_config_path(folder)
    if not config_file.exists():
        raise HistoryError(
            f"no runtime has run with checkpoint {folder}; pass the --checkpoint of the "
            "`dbus runtime start` that runs the deployment (or set DBUS_CHECKPOINT)"
        )
    config = load_config(config_file, with_secrets=False)
    names = [binding.spec.name for binding in config.sources]
    unknown = sorted(set(dsns or {}) - set(names))
    if unknown:
        raise HistoryError(
            f"--source {unknown[0]} is not a source of the runtime at checkpoint {folder} "
            f"(its sources: {', '.join(names) or 'none'}); name one of them"
        )
    if not with_secrets:
        return folder, config
    try:
        return folder, load_config(config_file, dsns=dsns)
    except ConfigError as exc:
        if exc.setting != "sources":
            raise
        # The runtime keeps the passwords in memory only, and it does not answer.
        raise ServiceUnreachableError(
            f"no runtime at checkpoint {folder} answered for the passwords of its sources "
            f"({', '.join(names)}): start it, or give each DSN with --source NAME=DSN "
            "(or DBUS_SOURCES) to run without it",
            service="runtime",
        ) from None


def deployment_name_check(folder: str, config: RuntimeConfig, name: str) -> Manifest:
    """The manifest of deployment ``name``; refuse at once a deployment the runtime
    does not run (its manifests only)."""
    manifests = {d.name: d.manifest() for d in config.deployments}
    if name not in manifests:
        raise HistoryError(
            f"no deployment {name!r} runs at checkpoint {folder} (it runs: "
            f"{', '.join(sorted(manifests)) or 'none'}); name one of them"
        )
    return manifests[name]


def deployment_named(folder: str, config: RuntimeConfig, name: str) -> LoadedDeployment:
    """The deployment ``name`` the runtime runs, loaded (its functions included)."""
    deployment_name_check(folder, config, name)
    deployment = next(d for d in config.deployments if d.name == name)
    return with_packages(Path(deployment.path), name=name)


class CommittedHistory(HistoryStore):
    """A cluster's history progress of some sources, as committed with their positions
    in ZooKeeper (what ``dbus cluster status`` shows)."""

    def __init__(self, client: Any, settings: Any, sources: Sequence[str]) -> None:
        from dbus_fn.coordination import ClusterLayout

        self._client = client
        self._layout = ClusterLayout.for_cluster(settings.cluster, settings.root)
        self._sources = tuple(sources)
        super().__init__(Path(f"zookeeper:{self._layout.positions}"))  # reads it (reload)

    def reload(self) -> None:
        import json

        from kazoo.exceptions import NoNodeError

        for source in self._sources:
            try:
                raw, _ = self._client.get(self._layout.position(source))
            except NoNodeError:
                continue
            self._load_section(source, json.loads(raw or b"{}").get("history") or {})

    def save(self) -> None:
        raise HistoryError("a cluster's committed history is read here, never written")


__all__ = ["CommittedHistory", "deployment_name_check", "deployment_named", "runtime_at"]
