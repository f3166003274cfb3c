"""Writing throwaway function modules for the SDK's tests."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path
from types import ModuleType

from dbus_fn.registry import load_module

_names = itertools.count()


def write_module(folder: Path, source: str, *, stem: str | None = None) -> Path:
    """Write ``source`` to a uniquely named module file in ``folder``."""
    name = stem or f"fns_{next(_names)}_{folder.name.replace('-', '_')}"
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def make_module(folder: Path, source: str) -> ModuleType:
    """Write and import a function module."""
    return load_module(write_module(folder, source))


HEADER = "import dbus_fn as fn\nfrom dbus_fn import RowChange\n"
