"""Layers point one way: the SDK (framework/) imports neither the runtime, nor deploy/,
nor pyspark; the runtime does not import deploy/ (deploy/ may use both); no package
has an import cycle; and the runtime's modules import only from their own layer and
the layers below it, each layer a folder (``RUNTIME_LAYERS``, docs/runtime.md "Layers").

Every import counts: at the top of a module, inside a function, and under
``TYPE_CHECKING``: a cycle that only type checkers see still ties the modules'
meanings together."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("framework/dbus_fn", "runtimes/spark/dbus_spark", "deploy/dbus_deploy")

RUNTIME_LAYERS = (
    "config",  # what the runtime is told: configuration, logging, Spark's JVM options
    "state",  # what it keeps: checkpoint files, history tasks, paces, the records sinks take
    "stage",  # the function stage, and what a Spark worker keeps between tasks
    "sinks",  # Kafka, Elasticsearch, and a worker's sink writer
    "reads",  # reads on the executors: stream, carried, history chunks, catch-up, Kafka
    "planning",  # the driver's plan of each micro-batch, and the requests it takes
    "cluster",  # one runtime as a member of a cluster
    "observe",  # what a running runtime shows of itself
    "spark",  # the Spark session, the data sources it registers, the streaming query
    "interfaces",  # the CLI, the HTTP API and dashboard, the `dbus fn` commands
)
"""The runtime's layers, lowest first: each is a folder of ``dbus_spark``."""


def _modules(package: Path) -> dict[str, Path]:
    """Each module of ``package`` by its dotted name (a package by its own name)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every dotted name ``name``'s module imports, wherever the import is written,
    relative imports resolved; ``from X import y`` gives ``X`` and ``X.y``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Per module of ``package``, the modules of the same package it imports."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for imported in _imports(name, path):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                graph[name].add(imported)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected parts of two modules or
    more (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.append(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(sorted(part))
    return found


def upward_imports(graph: Mapping[str, set[str]], layers: tuple[str, ...], root: str) -> list[str]:
    """Each import of a module from a layer above its own, and each module outside
    every layer's folder, as one line (a module's layer: its first folder in ``root``)."""
    rank = {layer: i for i, layer in enumerate(layers)}

    def layer(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if parts[0] == root and len(parts) > 1 and parts[1] in rank else None

    problems = [
        f"{module}: in no layer's folder"
        for module in graph
        if module != root and not layer(module)
    ]
    for module, targets in graph.items():
        for target in targets:
            low, high = layer(module), layer(target)
            if low and high and rank[high] > rank[low]:
                problems.append(f"{module} ({low}) imports {target} ({high})")
    return sorted(problems)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("framework/dbus_fn", ("dbus_spark", "dbus_deploy", "pyspark")),
        ("runtimes/spark/dbus_spark", ("dbus_deploy",)),
    ],
)
def test_no_module_imports_a_layer_above_its_own(package: str, forbidden: tuple[str, ...]) -> None:
    offenders = sorted(
        f"{path.relative_to(REPO)}: {name}"
        for name_, path in _modules(REPO / package).items()
        for name in _imports(name_, path)
        if name.split(".")[0] in forbidden
    )
    assert not offenders


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_has_an_import_cycle(package: str) -> None:
    assert cycles(import_graph(REPO / package)) == []


def test_the_runtime_imports_only_its_own_layer_and_those_below() -> None:
    graph = import_graph(REPO / "runtimes/spark/dbus_spark")
    assert upward_imports(graph, RUNTIME_LAYERS, "dbus_spark") == []


def test_each_layer_is_a_folder_of_the_runtime_that_says_what_it_holds() -> None:
    for layer in RUNTIME_LAYERS:
        package = REPO / "runtimes/spark/dbus_spark" / layer / "__init__.py"
        assert package.is_file(), layer
        assert ast.get_docstring(ast.parse(package.read_text(encoding="utf-8"))), layer


def _package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_a_cycle_is_found_through_imports_in_functions_and_for_type_checking(
    tmp_path: Path,
) -> None:
    package = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from .c import g\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
        "d.py": "from pkg.a import x\n",
    })  # fmt: skip
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_an_upward_import_and_a_module_without_a_layer_are_found(tmp_path: Path) -> None:
    package = _package(tmp_path, {
        "__init__.py": "",
        "bottom/__init__.py": "",
        "bottom/low.py": "def f():\n    from pkg.top.high import g\n",
        "top/__init__.py": "",
        "top/high.py": "from pkg.bottom import low\n",
        "stray.py": "",
    })  # fmt: skip
    assert upward_imports(import_graph(package), ("bottom", "top"), "pkg") == [
        "pkg.bottom.low (bottom) imports pkg.top.high (top)",
        "pkg.stray: in no layer's folder",
    ]
