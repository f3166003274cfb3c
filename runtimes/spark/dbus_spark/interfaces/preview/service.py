"""What a runtime answers a preview with: its window's events, and what the deployed
version (and, when there is one, the previous version) does with them.

The runtime's API asks ``Previewer.preview`` (``GET /api/v1/preview/{name}``). The
deployed version runs here, in the driver, over at most the window's events of its
tables, on a copy of its pipeline that sends nothing anywhere (``dbus_fn.preview``);
its packages are those the executors run it with. The previous version comes from
the cluster's registry (a runtime started with ``--functions`` has only the one it
runs, and says so).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dbus_fn.errors import DbusError, FunctionNotFoundError
from dbus_fn.preview import (
    DEFAULT_EVENTS,
    Outcome,
    compare,
    event_summary,
    outcomes,
    row_changes,
)
from dbus_fn.registry import LoadedDeployment, with_packages
from dbus_spark.config.runtime import DeploymentFolder, RuntimeConfig
from dbus_spark.stage.shipment import folder_signature
from dbus_spark.state.preview_window import RecentWindow, patterns_meet, table_matches

PreviousVersion = Callable[[str, str], "tuple[str, Path] | str"]
"""Given a deployment's name and running version: the version before it and its
folder, or why there is none (one line)."""

NO_REGISTRY = (
    "this runtime runs the folders it was started with (--functions), which keep no "
    "earlier version; `dbus fn deploy` to a cluster keeps every version"
)


class Previewer:
    """Answers previews from ``window`` for the runtime whose configuration ``config``
    gives; ``previous`` finds a deployment's previous version (None: no registry)."""

    def __init__(
        self,
        window: RecentWindow,
        config: Callable[[], RuntimeConfig | None],
        previous: PreviousVersion | None = None,
    ) -> None:
        self.window = window
        self._config = config
        self.previous = previous
        self._loaded: dict[DeploymentFolder, tuple[Any, LoadedDeployment]] = {}
        """Per deployment, what its folder held when loaded and the deployment."""
        self._lock = threading.Lock()

    def _load(self, folder: DeploymentFolder) -> LoadedDeployment:
        """The deployment, loaded again when its folder's files changed (as the
        executors run it: ``dbus_spark.stage.shipment`` ships a changed folder anew)."""
        signature = folder_signature(Path(folder.path))
        with self._lock:
            found = self._loaded.get(folder)
            if found is None or found[0] != signature:
                loaded = with_packages(Path(folder.path), name=folder.name)
                found = self._loaded[folder] = (signature, loaded)
            return found[1]

    def running(self) -> dict[str, LoadedDeployment]:
        """The deployments the runtime runs now, by name."""
        config = self._config()
        if config is None:
            return {}
        loaded = (self._load(folder) for folder in config.deployments)
        return {deployment.name: deployment for deployment in loaded}

    def preview(
        self,
        name: str,
        *,
        tables: list[str] | None = None,
        since: float | None = None,
        limit: int = DEFAULT_EVENTS,
        against_previous: bool = False,
    ) -> dict[str, Any]:
        """The window's ``limit`` newest events of ``tables`` (default: those ``name``
        subscribes to) since ``since``, the deployed version's outcome of each, and
        with ``against_previous`` its comparison with the previous version.
        ``FunctionNotFoundError`` when no deployment ``name`` runs here."""
        running = self.running()
        deployment = running.get(name)
        if deployment is None:
            known = ", ".join(sorted(running)) or "none"
            raise FunctionNotFoundError(
                f"no deployment {name!r} runs on this runtime (it runs: {known}); deploy it "
                "first, or preview one it runs",
                function=name,
            )
        wanted = tables or list(deployment.manifest.tables)
        kept = self.window.newest(
            wanted, since=since, limit=limit, sources=deployment.manifest.sources
        )
        changes = row_changes(k.event for k in kept)
        deployed = outcomes(deployment, changes)
        answer: dict[str, Any] = {
            "deployment": name,
            "version": deployment.manifest.version,
            "window": self.window.size,
            "tables": wanted,
            "events": [k.event for k in kept],
            "outcomes": [o.to_json() for o in deployed],
            "empty": None if kept else self._why_empty(wanted, since, running),
            "previous": None,
        }
        if against_previous:
            answer["previous"] = self._against_previous(deployment, changes, deployed)
        return answer

    def _against_previous(
        self, deployment: LoadedDeployment, changes: list[Any], deployed: list[Outcome]
    ) -> dict[str, Any]:
        version = deployment.manifest.version
        found = (
            self.previous(deployment.name, version) if self.previous is not None else NO_REGISTRY
        )
        if isinstance(found, str):
            return {"version": None, "why_none": found, "comparison": None}
        previous_version, folder = found
        try:
            earlier = outcomes(self._load(DeploymentFolder(deployment.name, str(folder))), changes)
        except DbusError as exc:
            return {"version": previous_version, "why_none": str(exc), "comparison": None}
        comparison = compare(
            deployment.name,
            (f"previous {previous_version}", earlier),
            (f"deployed {version}", deployed),
            [event_summary(c) for c in changes],
        )
        return {"version": previous_version, "why_none": None, "comparison": comparison.to_json()}

    def _why_empty(
        self, tables: list[str], since: float | None, running: dict[str, LoadedDeployment]
    ) -> str:
        """Why the window holds no event of ``tables``: off, not read, or no traffic."""
        named = ", ".join(tables)
        if not self.window.size:
            return (
                "the runtime keeps no events (started with --preview-window 0); start it "
                "with --preview-window 100 to preview on live traffic"
            )
        read = {t for d in running.values() for t in d.manifest.tables}
        if not patterns_meet(read, tables):
            return (
                f"the runtime reads none of {named}: no deployment it runs subscribes to "
                "them; deploy one that does, or preview a table it reads"
            )
        seen = sum(n for table, n in self.window.seen.items() if table_matches(table, tables))
        if not seen:
            return f"no change of {named} has been read since the runtime started: no traffic"
        return f"no change of {named} was committed in the time asked (--since); ask for longer"
