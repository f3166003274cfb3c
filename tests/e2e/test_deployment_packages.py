"""Deployments that bring their own packages (``requirements.txt``), on a local runtime:
one imports ``phonenumbers``, which the runtime does not have, and two pin two
versions of ``six``; each function sees its own, in one runtime. The driver resolves
each set once and Spark serves it to the executors (``dbus_spark.stage.shipment``)."""

from __future__ import annotations

import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from packages_support import TwoDeployments
from support import runtime_api

pytestmark = pytest.mark.e2e


def test_each_deployment_runs_with_its_own_packages_in_one_runtime(scratch: Scratch) -> None:
    two = TwoDeployments.of(scratch)
    checkpoint = scratch.tmp_path / "checkpoint"
    runtime = spawn_cli_runtime(scratch, two.old, str(checkpoint), "--functions", str(two.new))
    try:
        runtime_api(checkpoint)
        two.write()
        two.assert_each_saw_its_own()
    finally:
        stop_cli_runtime(scratch, runtime)
