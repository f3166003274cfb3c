"""What the host prepares for an image build: wheels, dbus's own wheel, function folders.

Third-party wheels are fetched once per requirement set into
``<DBUS_HOME>/image/deps/<hash>/wheels``, pinned to the versions installed in the
interpreter running this command: a driver on the host and workers in the image
must run the same Spark. dbus's wheel is built from a clean copy of the
checkout's packages (a stale ``build/`` folder cannot leak into it) with a fixed
``SOURCE_DATE_EPOCH``, and cached by a hash of those sources, so an unchanged
checkout reuses the same wheel byte for byte and the builder's cache holds.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dbus_deploy.image._errors import ImageBuildError
from dbus_deploy.image._recipe import FunctionFolder, digest, runtime_requirements
from dbus_deploy.services import ServicesConfig
from dbus_deploy.services._process import last_log_line, log_sizes, run_logged

PACKAGE_DIRS = ("framework/dbus_fn", "runtimes/spark/dbus_spark", "deploy/dbus_deploy")
"""Where the three import packages of the dbus-fn distribution live in a checkout."""
_PROJECT_FILES = ("pyproject.toml", "README.md")
_IGNORED = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".mypy_cache", ".tox")
# Wheels' zip entries carry this time instead of the files' mtimes (1980-01-01).
_EPOCH = "315532800"


def image_dir(config: ServicesConfig) -> Path:
    return config.home / "image"


def _files(root: Path) -> Iterable[Path]:
    """Every file under ``root`` that goes into a build, in a stable order."""
    ignore = shutil.ignore_patterns(*_IGNORED)
    for folder, dirs, names in os.walk(root):
        skipped = ignore(folder, [*dirs, *names])
        dirs[:] = sorted(d for d in dirs if d not in skipped)
        for name in sorted(names):
            if name not in skipped:
                yield Path(folder) / name


def tree_digest(roots: Sequence[Path], base: Path) -> str:
    """A hash over the relative paths, modes and contents of every file under ``roots``."""
    parts: list[str | bytes] = []
    for root in roots:
        for path in _files(root) if root.is_dir() else [root]:
            executable = "x" if os.access(path, os.X_OK) else "-"
            parts += [f"{path.relative_to(base)}:{executable}", path.read_bytes()]
    return digest(*parts)


def _pip_wheel(
    config: ServicesConfig, arguments: Sequence[str], *, what: str, extra_env: dict[str, str]
) -> None:
    """``pip wheel`` on the host, with this machine's pip settings (index, proxy, CA);
    a failure is a build failure that quotes pip's telling line."""
    log_file = config.home / "logs" / "image-wheels.log"
    argv = [sys.executable, "-m", "pip", "wheel", "--disable-pip-version-check", *arguments]
    start = log_sizes([log_file])
    failure = run_logged(argv, log_file=log_file, env={**config.environ, **extra_env}, timeout=3600)
    if failure is not None:
        telling = last_log_line(log_file, since=start) or failure
        raise ImageBuildError(
            "the runtime image", f"pip wheel {what} (on the host)", f"{telling}; see {log_file}"
        )


def _copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_IGNORED), symlinks=True)


@dataclass(frozen=True, slots=True)
class DbusWheel:
    """dbus's own wheel, built from the checkout, and the hash of its sources."""

    path: Path
    content: str


def ensure_dbus_wheel(
    config: ServicesConfig, *, progress: Callable[[str], None] = lambda _: None
) -> DbusWheel:
    """The wheel of the checkout's dbus, built only when its sources changed."""
    repo = config.repo
    roots = [repo / name for name in (*_PROJECT_FILES, *PACKAGE_DIRS)]
    content = tree_digest(roots, repo)
    out = image_dir(config) / "dist" / content
    built = sorted(out.glob("*.whl")) if out.is_dir() else []
    if built:
        return DbusWheel(built[0], content)
    progress("building the dbus wheel from the checkout")

    def build(partial: Path) -> None:
        staging = partial / "src"
        for name in _PROJECT_FILES:
            staging.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, staging / name)
        for name in PACKAGE_DIRS:
            _copy_tree(repo / name, staging / name)
        _pip_wheel(
            config, ["--no-deps", "-w", str(partial), str(staging)],
            what="dbus", extra_env={"SOURCE_DATE_EPOCH": _EPOCH},
        )  # fmt: skip
        shutil.rmtree(staging)

    _fill_once(out, build)
    return DbusWheel(sorted(out.glob("*.whl"))[0], content)


