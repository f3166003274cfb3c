"""Batch reports: what the writer's ``commit()`` counted, handed to the driver.

Spark runs the sink's ``commit()`` in a Python process of its own, not the one
that serves the metrics. When metrics are on, the sink is given a folder
(``<checkpoint>.reports``); ``commit()`` writes the batch's counters (those of the
batch log line) there as ``<batch>.json`` before Spark records the batch, and the
driver takes the file when Spark reports the batch's progress. Nothing is counted
twice: the log line and the metrics are the same numbers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dbus_fn.files import replace_file


def write_report(folder: str | Path, batch: int, report: dict[str, Any]) -> None:
    """Leave ``report`` for the driver (replaced atomically: it never reads half)."""
    replace_file(Path(folder) / f"{batch}.json", json.dumps(report), parents=True)


def take_report(folder: str | Path, batch: int) -> dict[str, Any] | None:
    """The report of ``batch``, removed with any older one nobody took (a batch the
    driver saw no progress of: the runtime was stopped between the two)."""
    folder = Path(folder)
    found = None
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return None
    for name in names:
        stem = name.removesuffix(".json")
        if not stem.isdigit() or int(stem) > batch:
            continue
        path = folder / name
        if int(stem) == batch:
            try:
                found = json.loads(path.read_text())
            except (OSError, ValueError):
                found = None
        path.unlink(missing_ok=True)
    return found
