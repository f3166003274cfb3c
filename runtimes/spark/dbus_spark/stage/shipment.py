"""What a Spark task needs of the runtime, carried inside the task itself.

On a cluster the executors run on other hosts: they cannot open the driver's
configuration file or its function folders. So the driver side (the source's
planner) puts a ``Shipment`` in every partition it plans: the runtime's
configuration as it was planned with, and each deployment folder as a
content-addressed zip. An executor unpacks a shipment once per key, the
folders into a cache of its own (``$TMPDIR/dbus-bundles-<uid>/<hash>``), and
keeps the loaded function stage between tasks; a changed configuration or a
changed function folder is a new key, so a new version reaches every executor at
the next micro-batch. Executors need only an interpreter with dbus installed.

The shipment holds the DSNs (the executors connect to the sources). It travels
in Spark's task messages, in memory, and is never written to disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dbus_fn.bundle import Bundle, content_hash, materialize, zip_files
from dbus_fn.dependencies import (
    Resolved,
    archive_name,
    read_requirements,
    resolve,
    site_archive,
    unpacked_site,
)
from dbus_fn.errors import BundleError
from dbus_spark.config.runtime import DeploymentFolder, RuntimeConfig

MAX_FOLDER_BYTES = 16 * 1024 * 1024
"""A deployment folder ships with every task that runs it: keep data out of it."""
_SKIPPED_DIRS = frozenset({"__pycache__", ".tox", ".venv", ".git", ".pytest_cache"})


@dataclass(frozen=True)
class Folder:
    """A deployment folder, zipped; named by its content hash."""

    content_hash: str
    data: bytes = field(repr=False)


@dataclass(frozen=True)
class Shipment:
    """The runtime's configuration (each deployment's folder named by its content
    hash) and the deployment folders it names."""

    key: str
    config: str
    """``RuntimeConfig`` JSON whose deployments' paths are content hashes of ``folders``."""
    folders: tuple[Folder, ...] = ()


class Shipper:
    """Driver side: makes the shipment of a configuration, zipping a deployment
    folder again only when one of its files changed (size or modification time)."""

    def __init__(self) -> None:
        self._folders: dict[str, tuple[tuple[tuple[str, int, int], ...], Folder]] = {}
        self._last: tuple[RuntimeConfig, tuple[str, ...], Shipment] | None = None

    def ship(self, config: RuntimeConfig) -> Shipment:
        # One folder deployed under two names ships once.
        by_path = {d.path: self._folder(d.path) for d in config.deployments}
        hashes = tuple(by_path[d.path].content_hash for d in config.deployments)
        # Asked every micro-batch: the same configuration and folders give the same
        # shipment, without writing the configuration out again.
        if self._last is not None and self._last[:2] == (config, hashes):
            return self._last[2]
        named = tuple(
            DeploymentFolder(d.name, digest)
            for d, digest in zip(config.deployments, hashes, strict=True)
        )
        text = json.dumps(replace(config, deployments=named).to_json(), sort_keys=True)
        key = hashlib.sha256(text.encode()).hexdigest()
        folders = tuple({f.content_hash: f for f in by_path.values()}.values())
        shipment = Shipment(key, text, folders)
        self._last = (config, hashes, shipment)
        return shipment

    def _folder(self, path: str) -> Folder:
        root = Path(path)
        files = _files(root)
        signature = _signature(files)
        known = self._folders.get(path)
        if known is not None and known[0] == signature:
            return known[1]
        folder = pack(root, files)
        self._folders[path] = (signature, folder)
        return folder


def folder_signature(root: Path) -> tuple[tuple[str, int, int], ...]:
    """What tells that a deployment folder changed: its files' names, sizes and
    modification times (a folder the runtime runs may be edited while it runs)."""
    return _signature(_files(root))


def _signature(files: dict[str, Path]) -> tuple[tuple[str, int, int], ...]:
    return tuple(
        (name, stat.st_size, stat.st_mtime_ns) for name, stat in
        ((name, file.stat()) for name, file in files.items())
    )  # fmt: skip


def _files(root: Path) -> dict[str, Path]:
    """The files a deployment folder ships: all but hidden ones, caches and envs."""
    try:
        found = {}
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
            for name in sorted(names):
                if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                    continue
                path = Path(folder) / name
                found[path.relative_to(root).as_posix()] = path
    except OSError as exc:
        raise BundleError(f"cannot read the deployment folder {root}: {exc}") from None
    if not found:
        raise BundleError(f"the deployment folder {root} is missing or empty", path=str(root))
    return found


def pack(root: Path, files: dict[str, Path]) -> Folder:
    contents = {name: path.read_bytes() for name, path in files.items()}
    size = sum(len(data) for data in contents.values())
    if size > MAX_FOLDER_BYTES:
        raise BundleError(
            f"the deployment folder {root} holds {size} bytes, over the {MAX_FOLDER_BYTES} "
            "each task can carry: keep data files out of it",
            path=str(root),
        )
    return Folder(content_hash(contents), zip_files(contents, compresslevel=6))


def executor_cache() -> Path:
    """Where an executor unpacks deployment folders: its own temporary folder, never
    a path of the driver's."""
    return Path(tempfile.gettempdir()) / f"dbus-bundles-{os.getuid()}"


def shipped_packages(folder: str) -> Resolved | None:
    """Executor side: a deployment folder's own packages (``dbus_fn.dependencies``), as
    the driver shipped them through Spark (``SparkContext.addFile``, ``PackageShipper``),
    unpacked here once; None when it names none."""
    requirements = read_requirements(Path(folder))
    if requirements is None:
        return None
    from pyspark import SparkFiles

    try:
        archive = Path(SparkFiles.get(archive_name(requirements)))
    except Exception:  # no SparkContext files here (not a Spark worker)
        archive = Path(archive_name(requirements))
    if not archive.is_file():
        raise BundleError(
            f"the packages of {folder}/requirements.txt (set {requirements.key}) did not "
            "reach this executor; the runtime ships them at its start: restart it",
            path=folder,
        )
    return unpacked_site(requirements, archive, executor_cache() / "deps")


class PackageShipper:
    """Driver side: each deployment's own packages resolved here and handed to Spark
    (``SparkContext.addFile``), which serves them to every executor. A set goes once:
    shared by deployments, or asked again when a cluster member's deployments change
    while it runs (``dbus_spark.cluster.member``)."""

    def __init__(self, spark_context: Any) -> None:
        self._context = spark_context
        self._sent: set[str] = set()

    def ship(self, deployments: Sequence[str]) -> None:
        """Ship the sets of ``deployments`` not shipped yet; a set that does not resolve
        or import raises its one-line ``DbusError`` (``dbus_fn.dependencies``)."""
        for folder in deployments:
            requirements = read_requirements(Path(folder))
            if requirements is None or requirements.key in self._sent:
                continue
            self._context.addFile(str(site_archive(resolve(requirements))))
            self._sent.add(requirements.key)


def unpacked(shipment: Shipment) -> RuntimeConfig:
    """Executor side: the shipment's configuration, its deployments unpacked here."""
    config = RuntimeConfig.from_json(json.loads(shipment.config))
    by_hash = {f.content_hash: f for f in shipment.folders}
    folders = []
    for deployment in config.deployments:
        digest = deployment.path
        bundle = Bundle(name=digest, version="", manifest={}, content_hash=digest, files=(),
                        data=by_hash[digest].data)  # fmt: skip
        path = str(materialize(bundle, executor_cache()))
        folders.append(DeploymentFolder(deployment.name, path))
    return replace(config, deployments=tuple(folders))
