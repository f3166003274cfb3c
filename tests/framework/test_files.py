"""``replace_file``: the whole new text or the old one, never a half, and no leftovers."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from dbus_fn import files
from dbus_fn.files import replace_file


def test_the_new_text_replaces_the_old_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.json"
    replace_file(path, '{"a": 1}', mode=0o600, parents=True)
    replace_file(path, '{"a": 2}', mode=0o600)
    assert path.read_text() == '{"a": 2}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]


def test_a_failed_write_keeps_the_old_text_and_leaves_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.json"
    replace_file(path, "old")

    def full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(OSError, match="No space left"):
        replace_file(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_missing_folder_is_an_error_unless_parents(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        replace_file(tmp_path / "absent" / "state.json", "x")
