"""Layers point one way: the SDK (framework/) imports neither the runtime nor deploy/,
and the runtime does not import deploy/ (deploy/ may use both)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("framework/dbus_fn", ("dbus_spark", "dbus_deploy")),
        ("runtimes/spark/dbus_spark", ("dbus_deploy",)),
    ],
)
def test_no_module_imports_a_layer_above_its_own(package: str, forbidden: tuple[str, ...]) -> None:
    offenders = sorted(
        f"{path.relative_to(REPO)}: {name}"
        for path in (REPO / package).rglob("*.py")
        for name in _imported(ast.parse(path.read_text(encoding="utf-8")))
        if name.split(".")[0] in forbidden
    )
    assert not offenders
