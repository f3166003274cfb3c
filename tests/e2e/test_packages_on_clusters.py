"""Deployments' own packages beyond one local runtime, all real: in a cluster member that
ZooKeeper sends a deployment while it runs, ``old`` sees ``phonenumbers`` and ``six``
1.15.0 and ``new`` sees ``six`` 1.16.0 (``packages_support``). On a Spark standalone
cluster they are ``tests/e2e/test_standalone_cluster.py``'s (on the master and worker its
other test runs on), in a container worker ``tests/chaos/test_worker_container.py``'s."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from e2e_support import Scratch, member_env, spawn_cli_member, stop_cli_runtime
from packages_support import TwoDeployments
from support import runtime_api, wait_for

from dbus_fn.cli import cli
from dbus_spark.interfaces.api.client import call

pytestmark = pytest.mark.e2e


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
