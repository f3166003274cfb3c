"""A deployment's own Python packages: the ``requirements.txt`` beside its ``dbus.toml``.

One way, the same for every use: a function folder's ``requirements.txt`` names the
packages its module imports that the runtime does not have, one requirement a line
(``phonenumbers==8.13.0``, ``python-slugify>=8,<9``), as ``dbus image build``
already reads it. ``dbus fn validate`` resolves it here:

- it must be a file of UTF-8 text: a folder of that name, or a file saved as
  UTF-16, is refused naming it;
- each line must be a requirement: pip options (``-r``, ``--index-url``...) and
  direct URLs are refused, a package from the index is named instead;
- a package the runtime brings itself (``RUNTIME_PACKAGES``: dbus, Spark, Arrow,
  pandas, the clients of the sources and sinks) is refused, named with the version
  the runtime has: one process cannot hold two versions of what the runtime's own
  code shares with the functions;
- the set resolves to wheels for this platform (``pip download --only-binary``): a
  name or version the index lacks, or a package with no wheel for this Python and
  platform, is one line naming it;
- the wheels' packages are installed apart (``site``) and each top-level module is
  imported in a process of its own: one that fails to import is named with its error.

Wheels and installed packages are kept in ``<dbus home>/cache/function-deps/<key>``,
``key`` the digest of the requirements and the interpreter: an unchanged set is not
fetched, nor its modules imported, again.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from dbus_fn._text import not_utf8, read_utf8
from dbus_fn.errors import BundleError, ConfigError

REQUIREMENTS = "requirements.txt"
RUNTIME_PACKAGES = frozenset(
    canonicalize_name(name) for name in (
        "dbus-fn", "pyspark", "py4j", "pyarrow", "pandas", "numpy", "cloudevents",
        "pluggy", "click", "mysql-replication", "pymysql", "kazoo", "confluent-kafka",
        "elasticsearch", "elastic-transport", "packaging",
    )
)  # fmt: skip
"""What the runtime's own code shares with the functions: never a deployment's own."""


@dataclass(frozen=True, slots=True)
class Requirements:
    """A deployment's ``requirements.txt``, read and checked (module docstring)."""

    path: Path
    lines: tuple[str, ...]
    """The requirements, as written, one a line (comments and blank lines gone)."""

    @property
    def key(self) -> str:
        """What names this set's wheels for this interpreter (module docstring)."""
        text = "\n".join([sys.implementation.cache_tag, sys.platform, *self.lines])
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Resolved:
    """A deployment's packages resolved to wheels and installed apart."""

    requirements: Requirements
    wheels: tuple[Path, ...]
    site: Path
    """Where the packages are installed: first on the path of the deployment's code."""
    modules: tuple[str, ...]
    """The top-level modules the packages bring."""

    def describe(self) -> str:
        names = ", ".join(_wheel_name(w) for w in self.wheels) or "none"
        return f"{names} (key {self.requirements.key})"


def read_requirements(folder: Path) -> Requirements | None:
    """The folder's ``requirements.txt`` checked line by line (None: it has none, or
    names no package)."""
    path = folder / REQUIREMENTS
    if not path.exists():
        return None
    lines = []
    for number, raw in enumerate(_requirements_text(path).splitlines(), 1):
        text = raw.split(" #", 1)[0].strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path} line {number}"
        if text.startswith("-"):
            raise ConfigError(
                f"{where}: the pip option {text.split()[0]!r} is not taken; list packages "
                "only, one a line (name==version)",
                setting="requirements",
            )
        try:
            requirement = Requirement(text)
        except InvalidRequirement as exc:
            raise ConfigError(
                f"{where}: {text!r} is not a requirement ({str(exc).splitlines()[0]}); "
                "write name==version "
                "or name>=1,<2",
                setting="requirements",
            ) from None
        if requirement.url:
            raise ConfigError(
                f"{where}: {text!r} names a URL; name a package of the index (name==version)",
                setting="requirements",
            )
        _check_not_runtime(requirement.name, where)
        lines.append(text)
    return Requirements(path, tuple(lines)) if lines else None  # comments only: none


def _requirements_text(path: Path) -> str:
    """The text of a ``requirements.txt``; ``ConfigError`` naming the file when it is a
    folder (once passed over without a word, as if there were none), not a file, or not
    UTF-8 text."""
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ConfigError(
            f"{path} is {what}; a deployment's packages are listed in a {REQUIREMENTS} file, "
            "one a line (name==version): make it one, or remove it",
            setting="requirements",
        )
    try:
        return read_utf8(path)
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} {not_utf8(exc)}; save it as UTF-8, one requirement a line (name==version)",
            setting="requirements",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc.strerror}); make it readable by this user",
            setting="requirements",
        ) from None


