"""The integration passes' runner (``tests/passes.py``): the low-weight cgroup it puts
the parallel pass in, the port ranges it splits, and its fallback where no cgroup can
be made."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import passes
import pytest
from support import port_range


def _cgroup_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    raise AssertionError(f"process {pid} is in no cpu cgroup")


def test_a_process_tree_joins_the_low_weight_group_and_leaves_it_on_close() -> None:
    group = passes.LowWeight.make()
    if group is None:
        pytest.skip("no cpu cgroup can be made here (needs root and cgroup v1's cpu controller)")
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
         "'import time; time.sleep(30)']); time.sleep(30)"],
    )  # fmt: skip
    try:
        time.sleep(1)  # the grandchild starts
        import psutil

        [child] = psutil.Process(parent.pid).children()
        before = _cgroup_of(parent.pid)
        group.join_tree(parent.pid)
        assert (group.path / "cpu.shares").read_text().strip() == str(passes.SHARES)
        inside = f"/{group.path.name}"
        assert _cgroup_of(parent.pid).endswith(inside) and _cgroup_of(child.pid).endswith(inside)
        group.close()
        assert not group.path.exists()
        assert _cgroup_of(parent.pid) == _cgroup_of(child.pid) == before
    finally:
        parent.kill()
        parent.wait()
        if group.path.exists():
            group.close()


def test_each_pass_hands_out_ports_of_its_own() -> None:
    assert port_range({"DBUS_TEST_PORTS": "20000-29000"}) == (20000, 29000)
    low, high = port_range({})
    assert low == 20000 and high > passes.SPLIT_PORT


def test_without_a_cgroup_the_passes_run_one_after_the_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(passes.LowWeight, "make", classmethod(lambda cls: None))
    monkeypatch.setattr(subprocess, "call", lambda command: ran.append(command) or 0)
    assert passes.main(["2", "--", "-k", "x"]) == 0
    assert "no cpu cgroup can be made here" in capsys.readouterr().out
    [parallel, exclusive] = ran
    assert parallel[3:5] == ["-m", passes.PARALLEL] and exclusive[3:5] == ["-m", passes.EXCLUSIVE]
    assert parallel[5:] == ["--pass-name", "parallel", "-n", "2", "--dist", "loadfile", "-k", "x"]
    assert exclusive[5:] == ["--pass-name", "exclusive", "-k", "x"]
