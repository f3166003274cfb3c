"""The native row decoder's install step: built once per version of its sources, and
one warning line (the Python decoder then reads) where no cargo can build it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dbus_deploy import native


def test_without_cargo_the_install_says_so_in_one_line_and_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    message = native.ensure_native(tmp_path / "home")
    assert message.startswith("warning: no cargo on PATH")
    assert "decodes in Python" in message and "\n" not in message
    assert not list((tmp_path / "home").glob("native/wheels/*/*.whl"))


def test_a_change_to_the_crate_s_sources_makes_its_wheel_stale(tmp_path: Path) -> None:
    crate = tmp_path / "native"
    shutil.copytree(native.CRATE, crate, ignore=shutil.ignore_patterns("target"))
    before = native.crate_version(crate)
    assert native.crate_version(crate) == before
    source = crate / "src" / "lib.rs"
    source.write_text(source.read_text() + "\n// changed\n")
    assert native.crate_version(crate) != before
