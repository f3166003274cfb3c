"""Deployments' own packages beyond one local runtime, all real: on a Spark standalone
cluster (a master and a worker from pyspark; the executors are processes of the worker
with working folders of their own), and in a cluster member that ZooKeeper sends a
deployment while it runs. In each, ``old`` sees ``phonenumbers`` and ``six`` 1.15.0 and
``new`` sees ``six`` 1.16.0 (``packages_support``); the container worker is
``tests/chaos/test_worker_container.py``'s."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from e2e_support import (
    Scratch,
    member_env,
    spawn_cli_member,
    spawn_cli_runtime,
    stop_cli_runtime,
)
from packages_support import TwoDeployments
from support import runtime_api, wait_for
from test_standalone_cluster import cluster  # noqa: F401 (the master and worker, a fixture)

from dbus_deploy.spark import SparkClusterConfig
from dbus_fn.cli import cli
from dbus_spark.api.client import call

pytestmark = pytest.mark.e2e


def test_each_deployment_brings_its_packages_to_a_standalone_cluster(
    scratch: Scratch,
    cluster: SparkClusterConfig,  # noqa: F811
) -> None:
    two = TwoDeployments.of(scratch)
    checkpoint = scratch.tmp_path / "checkpoint"
    runtime = spawn_cli_runtime(scratch, two.old, str(checkpoint), "--functions", str(two.new),
                                "--master", cluster.master_url)  # fmt: skip
    try:
        runtime_api(checkpoint)
        two.write()
        two.assert_each_saw_its_own()
        # The executors ran on the worker, which unpacked each set in its own folder.
        assert list((cluster.role_dir("worker") / "work").glob("app-*/*/stderr"))
    finally:
        stop_cli_runtime(scratch, runtime)


def test_a_deployment_sent_to_a_running_member_brings_its_packages(
    scratch: Scratch, zk_root: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = member_env(scratch, zk_root, "packages", "PACKAGES_SHOP_DSN")
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    def dbus(*args: str) -> Any:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    two = TwoDeployments.of(scratch)
    for folder in (two.old, two.new):
        manifest = folder / "dbus.toml"
        manifest.write_text(manifest.read_text() + 'sources = ["shop"]\n')
    dbus("cluster", "init")
    table = f"{scratch.fresh_database.name}.people"
    dbus("cluster", "source", "add", "shop", "--dsn-env", "PACKAGES_SHOP_DSN", "--table", table)
    dbus("fn", "deploy", str(two.old))
    checkpoint = scratch.tmp_path / "checkpoint"
    runtime = spawn_cli_member(scratch, "packages", "rt-packages", checkpoint, env)
    try:
        url = runtime_api(checkpoint)
        dbus("fn", "deploy", str(two.new))  # while it runs: ZooKeeper sends it

        def runs_both() -> bool:
            _, deployments = call(url, "/api/v1/deployments", timeout=10)
            return {d["name"] for d in deployments} == {"old", "new"}

        wait_for(runs_both, 120, "the member to run the deployment sent while it ran")
        two.write()
        two.assert_each_saw_its_own()
    finally:
        stop_cli_runtime(scratch, runtime)
