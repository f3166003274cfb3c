"""Building the runtime image through the Docker engine, with the build's output streamed.

:func:`build_image` resolves the base, makes sure the deps image for the current
requirements exists, stages dbus's wheel and the function folders in a fresh
context, builds ``dbus-core:<content hash>`` (dbus itself) and then
``dbus-runtime:<content hash>`` (the functions on top); an image whose tag already
exists is not built again. The builder's output goes to the caller line by line and to
``<DBUS_HOME>/logs/image-build.log``; a failing step ends the build with an
:class:`ImageBuildError` that names the step and carries its last lines.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dbus_deploy.image._errors import BaseImageError, ImageBuildError, one_line
from dbus_deploy.image._inputs import ensure_dbus_wheel, ensure_wheels, image_dir, stage_functions
from dbus_deploy.image._recipe import (
    DEFAULT_BASE,
    CoreRecipe,
    DepsRecipe,
    RuntimeRecipe,
    pins_of,
)
from dbus_deploy.native import native_wheel
from dbus_deploy.services import ServicesConfig
from dbus_deploy.services._process import strip_ansi, telling_line
from dbus_fn.errors import ConfigError
from dbus_fn.files import replace_file

if TYPE_CHECKING:
    import docker

Progress = Callable[[str], None]
_EXIT = re.compile(r"returned a non-zero code: (\d+)")
# The builder's own notes between a step's output lines: not what a step printed.
_BOOKKEEPING = re.compile(
    r"^\s*(---> |Removing intermediate container |Successfully (built|tagged) )"
)
_IMAGE_NAME = re.compile(
    r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
)
"""``[registry[:port]/]name[/name...][:tag]``, as the engine accepts it."""
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def check_image_reference(reference: str, option: str) -> str:
    """``reference`` if it is an image the engine could name (``name[:tag]`` or
    ``name@sha256:...``); a ``ConfigError`` naming ``option`` otherwise."""
    name, at, found_digest = reference.partition("@")
    if not _IMAGE_NAME.match(name) or (at and not _DIGEST.match(found_digest)):
        raise ConfigError(
            f"{option} {reference!r} is not an image name; use lower-case name[:tag] or "
            f"name@sha256:<digest>, e.g. {DEFAULT_BASE}",
            setting=option,
        )
    return reference


def check_build_arguments(base: str, functions: Sequence[Path], tags: Sequence[str]) -> None:
    """Refuse what a build cannot use before the engine is asked anything: a malformed
    ``--base`` or ``--tag``, a ``--functions`` folder that is missing, shares its name
    with another, or does not load as ``dbus fn validate`` loads it."""
    from dbus_fn.registry import load_deployment

    check_image_reference(base, "--base")
    for extra in tags:
        check_image_reference(extra, "--tag")
    names: dict[str, Path] = {}
    for folder in (f.resolve() for f in functions):
        if not folder.is_dir():
            raise ConfigError(
                f"--functions {folder} is not a folder; pass a function folder (one with "
                "dbus.toml)",
                setting="--functions",
            )
        if folder.name in names:
            raise ConfigError(
                f"--functions {folder} and {names[folder.name]} share the name {folder.name!r} "
                "in the image; rename one folder",
                setting="--functions",
            )
        names[folder.name] = folder
    for folder in names.values():
        load_deployment(folder)


_LOG_LINES = 25
"""How many of a failing step's last output lines the error keeps."""


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """The result of a build: the content tag, the image id and whether it was built now."""

    tag: str
    image_id: str
    built: bool
    seconds: float
    size: int


def resolve_base(client: docker.DockerClient, base: str, progress: Progress) -> str:
    """The id of ``base``, pulled when the engine does not have it yet."""
    import docker.errors

    try:
        return str(client.images.get(base).id)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        raise BaseImageError(base, f"is not a usable image name ({one_line(str(exc))})") from exc
    progress(f"pulling {base}")
    try:
        return str(client.images.pull(base).id)
    except docker.errors.DockerException as exc:
        reason = one_line(getattr(exc, "explanation", None) or str(exc), 160)
        raise BaseImageError(
            base, f"is not in the local engine and cannot be pulled ({reason})"
        ) from exc


