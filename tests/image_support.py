"""The Docker engine, the local base image and a frozen copy of dbus's sources, for tests.

Each helper fails the test with the reason (never skips) when docker cannot run
here. Tests build from a snapshot of the checkout's packages rather than the
live tree, so an edit made elsewhere while they run cannot change the image
between two builds they compare.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from dbus_deploy.services import ServicesConfig, load_config
from dbus_fn.errors import DbusError

REPO = Path(__file__).resolve().parents[1]


def docker_engine() -> Any:
    """A client of a running engine, started (and installed) here if need be."""
    from dbus_deploy.image import start_daemon

    try:
        return start_daemon(load_config())
    except DbusError as exc:
        pytest.fail(f"no Docker engine: {exc}", pytrace=False)


def base_image(client: Any, config: ServicesConfig | None = None) -> str:
    """The Debian-made base (debootstrap, then import; cached), as no registry answers here."""
    from dbus_deploy.image import ensure_base_image

    try:
        return ensure_base_image(client, config or load_config())
    except DbusError as exc:
        pytest.fail(f"no base image: {exc}", pytrace=False)


def source_snapshot(target: Path) -> ServicesConfig:
    """The services' configuration with ``repo`` pointing at a copy of dbus's sources."""
    from dbus_deploy.image._inputs import PACKAGE_DIRS

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, target / name)
    for name in PACKAGE_DIRS:
        shutil.copytree(REPO / name, target / name, ignore=ignore)
    return dataclasses.replace(load_config(), repo=target)


def shell_only_image(client: Any, tag: str) -> str:
    """An image with a shell and nothing else (no python3): a base a build must refuse."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for source, name in (
            ("/bin/dash", "bin/sh"),
            ("/lib/x86_64-linux-gnu/libc.so.6", "lib/x86_64-linux-gnu/libc.so.6"),
            ("/lib64/ld-linux-x86-64.so.2", "lib64/ld-linux-x86-64.so.2"),
        ):
            archive.add(str(Path(source).resolve()), arcname=name)
    repository, _, version = tag.partition(":")
    client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=version)
    return tag
