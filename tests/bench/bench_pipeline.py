"""Pipeline overhead: 20-column row changes through filter + projection + route.

Run with ``python tests/bench/bench_pipeline.py [--events N] [--profile]``. It
prints events/s of ``Pipeline.process`` (with and without a time budget) and of
a bare Python loop calling the same three functions on the same changes, and
the ratio of the two. The goal is a ratio of at least 0.5: the framework may at
most double the cost of functions this trivial.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal
from types import ModuleType

import dbus_fn as fn
from dbus_fn.events import RowChange
from dbus_fn.pipeline import Pipeline
from dbus_fn.registry import LoadedDeployment, deployment_from_module
from dbus_fn.testing import insert

COLUMNS = 20


@fn.filter(tables="bench.rows")
def keep(event: fn.RowChange) -> bool:
    return event.after["c1"] >= 0  # type: ignore[index]


@fn.projection(tables="bench.rows")
def narrow(event: fn.RowChange) -> dict[str, object]:
    row = event.after
    assert row is not None
    return {"id": row["id"], "c1": row["c1"], "c2": row["c2"]}


@fn.route(tables="bench.rows")
def topic(event: fn.RowChange) -> str:
    return "kafka://bench"


def changes(count: int) -> list[RowChange]:
    def row(i: int) -> dict[str, object]:
        values: dict[str, object] = {"id": i}
        for c in range(1, COLUMNS):
            values[f"c{c}"] = i + c if c % 3 else (Decimal(c) if c % 2 else f"text-{c}")
        return values

    return [insert("bench.rows", row(i)) for i in range(count)]


def bare(data: list[RowChange]) -> int:
    """The same three functions, called by hand: the floor the pipeline is measured by."""
    out = []
    for change in data:
        if keep(change):
            payload = narrow(change)
            out.append((topic(change), change, payload))
    return len(out)


def through(pipeline: Pipeline) -> Callable[[list[RowChange]], int]:
    def run(data: list[RowChange]) -> int:
        process = pipeline.process
        delivered = 0
        for change in data:
            delivered += len(process(change).deliveries)
        return delivered

    return run


def best_rate(run: Callable[[list[RowChange]], int], data: list[RowChange], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        assert run(data) == len(data)
        best = min(best, time.perf_counter() - started)
    return len(data) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the pipeline run")
    options = parser.parse_args()

    module: ModuleType = sys.modules[__name__]
    budgeted = deployment_from_module(module, name="bench", default_route="kafka://bench")
    unbudgeted = LoadedDeployment(replace(budgeted.manifest, timeout=None), budgeted.functions)
    data = changes(options.events)

    bare_rate = best_rate(bare, data, options.rounds)
    with Pipeline(budgeted) as with_budget, Pipeline(unbudgeted) as without_budget:
        budget_rate = best_rate(through(with_budget), data, options.rounds)
        plain_rate = best_rate(through(without_budget), data, options.rounds)
        if options.profile:
            profiler = cProfile.Profile()
            profiler.runcall(through(with_budget), data)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(12)

    print(f"{options.events} changes of {COLUMNS} columns, best of {options.rounds} rounds")
    print(f"bare loop (filter, projection, route)  {bare_rate:>12,.0f} events/s")
    print(
        f"Pipeline.process, time budget on       {budget_rate:>12,.0f} events/s"
        f"   ratio {budget_rate / bare_rate:.2f}"
    )
    print(
        f"Pipeline.process, no time budget       {plain_rate:>12,.0f} events/s"
        f"   ratio {plain_rate / bare_rate:.2f}"
    )


if __name__ == "__main__":
    main()
