"""Failures of `dbus image`: each one line that names the image or step and the fix.

They are leaves of the classes in :mod:`dbus_fn.errors`, so the ``dbus`` CLI maps
them to its documented exit codes: an engine that does not answer exits 3, a base
or worker image that is not what it must be exits 2, a build step that fails
exits 1, as does a worker container that does not start.
"""

from __future__ import annotations

from dbus_fn.errors import ConfigError, DbusError, ServiceError, ServiceUnreachableError


def one_line(text: str, limit: int = 200) -> str:
    """``text`` (an engine's or a tool's message) flattened to one line of at most ``limit``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class DockerUnreachableError(ServiceUnreachableError):
    """No Docker engine answers where the client looks (``DOCKER_HOST`` or the socket)."""

    def __init__(self, where: str, reason: str, fix: str) -> None:
        super().__init__(f"no Docker engine answers at {where} ({reason}); {fix}", service="docker")
        self.where = where
        self.reason = reason


class BaseImageError(ConfigError):
    """The base image is neither in the local engine nor pullable, or cannot host dbus."""

    def __init__(self, image: str, problem: str) -> None:
        super().__init__(
            f"base image {image} {problem}; pass another with --base IMAGE, or build one "
            "from Debian packages with `dbus image base`",
            setting="--base",
        )
        self.image = image


class ImageBuildError(DbusError, RuntimeError):
    """A step of an image build failed; ``log`` holds that step's last output lines."""

    def __init__(self, image: str, step: str, reason: str, log: tuple[str, ...] = ()) -> None:
        super().__init__(f"building {image} failed at `{step}`: {reason}")
        self.image = image
        self.step = step
        self.reason = reason
        self.log = log


class NotARuntimeImageError(ConfigError):
    """An image given to serve as a dbus driver or Spark worker lacks what that needs."""

    def __init__(self, image: str, missing: str) -> None:
        super().__init__(
            f"image {image} cannot run dbus: {missing}; build one with `dbus image build` "
            "and pass the tag it prints",
            setting="--image",
        )
        self.image = image
        self.missing = missing


class WorkerStartError(ServiceError):
    """A worker container exited, or its master did not accept it in time."""

    def __init__(self, image: str, reason: str, last_log_line: str | None) -> None:
        detail = f"; last log line: {last_log_line}" if last_log_line else ""
        super().__init__(
            f"a Spark worker from {image} did not start: {reason}{detail}", service="spark worker"
        )
        self.image = image
        self.reason = reason