def _check_not_runtime(name: str, where: str) -> None:
    if canonicalize_name(name) not in RUNTIME_PACKAGES:
        return
    try:
        here = f" ({name} {metadata.version(name)} here)"
    except metadata.PackageNotFoundError:
        here = ""
    raise ConfigError(
        f"{where}: {name} is the runtime's own package{here}: a deployment uses the "
        "runtime's, and one process cannot hold two versions of it; remove it",
        setting="requirements",
    )


def cache_dir() -> Path:
    from dbus_fn.home import dbus_home

    return dbus_home() / "cache" / "function-deps"


def resolve(requirements: Requirements, cache: Path | None = None) -> Resolved:
    """Wheels for ``requirements`` on this platform, installed apart and each top-level
    module imported in a process of its own (module docstring); fetched once per key."""
    folder = (cache or cache_dir()) / requirements.key
    if not (folder / "site").is_dir():
        _fill(folder, requirements)
    wheels = tuple(sorted((folder / "wheels").glob("*.whl")))
    for wheel in wheels:
        _check_not_runtime(_wheel_name(wheel).split(" ")[0],
                           f"{requirements.path} (needed by what it names)")  # fmt: skip
    modules = _top_level(folder / "site")
    checked = folder / "imported"  # each module imported once per set, not per use
    if not checked.is_file():
        for module in modules:
            _check_import(requirements, folder / "site", module)
        checked.touch()
    return Resolved(requirements, wheels, folder / "site", modules)


def _fill(folder: Path, requirements: Requirements) -> None:
    """Download and install into a fresh folder, then move it in place whole."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        listed = partial / REQUIREMENTS
        listed.write_text("".join(f"{line}\n" for line in requirements.lines))
        _pip(requirements, "download", "--only-binary=:all:", "--dest", str(partial / "wheels"),
             "-r", str(listed))  # fmt: skip
        wheels = sorted(str(p) for p in (partial / "wheels").glob("*.whl"))
        if wheels:
            _pip(requirements, "install", "--no-index", "--no-deps", "--target",
                 str(partial / "site"), *wheels)  # fmt: skip
        else:
            (partial / "site").mkdir()
        if folder.exists():
            shutil.rmtree(folder)
        partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _pip(requirements: Requirements, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"},
    )  # fmt: skip
    if done.returncode != 0:
        errors = [line.strip() for line in done.stderr.splitlines() if "ERROR" in line]
        why = errors[-1] if errors else (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise ConfigError(
            f"{requirements.path}: does not resolve to wheels for this platform "
            f"(Python {sys.version_info.major}.{sys.version_info.minor}, {sys.platform}): "
            f"{why.removeprefix('ERROR: ')}; fix the name or the version, or pick one with "
            "a wheel for it",
            setting="requirements",
        )


def _top_level(site: Path) -> tuple[str, ...]:
    """The importable top-level modules the installed distributions bring."""
    names: set[str] = set()
    for info in site.glob("*.dist-info"):
        listed = info / "top_level.txt"
        if listed.is_file():
            names.update(n.strip() for n in listed.read_text().splitlines() if n.strip())
            continue
        for line in (info / "RECORD").read_text().splitlines() if (info / "RECORD").is_file() \
                else ():  # fmt: skip
            first = line.split(",", 1)[0].split("/", 1)[0]
            if first.endswith(".py"):
                names.add(first[:-3])
            elif "." not in first and first != "__pycache__":
                names.add(first)
    return tuple(sorted(n for n in names if n.isidentifier() and not n.startswith("_")))


def _check_import(requirements: Requirements, site: Path, module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(site)!r}); import {module}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no error text"])[-1]
        raise ConfigError(
            f"{requirements.path}: module {module!r} of its packages does not import here "
            f"({last}); pin a version that imports on this Python and platform",
            setting="requirements",
        )


def packages_of(path: Path) -> Resolved | None:
    """The packages of the deployment at ``path`` (a folder or its manifest), resolved
    (``resolve``); None when it has no ``requirements.txt``."""
    requirements = read_requirements(path if path.is_dir() else path.parent)
    return None if requirements is None else resolve(requirements)


def archive_name(requirements: Requirements) -> str:
    """The file name a resolved set travels under to a runtime's executors."""
    return f"dbus-deps-{requirements.key}.zip"


