"""The runtime image: one image that serves as dbus driver and as Spark worker.

Built through a Docker engine with the docker SDK: a deps image (the runtime's
third-party requirements from wheels fetched once on the host), the core image
(Java, those requirements, dbus's wheel), then the runtime image (the core and
the function folders as its last layers), each tagged by content. Where no
registry can be reached, the base comes from Debian packages (``dbus image
base``). ``dbus image worker`` starts a Spark worker in a container of the image.
"""

from __future__ import annotations

from dbus_deploy.image._base import BaseRecipe, ensure_base_image
from dbus_deploy.image._build import BuiltImage, build_image
from dbus_deploy.image._check import ImageCheck, check_image
from dbus_deploy.image._daemon import docker_client, start_daemon
from dbus_deploy.image._errors import (
    BaseImageError,
    DockerUnreachableError,
    ImageBuildError,
    NotARuntimeImageError,
    WorkerStartError,
)
from dbus_deploy.image._prune import prune_images
from dbus_deploy.image._recipe import (
    DEFAULT_BASE,
    CoreRecipe,
    DepsRecipe,
    FunctionFolder,
    RuntimeRecipe,
    runtime_requirements,
)
from dbus_deploy.image._worker import WorkerContainer, start_worker, stop_worker
from dbus_deploy.services._install import debian_mirror

__all__ = [
    "DEFAULT_BASE",
    "BaseImageError",
    "BaseRecipe",
    "BuiltImage",
    "CoreRecipe",
    "DepsRecipe",
    "DockerUnreachableError",
    "FunctionFolder",
    "ImageBuildError",
    "ImageCheck",
    "NotARuntimeImageError",
    "RuntimeRecipe",
    "WorkerContainer",
    "WorkerStartError",
    "build_image",
    "check_image",
    "debian_mirror",
    "docker_client",
    "ensure_base_image",
    "prune_images",
    "runtime_requirements",
    "start_daemon",
    "start_worker",
    "stop_worker",
]