class _BuildOutput:
    """The builder's stream, cut into whole lines: to the progress callback and the log,
    remembering the current step and the last lines it printed.

    The engine sends output in pieces that may end mid-line, so a line is only
    handled once its newline has arrived.
    """

    def __init__(self, log: TextIO, progress: Progress, verbose: bool) -> None:
        self.log = log
        self.progress = progress
        self.verbose = verbose
        self.step = "sending the build context"
        self.lines: deque[str] = deque(maxlen=_LOG_LINES)
        self._partial = ""

    def feed(self, text: str) -> None:
        *complete, self._partial = (self._partial + strip_ansi(text)).split("\n")
        for line in complete:
            self._line(line.rstrip())

    def flush(self) -> None:
        if self._partial:
            self._line(self._partial.rstrip())
            self._partial = ""
        self.log.flush()

    def _line(self, line: str) -> None:
        if not line.strip():
            return
        if line.startswith("Step "):
            self.step = line
            self.lines.clear()
            self.progress(line)
        elif self.verbose:
            self.progress("  " + line)
        if not _BOOKKEEPING.match(line):
            self.log.write(line + "\n")
            if line is not self.step:
                self.lines.append(line)


def stream_build(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    log_file: Path,
    *,
    dockerfile: str = "Dockerfile",
    nocache: bool = False,
    progress: Progress,
    verbose: bool = True,
) -> str:
    """Build ``context`` as ``tag``; return the image id. Step headers always reach
    ``progress``, their output only when ``verbose``."""
    import docker.errors

    image_id: str | None = None
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("a", encoding="utf-8") as log:
        log.write(f"$ build {tag} from {context}\n")
        output = _BuildOutput(log, progress, verbose)
        try:
            chunks = client.api.build(
                path=str(context), dockerfile=dockerfile, tag=tag, decode=True, rm=True,
                forcerm=True, nocache=nocache, pull=False, network_mode="host",
            )  # fmt: skip
            for chunk in chunks:
                output.feed(str(chunk.get("stream", "")))
                if "error" in chunk:
                    output.flush()
                    log.write(f"{chunk['error']}\n")
                    # The error ends the stream: reading it to its end hands the
                    # connection back to the client, which closes it.
                    for _ in chunks:
                        pass
                    raise _failure(tag, output.step, _detail(chunk), tuple(output.lines))
                image_id = _image_id(chunk) or image_id
            output.flush()
        except docker.errors.APIError as exc:
            log.write(f"{exc}\n")
            reason = one_line(getattr(exc, "explanation", "") or str(exc))
            raise ImageBuildError(tag, one_line(output.step, 100), reason) from exc
    return image_id or str(client.images.get(tag).id)


def _detail(chunk: dict[str, Any]) -> str:
    detail = chunk.get("errorDetail") or {}
    return str(detail.get("message") or chunk["error"])


def _image_id(chunk: dict[str, Any]) -> str | None:
    aux = chunk.get("aux")
    return str(aux["ID"]) if isinstance(aux, dict) and "ID" in aux else None


def _failure(tag: str, step: str, detail: str, lines: tuple[str, ...]) -> ImageBuildError:
    exit_code = _EXIT.search(detail)
    reason = f"exit code {exit_code.group(1)}" if exit_code else one_line(detail)
    telling = telling_line(lines) if exit_code else None
    if telling:
        reason += f"; last output: {one_line(telling)}"
    return ImageBuildError(tag, one_line(step, 100), reason, lines)


