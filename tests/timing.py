"""Where the suite's time goes: each pass's wall time and each test's, recorded as it
runs, reported at the end of `deploy/dev test`, and fed back to balance the parallel pass.

A pytest plugin (registered by ``tests/conftest.py``) and a command:

- ``pytest --pass-name NAME`` appends one JSON line per test (its setup, call and
  teardown summed) and one per pass (its wall time) to the file ``DBUS_TEST_TIMES``
  names, when it names one. Under xdist only the controller writes.
- Under ``--dist loadfile`` the files go to the workers longest first, by the
  measured seconds in ``tests/file_costs.json``, and a worker is given its next file
  only when it is about to run its last test: heavy files start early instead of
  queueing behind each other at the end of the pass. The files ``ONE_LANE`` names
  (the chaos tests, and the tests of the one Docker engine) go as one unit: one
  worker runs them one after another, never two of them side by side.
- ``python tests/timing.py TIMES [--slowest 25] [--costs tests/file_costs.json]``
  prints the passes and the slowest tests, and with ``--costs`` writes the measured
  seconds of each file back to the table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TIMES_VARIABLE = "DBUS_TEST_TIMES"
COSTS = Path(__file__).with_name("file_costs.json")
UNKNOWN_FILE_SECONDS = 30.0
"""What a file missing from the cost table is taken to cost: about the median of the
integration files, so a new file is neither first nor last."""


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_costs(path: Path = COSTS) -> dict[str, float]:
    """file -> measured seconds (empty when there is no table)."""
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except FileNotFoundError:
        return {}


class TimeRecorder:
    """The plugin: records each test's and the pass's wall time (controller side)."""

    def __init__(self, config: Any) -> None:
        self.path = Path(os.environ[TIMES_VARIABLE])
        self.name = config.getoption("pass_name") or "pytest"
        self.tests: dict[str, float] = defaultdict(float)
        self.outcomes: dict[str, str] = {}
        self.started = time.time()

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.tests[report.nodeid] += report.duration
        if report.failed or report.when == "call" or report.nodeid not in self.outcomes:
            self.outcomes[report.nodeid] = "failed" if report.failed else report.outcome

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            for nodeid, seconds in self.tests.items():
                line = {"test": nodeid, "pass": self.name, "seconds": round(seconds, 3),
                        "outcome": self.outcomes.get(nodeid, "")}  # fmt: skip
                out.write(json.dumps(line) + "\n")
            summary = {"pass": self.name, "began": self.started, "ended": time.time(),
                       "tests": len(self.tests), "exit": int(exitstatus)}  # fmt: skip
            out.write(json.dumps(summary) + "\n")


ONE_LANE = ("tests/chaos/", "tests/deploy/test_compose.py", "tests/deploy/test_image.py")
"""Files (or folders) that run one after another on one worker, beside the other files
on the others. A chaos test runs Spark runtimes under load and restarts them again and
again, and each start is CPU: two side by side more than double each other (measured on
2 cores: the kill -9 convergence test took 1,001 s beside another chaos test, 313 s beside
lighter files). The Docker tests (``chaos/test_worker_container.py`` among them) build,
tag and remove images and run Spark in containers on the one Docker engine: never two
at a time, and never beside a chaos test's restarts."""

LANE = "the one lane"
"""The work unit every file of ``ONE_LANE`` is handed out with."""


def work_unit(nodeid: str) -> str:
    """What a test is handed out with: the one lane, or else its file."""
    path = _file_of(nodeid)
    return LANE if path.startswith(ONE_LANE) else path


def unit_cost(tests: Iterable[str], costs: dict[str, float]) -> float:
    """Measured seconds of the files these tests are in."""
    return sum(costs.get(path, UNKNOWN_FILE_SECONDS) for path in {_file_of(t) for t in tests})


def longest_first(units: dict[str, Any], costs: dict[str, float]) -> OrderedDict[str, Any]:
    """``units`` (unit -> its tests) ordered by measured cost, longest first."""
    return OrderedDict(sorted(units.items(), key=lambda unit: -unit_cost(unit[1], costs)))


def make_cost_scheduler(config: Any, log: Any) -> Any:
    """A ``--dist loadfile`` scheduler that hands out files (or lanes) longest first."""
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):  # type: ignore[misc]
        costs = load_costs()
        ranked = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # The base class fills the queue (ordered by test count) and then hands out
            # the first units: the first hand-out is where to order it by cost instead.
            if not self.ranked:
                self.ranked = True
                self.workqueue = longest_first(self.workqueue, self.costs)
            super()._assign_work_unit(node)

        def _reschedule(self, node: Any) -> None:
            # The base class tops a worker up while it has two tests left; a worker
            # runs a test only once it knows the next one, so one left is the moment.
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LongestFirst(config, log)


def _lines(path: Path) -> Iterable[dict[str, Any]]:
    for raw in path.read_text(encoding="utf-8").splitlines():
        if raw.strip():
            yield json.loads(raw)


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def report(path: Path, slowest: int, began: float | None) -> str:
    """The passes (wall time, tests, exit status) and the ``slowest`` tests."""
    lines = list(_lines(path))
    passes = [line for line in lines if "began" in line]
    tests = [line for line in lines if "test" in line]
    out = ["", "where the time went:"]

    def row(label: str, seconds: float) -> None:
        out.append(f"  {label:<44} {_clock(seconds):>7}")

    if began is not None and passes:
        row("install and set-up before the first pass", passes[0]["began"] - began)
    for done in passes:
        row(f"{done['pass']} ({done['tests']} tests, exit {done['exit']})",
            done["ended"] - done["began"])  # fmt: skip
    if began is not None and passes:
        row("whole run", passes[-1]["ended"] - began)
    out.append(f"the {min(slowest, len(tests))} slowest tests (setup + call + teardown):")
    for test in sorted(tests, key=lambda t: -t["seconds"])[:slowest]:
        out.append(f"  {test['seconds']:8.1f} s  {test['test']}  [{test['pass']}]")
    return "\n".join(out)


def file_costs(path: Path) -> dict[str, float]:
    """file -> seconds its tests took in the recorded run."""
    costs: dict[str, float] = defaultdict(float)
    for line in _lines(path):
        if "test" in line:
            costs[_file_of(line["test"])] += line["seconds"]
    return dict(costs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("times", type=Path, help=f"the file {TIMES_VARIABLE} named")
    parser.add_argument("--slowest", type=int, default=25)
    parser.add_argument("--began", type=float, help="when the run began (epoch seconds)")
    parser.add_argument("--costs", type=Path, help="write each file's measured seconds here")
    args = parser.parse_args(argv)
    if not args.times.exists():
        print(f"no test times recorded ({args.times} is missing)")
        return 0
    print(report(args.times, args.slowest, args.began))
    if args.costs:
        merged = {**load_costs(args.costs), **file_costs(args.times)}
        args.costs.write_text(
            json.dumps({k: round(v, 1) for k, v in sorted(merged.items())}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
