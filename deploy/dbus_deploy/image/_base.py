"""A base image made here from Debian packages, for machines that cannot pull one.

``debootstrap --variant=minbase`` lays out a Debian root with Python 3.11 and a
Java 17 runtime from the mirror the host's own apt uses, and ``docker import``
turns it into a local image. The rootfs tarball is kept under
``<DBUS_HOME>/image/base`` so an engine that lost its images gets the base back
in seconds; the tag carries a hash of the suite and package list, so a change to
either makes a new base instead of reusing a stale one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dbus_deploy.services import ServicesConfig, ToolMissingError, apt_install
from dbus_deploy.services._install import debian_mirror, run_install_step

if TYPE_CHECKING:
    import docker

SUITE = "bookworm"
BASE_PACKAGES: tuple[str, ...] = (
    "python3",
    "python3-venv",
    "openjdk-17-jre-headless",
    # Spark's launch scripts call `ps`; pip needs CA roots for function requirements.
    "procps",
    "ca-certificates",
)
BASE_REPOSITORY = "dbus-base"
# What an imported rootfs lacks that a pulled image would carry in its config.
_IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)
# Package caches and indexes debootstrap leaves behind: a third of the rootfs.
_DROPPED = ("var/cache/apt/archives", "var/lib/apt/lists")


@dataclass(frozen=True, slots=True)
class BaseRecipe:
    """What goes into a base image: Debian suite and packages, and its local tag."""

    suite: str = SUITE
    packages: tuple[str, ...] = BASE_PACKAGES

    @property
    def tag(self) -> str:
        digest = hashlib.sha256(f"{self.suite}\n{','.join(self.packages)}".encode()).hexdigest()
        return f"{BASE_REPOSITORY}:{self.suite}-{digest[:12]}"


def base_dir(config: ServicesConfig) -> Path:
    return config.home / "image" / "base"


def ensure_base_image(
    client: docker.DockerClient,
    config: ServicesConfig,
    recipe: BaseRecipe | None = None,
    *,
    mirror: str | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> str:
    """The tag of the base image, made only when the engine lacks it.

    From the kept rootfs tarball when there is one (seconds), else with
    debootstrap first (a minute or so, as root).
    """
    import docker.errors

    recipe = recipe or BaseRecipe()
    try:
        client.images.get(recipe.tag)
        return recipe.tag
    except docker.errors.ImageNotFound:
        pass
    tarball = base_dir(config) / f"{recipe.tag.split(':')[1]}.tar"
    if not tarball.is_file():
        _debootstrap(config, recipe, mirror or debian_mirror(recipe.suite), tarball, progress)
    progress(f"importing {tarball.name} as {recipe.tag}")
    repository, tag = recipe.tag.split(":")
    client.api.import_image_from_file(
        str(tarball), repository=repository, tag=tag, changes=list(_IMPORT_CHANGES)
    )
    return recipe.tag


def _debootstrap(
    config: ServicesConfig,
    recipe: BaseRecipe,
    mirror: str,
    tarball: Path,
    progress: Callable[[str], None],
) -> None:
    """Lay out the rootfs with debootstrap and pack it into ``tarball``."""
    path = config.environ.get("PATH", os.defpath)
    if shutil.which("debootstrap", path=path) is None:
        progress("installing debootstrap")
        apt_install(config, {"debootstrap": "dbus image base"})
    if os.geteuid() != 0:
        raise ToolMissingError("root", "dbus image base", "run it as root (debootstrap needs it)")
    root = tarball.with_suffix(".rootfs")
    partial = tarball.with_suffix(".partial")
    shutil.rmtree(root, ignore_errors=True)
    log_file = config.home / "logs" / "image-base.log"
    began = time.monotonic()
    progress(f"debootstrap {recipe.suite} from {mirror} (log: {log_file})")
    run_install_step(
        [
            "debootstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
            recipe.suite, str(root), mirror,
        ],
        log_file=log_file, service="dbus image base", step="debootstrap",
        env=dict(config.environ), timeout=1800,
    )  # fmt: skip
    for dropped in _DROPPED:
        for entry in (root / dropped).glob("*"):
            if entry.is_file():
                entry.unlink()
    run_install_step(
        ["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
        log_file=log_file, service="dbus image base", step="tar the rootfs",
        env=dict(config.environ),
    )  # fmt: skip
    partial.rename(tarball)
    shutil.rmtree(root, ignore_errors=True)
    progress(f"base rootfs ready in {time.monotonic() - began:.0f}s")