def build_image(
    client: docker.DockerClient,
    config: ServicesConfig,
    *,
    base: str = DEFAULT_BASE,
    functions: Sequence[Path] = (),
    tags: Sequence[str] = (),
    nocache: bool = False,
    progress: Progress = lambda _: None,
    verbose: bool = True,
) -> BuiltImage:
    """Build (or find) the runtime image for this checkout and ``functions``.

    ``nocache`` ignores the builder's cache and rebuilds the deps image too (what a
    cold build measures); the host's wheel caches are kept either way.
    """
    import docker.errors
    import docker.utils

    began = time.monotonic()
    check_build_arguments(base, functions, tags)
    log_file = config.home / "logs" / "image-build.log"
    base_id = resolve_base(client, base, progress)
    wheels = ensure_wheels(config, progress=progress)
    deps = DepsRecipe(base, base_id, pins_of(wheels.names), wheels.names)
    if nocache or not _exists(client, deps.tag):
        progress(f"building {deps.tag} (third-party requirements, once per set)")
        # The context is shared by every base built on this wheel set: each deps
        # image gets its own Dockerfile; the requirements are the same for all.
        dockerfile = f"Dockerfile.{deps.tag.split(':')[1]}"
        _write_if_changed(wheels.context / dockerfile, deps.dockerfile)
        _write_if_changed(wheels.context / "requirements.txt", deps.requirements_txt)
        stream_build(
            client, wheels.context, deps.tag, log_file, dockerfile=dockerfile,
            nocache=nocache, progress=progress, verbose=verbose,
        )  # fmt: skip
    wheel = ensure_dbus_wheel(config, progress=progress)
    root = image_dir(config) / "context"
    root.mkdir(parents=True, exist_ok=True)
    context = Path(tempfile.mkdtemp(prefix="build-", dir=root))
    try:
        (context / "dist").mkdir()
        shutil.copy2(wheel.path, context / "dist" / wheel.path.name)
        native = native_wheel(config.home)
        if native is not None:
            shutil.copy2(native, context / "dist" / native.name)
        core = CoreRecipe(
            base=base, base_id=base_id, deps_tag=deps.tag, dbus_wheel=wheel.path.name,
            dbus_content=wheel.content, native_wheel=native.name if native else None,
            native_content=native.parent.name if native else "",
        )  # fmt: skip
        core_id = None if nocache else _tagged_id(client, core.tag)
        built = core_id is None
        if core_id is None:
            progress(f"building {core.tag} (dbus itself, once per change of its sources)")
            (context / "Dockerfile.core").write_text(core.dockerfile)
            core_id = stream_build(
                client, context, core.tag, log_file, dockerfile="Dockerfile.core",
                nocache=nocache, progress=progress, verbose=verbose,
            )  # fmt: skip
        recipe = RuntimeRecipe(core, core_id, stage_functions(config, functions, context))
        tag = recipe.content_tag
        if nocache or not _exists(client, tag):
            built = True
            progress(f"building {tag}")
            (context / "Dockerfile").write_text(recipe.dockerfile)
            image_id = stream_build(
                client, context, tag, log_file, nocache=nocache, progress=progress,
                verbose=verbose,
            )  # fmt: skip
        else:
            progress(f"{tag} is up to date")
            image_id = str(client.images.get(tag).id)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    image = client.images.get(image_id)
    for extra in tags:
        repository, version = docker.utils.parse_repository_tag(extra)
        try:
            image.tag(repository, version or "latest")
        except docker.errors.APIError as exc:
            raise ConfigError(
                f"--tag {extra} is not a valid image name ({one_line(str(exc), 120)}); use "
                "name[:tag] in lower case",
                setting="--tag",
            ) from exc
    return BuiltImage(tag, image_id, built, time.monotonic() - began, int(image.attrs["Size"]))


def _tagged_id(client: docker.DockerClient, tag: str) -> str | None:
    """The id of the image tagged ``tag``; None when the engine has none."""
    import docker.errors

    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None


def _exists(client: docker.DockerClient, tag: str) -> bool:
    return _tagged_id(client, tag) is not None


def _write_if_changed(path: Path, text: str) -> None:
    """Replace ``path`` whole (never truncated under a concurrent build's reader)."""
    if path.is_file() and path.read_text() == text:
        return
    replace_file(path, text)
