"""Finding a deployment's functions: the loader and the ``FunctionRegistry``.

``load_deployment("functions/orders")`` reads the folder's ``dbus.toml``, imports
the module it names (a path relative to the manifest, or a dotted name), collects
every decorated function in it (and in a package's submodules), registers each
with a pluggy ``PluginManager`` (pluggy validates the implementation against the
hook spec), and checks the functions against the manifest: no two functions may
share a name, and every table glob a selector names must overlap a table the
deployment subscribes to. The result is a ``LoadedDeployment``, which the
pipeline runs. ``with_packages`` loads one with its own packages
(``dbus_fn.dependencies``), seen by its code alone.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import pkgutil
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from dbus_fn.decorators import FunctionInfo, FunctionKind, function_info, globs_overlap
from dbus_fn.dependencies import PackageImports, Resolved, packages_of
from dbus_fn.errors import FunctionValidationError, ModuleLoadError, RegistryError
from dbus_fn.events import Operation
from dbus_fn.hooks import HOOK_NAMES, plugin_manager
from dbus_fn.manifest import DEFAULT_TIMEOUT, Destination, Manifest, load_manifest, manifest_path

_KIND_ORDER: dict[FunctionKind, int] = {"filter": 0, "projection": 1, "route": 2}


class FunctionRegistry:
    """The functions of one deployment, registered with pluggy and kept in order.

    Within a kind, functions run by their ``order=``, then in definition order
    (file, then line).
    """

    def __init__(self) -> None:
        self._manager: pluggy.PluginManager = plugin_manager()
        self._functions: dict[str, FunctionInfo] = {}

    def register(self, info: FunctionInfo) -> None:
        """Add one function; refuse a second function with the same name."""
        existing = self._functions.get(info.name)
        if existing is info:
            return
        if existing is not None:
            raise RegistryError(
                f"duplicate function name {info.name!r}: {existing.describe()} and "
                f"{info.describe()}; expected unique names, give one of them name=...",
                function=info.name,
            )
        try:
            self._manager.register(info.as_plugin(), name=info.name)
        except pluggy.PluginValidationError as exc:
            raise FunctionValidationError(
                f"{info.describe()}: expected an implementation of {info.hook_name}, "
                f"got one pluggy refuses: {str(exc).splitlines()[-1]}",
                function=info.name,
                location=info.location,
            ) from exc
        self._functions[info.name] = info

    def register_module(self, module: ModuleType) -> list[FunctionInfo]:
        """Register every decorated function of ``module`` (and of its submodules,
        for a package); return them."""
        found = list(discover(module))
        for info in found:
            self.register(info)
        return found

    @property
    def hook(self) -> Any:
        """Pluggy's hook relay (``registry.hook.dbus_filter(event=..., context=...)``).

        It calls every implementation of a kind regardless of selectors; the
        pipeline composes selector-matched chains instead. Useful to inspect
        what is registered.
        """
        return self._manager.hook

    @property
    def functions(self) -> tuple[FunctionInfo, ...]:
        """Every function: filters, then projections, then routes, each in run order."""
        return tuple(
            sorted(self._functions.values(), key=lambda f: (_KIND_ORDER[f.kind], *_run_order(f)))
        )

    def of_kind(self, kind: FunctionKind) -> tuple[FunctionInfo, ...]:
        """The functions of one kind in run order, as pluggy knows them."""
        caller = getattr(self._manager.hook, HOOK_NAMES[kind])
        infos = [self._functions[impl.plugin_name] for impl in caller.get_hookimpls()]
        return tuple(sorted(infos, key=_run_order))

    def check_tables(self, tables: Sequence[str]) -> None:
        """Refuse a selector glob that matches none of ``tables``."""
        for info in self.functions:
            for glob in info.selector.tables:
                if not any(globs_overlap(glob, table) for table in tables):
                    raise RegistryError(
                        f"{info.describe()}: selector table {glob!r} matches none of the "
                        f"tables the deployment subscribes to ({', '.join(tables)}); "
                        "expected one of those, or add the table to `tables` in dbus.toml",
                        function=info.name,
                    )


def _run_order(info: FunctionInfo) -> tuple[int, str, int]:
    return (info.order, info.file, info.line)


def discover(module: ModuleType) -> Iterator[FunctionInfo]:
    """Every decorated function found in ``module``, and in its submodules if it is a
    package; each once, however many names it is bound to."""
    seen: set[int] = set()
    for mod in _with_submodules(module):
        for attribute in list(vars(mod).values()):
            info = function_info(attribute)
            if info is not None and id(info) not in seen:
                seen.add(id(info))
                yield info


def _with_submodules(module: ModuleType) -> Iterator[ModuleType]:
    yield module
    search = getattr(module, "__path__", None)
    if search is None:
        return
    for sub in pkgutil.walk_packages(search, prefix=module.__name__ + "."):
        yield _import(sub.name, origin=sub.name)


def load_module(target: str | Path, *, root: Path | None = None) -> ModuleType:
    """Import a function module by path (a ``.py`` file or a package folder,
    relative to ``root``) or by dotted name.

    A module loaded by path is imported under its own name (file stem or folder
    name) with its folder on ``sys.path``, so it may import its siblings.
    """
    text = str(target)
    looks_like_path = (
        isinstance(target, Path) or text.endswith(".py") or "/" in text or "\\" in text
    )
    if not looks_like_path:
        candidate = (root or Path.cwd()) / text
        looks_like_path = candidate.exists() and not re.fullmatch(r"[\w.]+", text)
    if not looks_like_path:
        return _import(text, origin=text)
    path = Path(text)
    if root is not None and not path.is_absolute():
        path = root / path
    path = path.resolve()
    if path.is_dir():
        file = path / "__init__.py"
        if not file.is_file():
            raise ModuleLoadError(
                f"{path}: expected a function module (a .py file or a package folder with "
                "__init__.py), got a folder without __init__.py",
                target=text,
            )
        name, locations = path.name, [str(path)]
    elif path.is_file() and path.suffix == ".py":
        file, name, locations = path, path.stem, None
    else:
        raise ModuleLoadError(
            f"{path}: no such module; expected a .py file or a package folder", target=text
        )
    if not name.isidentifier():
        raise ModuleLoadError(
            f"{path}: expected a module name that is a Python identifier, got {name!r}",
            target=text,
        )
    taken = taken_module_name(name)
    if taken is not None:
        other = f"{name}_functions" + ("" if locations is not None else ".py")
        raise ModuleLoadError(
            f"{path}: a function module named {name!r} would hide {taken} from the runtime "
            f"and every deployment beside it; rename it (and module = in dbus.toml), such as "
            f"to {other}",
            target=text,
        )
    existing = sys.modules.get(name)
    stamp = _stamp(file)
    if (
        existing is not None
        and _same_file(getattr(existing, "__file__", None), file)
        and _stamps.setdefault(file, stamp) == stamp
    ):
        # Already imported (by a test's `import`, or an earlier load) and unchanged.
        return existing
    spec = importlib.util.spec_from_file_location(name, file, submodule_search_locations=locations)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    folder = str(file.parent if locations is None else path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    _stamps[file] = stamp
    try:
        spec.loader.exec_module(module)
    except FunctionValidationError:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _load_error(exc, file, text) from exc
    return module


def taken_module_name(name: str) -> str | None:
    """What already answers to the top-level module ``name`` in this Python, in words
    ("Python's own json module", "the installed package pyarrow"); None: nothing does.

    A function module is imported under its own name with its folder first on
    ``sys.path``, so under a taken name it would replace that module for all the code
    of its process: the runtime's and every other deployment's. Installed means found
    by the import system outside the folders that hold function modules: in Python's
    own or the environment's folders, or by a finder installed there (an editable
    install's)."""
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return f"Python's own {name} module"
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    installed = [entry for entry in sys.path if entry and _within(Path(entry), prefixes)]
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                spec = finder.find_spec(name, installed)
            else:
                spec = finder.find_spec(name, None)
        except (AttributeError, ImportError, ValueError):
            continue
        if spec is None:
            continue
        where = spec.origin or next(iter(spec.submodule_search_locations or ()), "")
        if where and _within(Path(where), {Path(sysconfig.get_paths()["stdlib"]).resolve()}):
            return f"Python's own {name} module"
        return f"the installed package {name}"
    return None


