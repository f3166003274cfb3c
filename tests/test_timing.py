"""The suite's own time keeping: the report, the cost table, the order files are handed out in."""

from __future__ import annotations

import json
from pathlib import Path

import timing


def _record(path: Path, *lines: dict[str, object]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_report_names_each_pass_and_the_slowest_tests(tmp_path: Path) -> None:
    times = tmp_path / "times.jsonl"
    _record(
        times,
        {"test": "tests/a.py::one", "pass": "unit", "seconds": 1.5, "outcome": "passed"},
        {"test": "tests/b.py::two", "pass": "unit", "seconds": 90.0, "outcome": "passed"},
        {"pass": "unit", "began": 1000.0, "ended": 1125.0, "tests": 2, "exit": 0},
        {"test": "tests/c.py::three", "pass": "exclusive", "seconds": 30.0, "outcome": "failed"},
        {"pass": "exclusive", "began": 1130.0, "ended": 1190.0, "tests": 1, "exit": 1},
    )
    text = timing.report(times, slowest=2, began=900.0)
    assert "install and set-up before the first pass" in text and " 1:40" in text
    assert "unit (2 tests, exit 0)" in text and " 2:05" in text
    assert "exclusive (1 tests, exit 1)" in text and " 1:00" in text
    assert "whole run" in text and " 4:50" in text
    slowest = text.split("slowest tests", 1)[1]
    assert slowest.index("tests/b.py::two") < slowest.index("tests/c.py::three")
    assert "tests/a.py::one" not in slowest


def test_measured_costs_add_up_per_file_and_merge_into_the_table(tmp_path: Path) -> None:
    times, table = tmp_path / "times.jsonl", tmp_path / "costs.json"
    _record(
        times,
        {"test": "tests/a.py::one", "pass": "p", "seconds": 1.25, "outcome": "passed"},
        {"test": "tests/a.py::two[x]", "pass": "p", "seconds": 2.0, "outcome": "passed"},
        {"pass": "p", "began": 0.0, "ended": 4.0, "tests": 2, "exit": 0},
    )
    table.write_text(json.dumps({"tests/a.py": 100.0, "tests/z.py": 7.0}))
    assert timing.main([str(times), "--costs", str(table)]) == 0
    assert timing.load_costs(table) == {"tests/a.py": 3.2, "tests/z.py": 7.0}


def test_files_are_handed_out_longest_first_and_unknown_ones_in_the_middle() -> None:
    units = {
        "tests/short.py": ["tests/short.py::s"],
        "tests/new.py": ["tests/new.py::n"],
        "tests/long.py": ["tests/long.py::l", "tests/long.py::m[1]"],
    }
    costs = {"tests/short.py": 2.0, "tests/long.py": 300.0}
    assert list(timing.longest_first(units, costs)) == [
        "tests/long.py", "tests/new.py", "tests/short.py"
    ]  # fmt: skip


def test_the_chaos_and_docker_files_are_one_unit_costing_all_of_them() -> None:
    tests = ["tests/chaos/test_a.py::one", "tests/chaos/test_b.py::two",
             "tests/deploy/test_image.py::i", "tests/deploy/test_compose.py::c",
             "tests/deploy/test_images.py::x", "tests/e2e/test_c.py::x"]  # fmt: skip
    units = [timing.work_unit(t) for t in tests]
    assert units == [timing.LANE] * 4 + ["tests/deploy/test_images.py", "tests/e2e/test_c.py"]
    costs = {"tests/chaos/test_a.py": 100.0, "tests/chaos/test_b.py": 50.0,
             "tests/deploy/test_image.py": 20.0}  # fmt: skip
    assert timing.unit_cost(tests[:4], costs) == 170.0 + timing.UNKNOWN_FILE_SECONDS


def test_the_committed_cost_table_names_only_files_that_exist() -> None:
    root = Path(timing.__file__).resolve().parents[1]
    missing = [name for name in timing.load_costs() if not (root / name).exists()]
    assert missing == []
