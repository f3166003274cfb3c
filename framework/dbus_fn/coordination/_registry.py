"""The function registry in ZooKeeper: immutable versions and the active one.

Every write is one ZooKeeper transaction that also bumps the ``changes``
counter on the ``functions`` node (a compare-and-set, so concurrent deploys
serialise): a watcher needs one watch to see any deploy, rollback or delete.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)

from dbus_fn.bundle import Bundle, default_cache_dir, materialize
from dbus_fn.coordination._client import ZooKeeperSettings, dump, load, utc_timestamp
from dbus_fn.coordination._layout import check_name
from dbus_fn.errors import (
    BundleError,
    CoordinationError,
    FunctionNotFoundError,
    VersionConflictError,
)

log = logging.getLogger("dbus_fn.coordination")

DeployOutcome = Literal["deployed", "already deployed", "activated"]
_ATTEMPTS = 8
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """What the registry knows about one version (the bundle bytes aside)."""

    name: str
    version: str
    content_hash: str
    created: str
    size: int
    files: tuple[str, ...]
    manifest: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FunctionSummary:
    name: str
    active: str | None
    versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeployResult:
    name: str
    version: str
    outcome: DeployOutcome
    previous: str | None
    content_hash: str


@dataclass(frozen=True, slots=True)
class ActiveFunction:
    """A function's active version, unpacked: ``load_deployment(path)`` loads it."""

    name: str
    version: str
    path: Path
    content_hash: str


def _version_key(version: str) -> tuple[Any, ...]:
    parts = version.replace("-", ".").replace("+", ".").split(".")
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)


class _Retry(Exception):
    """A concurrent writer won a compare-and-set; read again and retry."""