def _within(entry: Path, folders: set[Path]) -> bool:
    try:
        resolved = entry.resolve()
    except OSError:
        return False
    return any(resolved == folder or folder in resolved.parents for folder in folders)


_stamps: dict[Path, tuple[int, int]] = {}
"""(mtime, size) of each module file when it was loaded: a changed file (a new
version in the same place) is loaded again rather than reused."""


def _stamp(file: Path) -> tuple[int, int]:
    status = file.stat()
    return (status.st_mtime_ns, status.st_size)


def _same_file(a: str | None, b: Path) -> bool:
    return a is not None and Path(a).resolve() == b


def _import(name: str, *, origin: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except FunctionValidationError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ModuleLoadError(
                f"{name}: no module of that name; expected a dotted name importable from "
                "sys.path, or a path to a .py file or package folder",
                target=origin,
            ) from exc
        spec = importlib.util.find_spec(name.partition(".")[0])
        file = Path(spec.origin) if spec is not None and spec.origin else Path(name)
        raise _load_error(exc, file, origin) from exc
    except Exception as exc:
        spec = None
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            spec = None
        file = Path(spec.origin) if spec is not None and spec.origin else Path(name)
        raise _load_error(exc, file, origin) from exc


def _load_error(exc: BaseException, file: Path, target: str) -> ModuleLoadError:
    """One line: where the import failed (the deepest line in the module's own
    file), and the exception."""
    where = _display(file)
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f"{_display(Path(exc.filename))}:{exc.lineno}"
        detail = f"SyntaxError: {exc.msg}"
    else:
        lines = [
            frame.lineno
            for frame in traceback.extract_tb(exc.__traceback__)
            if Path(frame.filename).resolve() == file.resolve()
        ]
        if lines:
            where = f"{where}:{lines[-1]}"
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return ModuleLoadError(
        f"{where}: importing the function module failed with {detail}; "
        "expected a module that imports cleanly",
        target=target,
    )


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


@dataclass(frozen=True, slots=True, eq=False)
class LoadedDeployment:
    """A manifest and the functions of its module, checked against each other."""

    manifest: Manifest
    functions: tuple[FunctionInfo, ...]
    module: ModuleType | None = field(default=None, repr=False)
    imports: PackageImports | None = field(default=None, repr=False)
    """Its own packages (``requirements.txt``), entered while its code runs; None: it
    runs with the runtime's."""

    @property
    def name(self) -> str:
        return self.manifest.name

    def subscribes(self, qualified_table: str) -> bool:
        """Whether the deployment wants changes of ``db.table``."""
        return self.manifest.subscribes(qualified_table)

    def chain(
        self, database: str, table: str, op: Operation
    ) -> tuple[tuple[FunctionInfo, ...], tuple[FunctionInfo, ...], tuple[FunctionInfo, ...]]:
        """The filters, projections and routes that apply to one table and
        operation, each in run order."""
        matching = [f for f in self.functions if f.selector.matches(database, table, op)]
        return (
            tuple(f for f in matching if f.kind == "filter"),
            tuple(f for f in matching if f.kind == "projection"),
            tuple(f for f in matching if f.kind == "route"),
        )


def build_deployment(
    manifest: Manifest, modules: Iterable[ModuleType] | ModuleType
) -> LoadedDeployment:
    """Register the functions of ``modules`` and check them against ``manifest``."""
    registry = FunctionRegistry()
    module_list = [modules] if isinstance(modules, ModuleType) else list(modules)
    for module in module_list:
        registry.register_module(module)
    registry.check_tables(manifest.tables)
    ordered = tuple(info for kind in _KIND_ORDER for info in registry.of_kind(kind))
    return LoadedDeployment(
        manifest=manifest,
        functions=ordered,
        module=module_list[0] if len(module_list) == 1 else None,
    )


def load_deployment(
    path: str | Path, *, packages: Resolved | None = None, name: str | None = None
) -> LoadedDeployment:
    """Load the deployment of a folder (or of a ``dbus.toml``): manifest, module,
    functions; every check done. ``packages``: its own, resolved (``dbus_fn.dependencies``),
    seen by its code alone. ``name``: the name it is deployed under, when not its
    manifest's (``Manifest.deployed_as``)."""
    manifest = load_manifest(path)
    if name is not None:
        manifest = manifest.deployed_as(name)
    if packages is None:
        return build_deployment(manifest, load_module(manifest.module, root=manifest.root))
    imports = PackageImports(packages.site, packages.modules)
    with imports:
        loaded = build_deployment(manifest, load_module(manifest.module, root=manifest.root))
    return replace(loaded, imports=imports)


def with_packages(path: Path, *, name: str | None = None) -> LoadedDeployment:
    """The deployment of ``path`` with its own packages resolved (``resolve``), or as
    it is when it has no ``requirements.txt``; ``name``: the name it is deployed
    under, when not its manifest's."""
    return load_deployment(path, packages=packages_of(path), name=name)


def deployment_from_module(
    module: ModuleType | str | Path,
    *,
    name: str | None = None,
    version: str = "0.0.0",
    tables: Sequence[str] | None = None,
    default_route: str | Destination | None = None,
    dead_letter_route: str | Destination | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> LoadedDeployment:
    """A deployment of one module without a ``dbus.toml``, for tests and quick runs.

    ``tables`` defaults to every table the module's selectors name.
    """
    loaded = module if isinstance(module, ModuleType) else load_module(module)
    if tables is None:
        tables = sorted({glob for info in discover(loaded) for glob in info.selector.tables})
    base = (name or loaded.__name__.rpartition(".")[2]).lower().replace(".", "-")
    data: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9_-]", "-", base) if base[:1].isalpha() else f"fn-{base}",
        "version": version,
        "module": loaded.__name__,
        "tables": list(tables),
        "timeout": 0 if timeout is None else timeout,
    }
    if default_route is not None:
        data["default_route"] = str(default_route)
    if dead_letter_route is not None:
        data["dead_letter_route"] = str(dead_letter_route)
    manifest = Manifest.from_mapping(data, origin=f"deployment of {loaded.__name__}")
    return build_deployment(manifest, loaded)


__all__ = [
    "FunctionRegistry",
    "LoadedDeployment",
    "build_deployment",
    "deployment_from_module",
    "discover",
    "load_deployment",
    "load_module",
    "manifest_path",
    "with_packages",
]