def _fill_once(out: Path, fill: Callable[[Path], None]) -> Path:
    """``out``, filled by ``fill`` in a private folder beside it and renamed into place,
    so an interrupted fill never looks complete and two builds at once do not
    trample each other (the later rename loses, and its copy is dropped)."""
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f"{out.name}.partial-", dir=out.parent))
    try:
        fill(partial)
        partial.rename(out)
    except OSError:
        if not out.is_dir():
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return out


def host_pins() -> tuple[str, ...]:
    """Constraints: every distribution installed here at its installed version."""
    pins = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in ("dbus-fn", "pip", "setuptools", "wheel"):
            pins.add(f"{name.lower()}=={dist.version}")
    return tuple(sorted(pins))


@dataclass(frozen=True, slots=True)
class Wheels:
    """The third-party wheels of one requirement set, in the deps build context."""

    context: Path
    names: tuple[str, ...]


def ensure_wheels(
    config: ServicesConfig, *, progress: Callable[[str], None] = lambda _: None
) -> Wheels:
    """The wheels of dbus's runtime requirements, downloaded (or built) once per set."""
    with (config.repo / "pyproject.toml").open("rb") as handle:
        project = tomllib.load(handle)["project"]
    requirements = runtime_requirements(project)
    constraints = host_pins()
    key = digest(sys.implementation.cache_tag, *requirements, "--", *constraints)
    context = image_dir(config) / "deps" / key
    wheels = context / "wheels"
    if not wheels.is_dir():
        progress(f"fetching the runtime's wheels once into {wheels}")
        context.mkdir(parents=True, exist_ok=True)
        (context / "requested.txt").write_text("".join(f"{r}\n" for r in requirements))
        (context / "constraints.txt").write_text("".join(f"{c}\n" for c in constraints))
        _fill_once(
            wheels,
            lambda partial: _pip_wheel(
                config,
                ["-w", str(partial), "-r", str(context / "requested.txt"),
                 "-c", str(context / "constraints.txt")],
                what="of the runtime's requirements", extra_env={},
            ),
        )  # fmt: skip
    return Wheels(context, tuple(sorted(p.name for p in wheels.glob("*.whl"))))


def _requirement_wheels(config: ServicesConfig, requirements: Path, name: str) -> Path:
    """Wheels for a function folder's requirements.txt, fetched on the host once per
    content and pinned like the runtime's own, so the image build needs no network."""
    constraints = host_pins()
    key = digest(sys.implementation.cache_tag, requirements.read_bytes(), *constraints)
    out = image_dir(config) / "function-wheels" / key

    def fetch(partial: Path) -> None:
        pins = partial / "constraints.txt"
        pins.write_text("".join(f"{c}\n" for c in constraints))
        _pip_wheel(
            config, ["-w", str(partial), "-r", str(requirements), "-c", str(pins)],
            what=f"of {name}/requirements.txt", extra_env={},
        )  # fmt: skip
        pins.unlink()

    return _fill_once(out, fetch)


def stage_functions(
    config: ServicesConfig, folders: Sequence[Path], context: Path
) -> tuple[FunctionFolder, ...]:
    """Copy function folders into ``context/functions``, and for each with a
    requirements.txt, it and the wheels it needs into ``context/requirements/<name>``;
    what the recipe needs to know of each (``check_build_arguments`` has checked them)."""
    staged: list[FunctionFolder] = []
    for folder in (f.resolve() for f in folders):
        _copy_tree(folder, context / "functions" / folder.name)
        requirements = folder / "requirements.txt"
        if requirements.is_file():
            wheels = _requirement_wheels(config, requirements, folder.name)
            shutil.copytree(wheels, context / "requirements" / folder.name)
            shutil.copy2(requirements, context / "requirements" / folder.name / requirements.name)
        staged.append(
            FunctionFolder(
                name=folder.name,
                content=tree_digest([folder], folder),
                has_requirements=requirements.is_file(),
            )
        )
    return tuple(staged)
