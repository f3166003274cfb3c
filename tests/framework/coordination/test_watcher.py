"""A running runtime sees a deploy, a rollback and a delete within 10 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from coordination_support import change_code, make_function, set_version
from kazoo.client import KazooClient

from dbus_fn.coordination import ActiveSet, FunctionWatcher, ZooKeeperSettings
from dbus_fn.registry import load_deployment

pytestmark = pytest.mark.integration


def _next_change(watcher: FunctionWatcher, within: float = 10.0) -> tuple[ActiveSet, float]:
    """Poll as a runtime does at batch boundaries (every 50 ms here)."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        fresh = watcher.poll()
        if fresh is not None:
            return fresh, time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"no change seen within {within} s")


def _versions(active: ActiveSet) -> dict[str, str]:
    return {item.name: item.version for item in active}


def test_the_watcher_sees_deploy_rollback_and_delete(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    watcher = FunctionWatcher.connect(cluster, cache_dir=tmp_path / "runtime-cache")
    try:
        assert watcher.poll() is None, "an empty registry is no change"
        assert watcher.current == frozenset()

        folder = make_function(tmp_path / "fn")
        assert dbus("fn", "deploy", str(folder)).exit_code == 0
        active, _ = _next_change(watcher)
        assert _versions(active) == {"cfn_demo": "1.0.0"}
        (item,) = active
        assert item.path.parent == tmp_path / "runtime-cache"
        assert load_deployment(item.path).manifest.version == "1.0.0"

        set_version(folder, "2.0.0")
        change_code(folder, "two")
        assert dbus("fn", "deploy", str(folder)).exit_code == 0
        active, _ = _next_change(watcher)
        assert _versions(active) == {"cfn_demo": "2.0.0"}
        (item,) = active
        assert "# two" in (item.path / "cfn_demo.py").read_text()

        assert dbus("fn", "rollback", "cfn_demo", "--to", "1.0.0").exit_code == 0
        active, seen_after = _next_change(watcher)
        assert _versions(active) == {"cfn_demo": "1.0.0"}
        assert seen_after < 10

        assert dbus("fn", "delete", "cfn_demo").exit_code == 0
        active, _ = _next_change(watcher)
        assert active == frozenset()
        assert watcher.poll() is None
    finally:
        watcher.stop()


def test_changes_yields_the_current_set_then_each_change(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    assert dbus("fn", "deploy", str(folder)).exit_code == 0
    watcher = FunctionWatcher.connect(cluster, cache_dir=tmp_path / "cache")
    try:
        changes = watcher.changes(timeout=10)
        assert _versions(next(changes)) == {"cfn_demo": "1.0.0"}
        set_version(folder, "1.0.1")
        assert dbus("fn", "deploy", str(folder)).exit_code == 0
        assert _versions(next(changes)) == {"cfn_demo": "1.0.1"}
    finally:
        watcher.stop()


def test_a_watcher_for_a_missing_cluster(settings: ZooKeeperSettings) -> None:
    from dbus_fn.errors import ClusterNotFoundError

    with pytest.raises(ClusterNotFoundError, match="no cluster 'test'"):
        FunctionWatcher.connect(settings)


def test_a_damaged_bundle_does_not_stop_the_others(
    dbus: Any,
    cluster: ZooKeeperSettings,
    client: KazooClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert dbus("fn", "deploy", str(make_function(tmp_path / "one"))).exit_code == 0
    other = make_function(tmp_path / "two", "cfn_other")
    assert dbus("fn", "deploy", str(other)).exit_code == 0
    client.set(cluster.layout.bundle("cfn_other", "1.0.0"), b"not a zip")
    watcher = FunctionWatcher.connect(cluster, cache_dir=tmp_path / "cache")
    try:
        active = watcher.poll()
        assert active is not None
        assert _versions(active) == {"cfn_demo": "1.0.0"}
    finally:
        watcher.stop()
    assert "function cfn_other 1.0.0 is not loadable: not a valid bundle" in caplog.text
