"""The services' home folder: DBUS_HOME, else the checkout's .dbus (or a place outside a
private checkout), else a per-user folder; decided in dbus_fn.home for every user of it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from dbus_fn.bundle import default_cache_dir
from dbus_fn.capture import sources_file
from dbus_fn.home import checkout, checkout_home, dbus_home

REPO = Path(__file__).resolve().parents[2]


def test_dbus_home_wins_and_a_blank_one_counts_as_unset(tmp_path: Path) -> None:
    assert dbus_home({"DBUS_HOME": str(tmp_path)}) == tmp_path
    assert dbus_home({"DBUS_HOME": "  "}) == dbus_home({})


def test_run_from_this_checkout_the_home_is_the_checkouts() -> None:
    assert checkout() == REPO
    assert dbus_home({}) == checkout_home(REPO)


def test_the_sources_file_and_the_bundle_cache_follow_dbus_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_HOME", str(tmp_path))
    monkeypatch.delenv("DBUS_SOURCES_FILE", raising=False)
    monkeypatch.delenv("DBUS_BUNDLE_CACHE", raising=False)
    assert sources_file() == dbus_home() / "sources.json"
    assert default_cache_dir() == dbus_home() / "bundles"
    monkeypatch.delenv("DBUS_HOME")
    assert sources_file() == Path.home() / ".config" / "dbus" / "sources.json"
    assert default_cache_dir() == Path.home() / ".cache" / "dbus" / "bundles"


def test_a_checkout_another_user_cannot_reach_keeps_its_state_in_var_tmp(tmp_path: Path) -> None:
    private = tmp_path / "private"
    repo = private / "repo"
    repo.mkdir(parents=True)
    private.chmod(0o700)
    home = checkout_home(repo)
    assert home.parent == Path("/var/tmp")
    assert home == checkout_home(repo)  # the same place every time
    assert checkout_home(Path("/work/elsewhere/repo")) != home


@pytest.mark.parametrize("mode", [0o755, 0o700], ids=["shared-folder", "private-folder"])
def test_a_checkout_the_services_user_cannot_reach_keeps_its_state_outside(mode: int) -> None:
    # Under /var/tmp, whose parents every user may traverse; only `outer` differs.
    outer = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="dbus-test-"))
    try:
        outer.chmod(mode)
        repo = outer / "clone"
        repo.mkdir()
        home = checkout_home(repo)
        if mode == 0o755:
            assert home == repo / ".dbus"
        else:
            assert home.parent == Path("/var/tmp")
            assert home.name.startswith("dbus-")
            assert not home.is_relative_to(outer)
            assert checkout_home(repo) == home  # the same place every time
            assert checkout_home(outer / "another") != home
    finally:
        shutil.rmtree(outer)
