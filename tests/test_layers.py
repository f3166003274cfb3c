"""Layers point one way: the SDK (framework/) imports neither the runtime, nor deploy/,
nor pyspark; the runtime does not import deploy/ (deploy/ may use both); no package
has an import cycle; and the runtime's modules import only from their own layer and
the layers below it (``RUNTIME_LAYERS``, docs/runtime.md "Layers").

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

RUNTIME_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # What the runtime is told: its configuration, its logging, Spark's JVM options.
    ("config", ("jvm", "logs", "secrets", "kafka_source", "config", "sinks.clusters")),
    # What it keeps and the values the layers above hand each other: the files beside
    # the checkpoint, history tasks, each deployment's pace, the records sinks take.
    ("state", (
        "checkpoint", "sinks.records", "sinks.activity", "sinks.kafka_reports",
        "history.records", "history.gate", "history.queries", "history.plans",
        "history.tasks", "history", "progress", "metrics.state", "metrics.reports",
        "metrics.live", "preview.window",
    )),
    # The function stage and what a Spark worker keeps between tasks.
    ("stage", ("shipment", "stage", "worker")),
    # Kafka and Elasticsearch, and the sink writer of a worker.
    ("sinks", ("sinks.kafka_admin", "sinks.kafka", "sinks.elasticsearch", "sinks", "writer")),
    # Reads on the executors: the stream, carried reads, history chunks, Kafka sources.
    ("reads", (
        "open_read_socket", "progress.shared_read", "open_read", "open_read_control",
        "range_read", "history.partitions", "progress.catchup", "kafka_read",
    )),
    # The driver's plan of each micro-batch, and the requests it takes.
    ("planning", ("history.requests", "source")),
    # One runtime as a member of a cluster.
    ("cluster", ("cluster",)),
    # What a running runtime shows of itself.
    ("observe", ("metrics.families", "metrics.runtime", "metrics")),
    # Spark: the session, the data sources it registers, the streaming query.
    ("spark", ("bytecode", "planners", "preflight", "datasources", "session", "job")),
    # What users and other programs call: the CLI, the HTTP API, the `dbus fn` commands.
    ("interfaces", (
        "settings", "api.token", "api.desk", "preview.service", "api.server", "api.client",
        "api", "api.runtime", "api.cluster", "history.target", "history.follow",
        "history.verify", "history.deadletters", "history.commands", "preview.commands",
        "progress.commands", "cli", "api.ui", "preview",
    )),
)


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


def upward_imports(
    graph: Mapping[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...], prefix: str
) -> list[str]:
    """Each import of a module from a layer above its own, and each module no layer
    names, as one line."""
    rank = {f"{prefix}{module}": i for i, (_, modules) in enumerate(layers) for module in modules}
    names = [layer for layer, _ in layers]
    root = prefix.rstrip(".")  # the package itself: an empty __init__
    problems = [
        f"{module}: in no layer of RUNTIME_LAYERS"
        for module in graph
        if module not in rank and module != root
    ]
    problems += [
        f"{module} ({names[rank[module]]}) imports {target} ({names[rank[target]]})"
        for module, targets in graph.items()
        for target in targets
        if module in rank and target in rank and rank[target] > rank[module]
    ]
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
    assert upward_imports(graph, RUNTIME_LAYERS, "dbus_spark.") == []


def test_every_layer_of_the_runtime_names_modules_that_exist() -> None:
    modules = set(import_graph(REPO / "runtimes/spark/dbus_spark"))
    named = [f"dbus_spark.{module}" for _, layer in RUNTIME_LAYERS for module in layer]
    assert sorted(set(named) - modules) == []
    assert len(named) == len(set(named))  # a module in one layer only


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
        "low.py": "def f():\n    from pkg.high import g\n",
        "high.py": "from pkg import low\n",
        "stray.py": "",
    })  # fmt: skip
    layers = (("bottom", ("low",)), ("top", ("high",)))
    assert upward_imports(import_graph(package), layers, "pkg.") == [
        "pkg.low (bottom) imports pkg.high (top)",
        "pkg.stray: in no layer of RUNTIME_LAYERS",
    ]
