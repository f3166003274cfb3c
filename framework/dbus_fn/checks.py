"""Warnings about a deployment that loads but may not do what its author meant.

``dbus fn validate`` prints them; none stops a deployment. Each names the place
and what to change.
"""

from __future__ import annotations

import ast
from pathlib import Path

from dbus_fn.registry import LoadedDeployment

__all__ = ["deployment_warnings"]


def deployment_warnings(deployment: LoadedDeployment) -> list[str]:
    """What looks wrong in ``deployment``, one line each (empty: nothing)."""
    manifest = deployment.manifest
    warnings: list[str] = []
    routed = manifest.default_route is not None or any(
        f.kind == "route" for f in deployment.functions
    )
    if not deployment.functions:
        warnings.append(
            f"{manifest.module} defines no functions: every change goes to "
            f"{manifest.default_route} unchanged; decorate a function with @fn.filter, "
            "@fn.projection or @fn.route"
            if routed
            else f"{manifest.module} defines no functions and dbus.toml no default_route: "
            "nothing is delivered; add an @fn.route or default_route = \"kafka://topic\""
        )
    elif not routed:
        warnings.append(
            "no route function and no default_route in dbus.toml: every change that passes "
            'the filters goes nowhere; add default_route = "kafka://topic" or an @fn.route'
        )
    warnings += _redefined(deployment)
    return warnings


def _redefined(deployment: LoadedDeployment) -> list[str]:
    """Top-level functions defined twice under one name: only the last one counts."""
    file = getattr(deployment.module, "__file__", None)
    if not file or not file.endswith(".py"):
        return []
    tree = ast.parse(Path(file).read_text(encoding="utf-8"), filename=file)
    lines: dict[str, list[int]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines.setdefault(node.name, []).append(node.lineno)
    return [
        f"{Path(file).name}: {name} is defined {len(found)} times (lines "
        f"{', '.join(map(str, found))}); only the last one runs: rename the others"
        for name, found in sorted(lines.items())
        if len(found) > 1
    ]
