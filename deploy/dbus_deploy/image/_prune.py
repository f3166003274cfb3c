"""Removing old runtime, core and deps images: every build of a changed checkout makes a new tag.

Images differ only in their top layers, so each old tag costs little, but a day
of edits leaves dozens of tags and some untagged leftovers of ``--no-cache``
builds. Only dbus's own content tags are removed (a name given with ``--tag``
keeps its image), the newest ``keep`` of each repository stay, and an image a
container still uses is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dbus_deploy.image._recipe import CORE_REPOSITORY, DEPS_REPOSITORY, LABEL, RUNTIME_REPOSITORY

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True, slots=True)
class TaggedImage:
    """One content tag of a dbus image and when its image was made."""

    tag: str
    created: str


def stale_tags(images: Iterable[TaggedImage], keep: int) -> list[str]:
    """The content tags to remove: all but the ``keep`` newest of each repository."""
    by_repository: dict[str, list[TaggedImage]] = {}
    for image in images:
        by_repository.setdefault(image.tag.split(":")[0], []).append(image)
    stale: list[str] = []
    for tagged in by_repository.values():
        tagged.sort(key=lambda image: image.created, reverse=True)
        stale += [image.tag for image in tagged[keep:]]
    return sorted(stale)


def prune_images(client: docker.DockerClient, *, keep: int = 3) -> Sequence[str]:
    """Remove stale content tags and untagged dbus images; return what was removed."""
    import docker.errors

    found = [
        TaggedImage(tag, str(image.attrs["Created"]))
        for repository in (RUNTIME_REPOSITORY, CORE_REPOSITORY, DEPS_REPOSITORY)
        for image in client.images.list(repository)
        for tag in image.tags
        if tag.startswith(f"{repository}:") and len(tag.split(":")[1]) == 12
    ]
    removed: list[str] = []
    for tag in stale_tags(found, keep):
        try:
            client.images.remove(tag, noprune=False)
        except docker.errors.APIError:
            continue  # a container uses it
        removed.append(tag)
    for image in client.images.list(filters={"dangling": True, "label": LABEL}):
        try:
            client.images.remove(image.id)
        except docker.errors.APIError:
            continue
        removed.append(image.id.split(":")[-1][:12])
    return removed