WHEELS_FILE = "dbus-wheels.txt"
"""In a shipped set's folder: the file names of the wheels it was installed from, so
an executor can tell whether their code runs on its platform (``unpacked_site``)."""


def site_archive(resolved: Resolved) -> Path:
    """The installed packages of ``resolved`` as one zip beside them (made once), with
    the names of the wheels they came from."""
    archive = resolved.site.parent / archive_name(resolved.requirements)
    if not archive.is_file():
        listed = "".join(f"{wheel.name}\n" for wheel in resolved.wheels)
        (resolved.site / WHEELS_FILE).write_text(listed)
        partial = archive.with_suffix(".partial")
        shutil.make_archive(str(partial), "zip", resolved.site)
        Path(f"{partial}.zip").rename(archive)
    return archive


def unpacked_site(requirements: Requirements, archive: Path, cache: Path) -> Resolved:
    """An executor's copy of a set's packages, unpacked from ``archive`` once.
    ``BundleError`` when a wheel of the set holds code for another platform or Python
    than this executor's (the driver resolves for its own)."""
    folder = cache / requirements.key
    if not (folder / "site").is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=".site-", dir=folder))
        shutil.unpack_archive(str(archive), str(partial), "zip")
        try:
            check_platform(requirements, partial)
        except BundleError:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        try:
            partial.rename(folder / "site")
        except OSError:  # another worker of this host unpacked it meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    return Resolved(requirements, (), folder / "site", _top_level(folder / "site"))


def check_platform(requirements: Requirements, site: Path) -> None:
    """Refuse a set whose wheels (listed in ``site``) include one no tag of which this
    interpreter supports: native code built for another platform or Python."""
    from packaging.tags import sys_tags
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    listed = site / WHEELS_FILE
    names = listed.read_text().split() if listed.is_file() else []
    supported = set(sys_tags())
    for name in names:
        try:
            tags = parse_wheel_filename(name)[3]
        except InvalidWheelFilename:
            continue
        if tags.isdisjoint(supported):
            python = f"{sys.version_info.major}.{sys.version_info.minor}"
            here = f"Python {python} on {sysconfig.get_platform()}"
            raise BundleError(
                f"{requirements.path}: the wheel {name} was resolved on the driver for "
                f"{', '.join(sorted(str(t) for t in tags))}, which this executor ({here}) "
                "cannot run: run the executors on the driver's Python and platform (the "
                "image of `dbus image build` has them), or pin a pure-Python version",
                path=str(requirements.path),
            )


def _wheel_name(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name} {version}"


class PackageImports:
    """A deployment's own packages, seen by its code alone: while it runs (its module's
    import, each of its calls), its ``site`` is first on ``sys.path`` and its modules
    are the ones in ``sys.modules`` under their names, whatever another deployment or
    the runtime loaded under the same names; put aside again after. So two deployments
    in one process may pin two versions of one package. A pipeline enters it once a
    change (``dbus_fn.pipeline``); deployments without packages never do."""

    def __init__(self, site: Path, modules: tuple[str, ...]) -> None:
        self._site = str(site)
        self._prefixes = tuple(p for name in modules for p in (name, f"{name}."))
        self._names = tuple(modules)
        self._own: dict[str, object] = {}
        self._aside: dict[str, object] = {}
        self._count = 0
        self._depth = 0

    def _ours(self, key: str) -> bool:
        return key.startswith(self._prefixes) and key.partition(".")[0] in self._names

    def __enter__(self) -> PackageImports:
        if not self._depth:
            sys.path.insert(0, self._site)
            # Another's modules under the names: only where a top-level one is loaded
            # (a submodule's import loads its package first), so mostly none to scan.
            if any(name in sys.modules for name in self._names):
                keys = [k for k in sys.modules if self._ours(k)]
                self._aside = {key: sys.modules.pop(key) for key in keys}
            sys.modules.update(self._own)  # type: ignore[arg-type]
            self._count = len(sys.modules)
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth:
            return
        keys = list(sys.modules)
        # What its code imported meanwhile was added last (a dict keeps the order);
        # with a module removed meanwhile, every key is looked at.
        added = keys[self._count:] if len(keys) >= self._count else keys
        for key in [*self._own, *(k for k in added if self._ours(k))]:
            module = sys.modules.pop(key, None)
            if module is not None:
                self._own[key] = module
        sys.modules.update(self._aside)  # type: ignore[arg-type]
        self._aside = {}
        if self._site in sys.path:
            sys.path.remove(self._site)
