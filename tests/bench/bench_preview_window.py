"""What the runtime's preview window costs the function stage.

Run with ``python tests/bench/bench_preview_window.py [--changes N] [--task N]
[--rounds N]``. It sends 20-column row changes of one table through a
``FunctionStage`` (filter + projection + route, the Kafka records encoded as the
runtime does) in tasks of ``--task`` changes, each task ending with its report
encoded (``StageCounts.to_bytes``), once with the window off and once keeping 100
changes per table, alternating, and prints changes/s of each (best of the rounds)
and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_pipeline import changes

from dbus_fn.events import RowChange
from dbus_spark.config.runtime import deployment_folders
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage

MODULE = """
import dbus_fn as fn


@fn.filter(tables="bench.rows")
def keep(event):
    return event.after["c1"] >= 0


@fn.projection(tables="bench.rows")
def narrow(event):
    row = event.after
    return {"id": row["id"], "c1": row["c1"], "c2": row["c2"]}


@fn.route(tables="bench.rows")
def topic(event):
    return "kafka://bench"
"""


def _folder(base: Path) -> str:
    folder = base / "bench_window_fn"
    folder.mkdir()
    (folder / "bench_window_fn.py").write_text(textwrap.dedent(MODULE))
    (folder / "dbus.toml").write_text(
        'name = "bench_window_fn"\nversion = "1.0.0"\nmodule = "bench_window_fn.py"\n'
        'tables = ["bench.rows"]\n'
    )
    return str(folder)


def run(stage: FunctionStage, data: list[RowChange], task: int) -> float:
    """Seconds to process ``data`` in tasks of ``task`` changes, reports included."""
    began = time.perf_counter()
    for start in range(0, len(data), task):
        counts = StageCounts()
        for change in data[start : start + task]:
            for _ in stage.process(change, counts):
                pass
        counts.to_bytes()
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--task", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    data = changes(args.changes)
    with tempfile.TemporaryDirectory() as base:
        deployed = deployment_folders((_folder(Path(base)),))
        stages = {
            "window off": FunctionStage(deployed, type_prefix="io.dbus", window=0),
            "window 100": FunctionStage(deployed, type_prefix="io.dbus", window=100),
        }
        best = {name: float("inf") for name in stages}
        for _ in range(args.rounds):
            for name, stage in stages.items():
                best[name] = min(best[name], run(stage, data, args.task))
    rates = {name: args.changes / seconds for name, seconds in best.items()}
    for name, rate in rates.items():
        print(f"{name}: {rate:,.0f} changes/s ({args.changes:,} changes, tasks of {args.task:,})")
    print(f"window 100 / window off: {rates['window 100'] / rates['window off']:.3f}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