class FunctionStore:
    """Deploy, list, describe, roll back and delete functions of one cluster."""

    def __init__(self, client: KazooClient, settings: ZooKeeperSettings) -> None:
        self.client = client
        self.settings = settings
        self.layout = settings.layout

    # -- reads -------------------------------------------------------------

    def names(self) -> list[str]:
        try:
            return sorted(self.client.get_children(self.layout.functions))
        except NoNodeError:
            return []

    def active_version(self, name: str) -> str | None:
        try:
            raw, _ = self.client.get(self.layout.active(name))
        except NoNodeError:
            return None
        return raw.decode() or None

    def versions(self, name: str) -> list[str]:
        try:
            found = self.client.get_children(self.layout.versions(name))
        except NoNodeError:
            return []
        return sorted(found, key=_version_key)

    def version_info(self, name: str, version: str) -> VersionInfo:
        try:
            raw, _ = self.client.get(self.layout.version(name, version))
        except NoNodeError:
            raise self._unknown(name, version) from None
        data = load(raw)
        return VersionInfo(
            name=name,
            version=version,
            content_hash=str(data.get("hash", "")),
            created=str(data.get("created", "")),
            size=int(data.get("size", 0)),
            files=tuple(data.get("files", ())),
            manifest=dict(data.get("manifest", {})),
        )

    def bundle(self, name: str, version: str) -> Bundle:
        info = self.version_info(name, version)
        try:
            data, _ = self.client.get(self.layout.bundle(name, version))
        except NoNodeError:
            raise self._unknown(name, version) from None
        return Bundle(
            name=name,
            version=version,
            manifest=info.manifest,
            content_hash=info.content_hash,
            files=info.files,
            data=data,
        )

    def summaries(self) -> list[FunctionSummary]:
        return [
            FunctionSummary(name, self.active_version(name), tuple(self.versions(name)))
            for name in self.names()
        ]

    def describe(self, name: str) -> tuple[FunctionSummary, list[VersionInfo]]:
        check_name(name, "function name")
        versions = self.versions(name)
        if not versions and self.client.exists(self.layout.function(name)) is None:
            raise self._unknown(name, None)
        summary = FunctionSummary(name, self.active_version(name), tuple(versions))
        return summary, [self.version_info(name, v) for v in versions]

    def active(self) -> dict[str, tuple[str, str]]:
        """name -> (active version, content hash) of every deployed function."""
        found: dict[str, tuple[str, str]] = {}
        for name in self.names():
            version = self.active_version(name)
            if version is None:
                continue
            try:
                found[name] = (version, self.version_info(name, version).content_hash)
            except FunctionNotFoundError:
                continue
        return found

    def materialize_active(self, cache_dir: Path | None = None) -> list[ActiveFunction]:
        """Every active version unpacked in the cache; bundles fetched only when missing."""
        base = cache_dir if cache_dir is not None else default_cache_dir()
        result = []
        for name, (version, digest) in sorted(self.active().items()):
            folder = base / digest.replace(":", "-")
            if not (folder / "dbus.toml").is_file():
                try:
                    folder = materialize(self.bundle(name, version), base)
                except FunctionNotFoundError:
                    continue  # deleted while we read
                except BundleError as exc:
                    # One damaged bundle must not stop the others from running.
                    log.warning("function %s %s is not loadable: %s", name, version, exc)
                    continue
            result.append(ActiveFunction(name, version, folder, digest))
        return result

    # -- writes ------------------------------------------------------------

    def deploy(self, bundle: Bundle) -> DeployResult:
        """Register ``bundle`` and make it active.

        The same version with the same content is a no-op (or re-activates it);
        the same version with other content is refused: versions are immutable.
        """
        check_name(bundle.name, "function name")
        check_name(bundle.version, "version")
        return self._retrying(lambda: self._deploy_once(bundle))

    def _deploy_once(self, bundle: Bundle) -> DeployResult:
        layout, acl = self.layout, self.settings.acl
        name, version = bundle.name, bundle.version
        counter, counter_stat = self._counter()
        existing = self.client.exists(layout.version(name, version))
        active_stat = self.client.exists(layout.active(name))
        previous = None
        if active_stat is not None:
            raw, active_stat = self.client.get(layout.active(name))
            previous = raw.decode() or None
        if existing is not None:
            info = self.version_info(name, version)
            if info.content_hash != bundle.content_hash:
                raise VersionConflictError(
                    f"{name} {version} is already deployed with other content "
                    f"({info.content_hash[:19]}, deployed {info.created}); versions are "
                    "immutable: bump `version` in dbus.toml and deploy again",
                    function=name,
                    version=version,
                )
            if previous == version:
                return DeployResult(name, version, "already deployed", previous, info.content_hash)
        tx = self.client.transaction()
        if self.client.exists(layout.function(name)) is None:
            tx.create(layout.function(name), b"", acl=acl)
            tx.create(layout.versions(name), b"", acl=acl)
        if existing is None:
            record = {
                "manifest": dict(bundle.manifest),
                "hash": bundle.content_hash,
                "created": utc_timestamp(),
                "size": bundle.size,
                "files": list(bundle.files),
                "bundle": "inline",
            }
            tx.create(layout.version(name, version), dump(record), acl=acl)
            tx.create(layout.bundle(name, version), bundle.data, acl=acl)
        if active_stat is None:
            tx.create(layout.active(name), version.encode(), acl=acl)
        else:
            tx.set_data(layout.active(name), version.encode(), version=active_stat.version)
        self._bump(tx, counter, counter_stat)
        self._commit(tx)
        outcome: DeployOutcome = "deployed" if existing is None else "activated"
        return DeployResult(name, version, outcome, previous, bundle.content_hash)

    def rollback(self, name: str, to: str) -> str | None:
        """Make version ``to`` active again; return the version it replaces."""
        check_name(name, "function name")
        # An empty ``to`` names the versions folder itself, which exists: the function
        # would be left with no active version, stopped on every runtime.
        check_name(to, "version")

        def once() -> str | None:
            if self.client.exists(self.layout.version(name, to)) is None:
                raise self._unknown(name, to)
            counter, counter_stat = self._counter()
            try:
                raw, stat = self.client.get(self.layout.active(name))
            except NoNodeError:
                raw, stat = b"", None
            tx = self.client.transaction()
            if stat is None:
                tx.create(self.layout.active(name), to.encode(), acl=self.settings.acl)
            else:
                tx.set_data(self.layout.active(name), to.encode(), version=stat.version)
            self._bump(tx, counter, counter_stat)
            self._commit(tx)
            return raw.decode() or None

        return self._retrying(once)

    def delete(self, name: str) -> list[str]:
        """Remove a function and all its versions; return the versions removed.

        The active marker goes first, in one transaction with the change counter,
        so runtimes stop running it at once even if the clean-up is interrupted.
        """
        check_name(name, "function name")
        if self.client.exists(self.layout.function(name)) is None:
            raise self._unknown(name, None)
        versions = self.versions(name)

        def once() -> None:
            counter, counter_stat = self._counter()
            stat = self.client.exists(self.layout.active(name))
            tx = self.client.transaction()
            if stat is not None:
                tx.delete(self.layout.active(name), version=stat.version)
            self._bump(tx, counter, counter_stat)
            self._commit(tx)

        self._retrying(once)
        for _ in range(_ATTEMPTS):
            try:
                self.client.delete(self.layout.function(name), recursive=True)
                break
            except NotEmptyError:
                continue
            except NoNodeError:
                break
        return versions

    # -- helpers -----------------------------------------------------------

    def _counter(self) -> tuple[int, Any]:
        raw, stat = self.client.get(self.layout.functions)
        return int(load(raw).get("changes", 0)), stat

    def _bump(self, tx: Any, counter: int, stat: Any) -> None:
        tx.set_data(self.layout.functions, dump({"changes": counter + 1}), version=stat.version)

    def _commit(self, tx: Any) -> None:
        results = tx.commit()
        # The ops that did not fail themselves report RolledBackError.
        failures = [
            r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)
        ]
        if any(isinstance(r, BadVersionError | NodeExistsError | NoNodeError) for r in failures):
            raise _Retry()
        if failures:
            raise failures[0]

    def _retrying(self, attempt: Callable[[], T]) -> T:
        for _ in range(_ATTEMPTS):
            try:
                return attempt()
            except _Retry:
                continue
        raise CoordinationError(
            f"the function registry of {self.settings.where()} kept changing under this "
            "write; try again",
            cluster=self.settings.cluster,
        )

    def _unknown(self, name: str, version: str | None) -> FunctionNotFoundError:
        if version is None or not self.versions(name):
            known = ", ".join(self.names()) or "none"
            return FunctionNotFoundError(
                f"no function {name!r} in {self.settings.where()}; deployed: {known} "
                "(see `dbus fn list`)",
                function=name,
            )
        known = ", ".join(self.versions(name)) or "none"
        return FunctionNotFoundError(
            f"{name} has no version {version!r}; known versions: {known} "
            f"(see `dbus fn describe {name}`)",
            function=name,
            version=version,
        )
