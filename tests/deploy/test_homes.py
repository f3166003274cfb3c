"""Homes of deleted checkouts are removed by ``up``; nothing else is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dbus_deploy.services._homes import tidy_homes
from dbus_fn.home import CHECKOUT_MARK, checkout, forgotten_homes, mark_checkout

REPO = checkout()


def _home(root: Path, name: str, serves: Path | None) -> Path:
    home = root / name
    (home / "kafka").mkdir(parents=True)
    (home / "kafka" / "server.log").write_text("state\n")
    if serves is not None:
        mark_checkout(home, serves)
    return home


def test_only_marked_homes_whose_checkout_is_gone_are_forgotten(tmp_path: Path) -> None:
    assert REPO is not None
    gone = _home(tmp_path, "dbus-0123456789ab", tmp_path / "deleted-clone")
    alive = _home(tmp_path, "dbus-ba9876543210", REPO)
    unmarked = _home(tmp_path, "dbus-aaaaaaaaaaaa", None)
    other_name = _home(tmp_path, "dbus-test-x", tmp_path / "deleted-clone")
    not_a_checkout = _home(tmp_path, "dbus-bbbbbbbbbbbb", tmp_path)  # no dbus-fn pyproject
    assert forgotten_homes(tmp_path) == [gone, not_a_checkout]
    assert {unmarked, alive, other_name}.isdisjoint(forgotten_homes(tmp_path))
    assert (alive / CHECKOUT_MARK).read_text() == str(REPO)


def test_up_removes_forgotten_homes_but_not_one_a_process_runs_from(tmp_path: Path) -> None:
    gone = _home(tmp_path, "dbus-0123456789ab", tmp_path / "deleted-clone")
    busy = _home(tmp_path, "dbus-cccccccccccc", tmp_path / "another-deleted-clone")
    mine = tmp_path / "dbus-dddddddddddd"
    said: list[str] = []
    # A service started from a clone deleted under it still runs from its home.
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(60)", str(busy / "kafka")]
    )
    try:
        removed = tidy_homes(mine, said.append, root=tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert removed == [gone]
    assert not gone.exists()
    assert (busy / "kafka" / "server.log").read_text() == "state\n"
    assert said == [f"removed {gone}: the services' home of a deleted checkout"]
    # This checkout's own home is marked as its own, so it is never forgotten.
    assert (mine / CHECKOUT_MARK).read_text() == str(REPO)
    assert forgotten_homes(tmp_path) == [busy]
