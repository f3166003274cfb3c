"""The runtime a history command talks to: its configuration and deployments, found
by its checkpoint folder (as `dbus runtime start --checkpoint` was given); or a
cluster's runtimes, through ZooKeeper."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dbus_fn.errors import HistoryError
from dbus_fn.manifest import load_manifest
from dbus_fn.registry import LoadedDeployment, load_deployment
from dbus_spark.checkpoint import beside
from dbus_spark.config import RuntimeConfig, load_config
from dbus_spark.history.tasks import HistoryStore
from dbus_spark.settings import checkpoint_dir


def runtime_at(checkpoint: str | None, *, with_secrets: bool = False) -> tuple[str, RuntimeConfig]:
    """The checkpoint folder (default: the local one) and the configuration the runtime
    there last ran with: its sources' DSNs without passwords, unless ``with_secrets``
    (asked of the running runtime, see ``dbus_spark.secrets``)."""
    folder = checkpoint_dir(checkpoint)
    config_file = beside(folder, ".config.json")
    if not config_file.exists():
        raise HistoryError(
            f"no runtime has run with checkpoint {folder}; pass the --checkpoint of the "
            "`dbus runtime start` that runs the deployment (or set DBUS_CHECKPOINT)"
        )
    return folder, load_config(config_file, with_secrets=with_secrets)


def deployment_name_check(folder: str, config: RuntimeConfig, name: str) -> None:
    """Refuse at once a deployment the runtime does not run (its manifests only)."""
    names = sorted(load_manifest(path).name for path in config.deployments)
    if name not in names:
        raise HistoryError(
            f"no deployment {name!r} runs at checkpoint {folder} (it runs: "
            f"{', '.join(names) or 'none'}); name one of them"
        )


def deployment_named(folder: str, config: RuntimeConfig, name: str) -> LoadedDeployment:
    """The deployment ``name`` the runtime runs, loaded (its functions included)."""
    deployment_name_check(folder, config, name)
    return next(
        loaded
        for loaded in (load_deployment(path) for path in config.deployments)
        if loaded.manifest.name == name
    )


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
