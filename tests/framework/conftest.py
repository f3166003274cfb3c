"""Fixtures of the SDK's tests."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from dbus_fn import _native
from dbus_fn.capture._native import SWITCH as DECODE_SWITCH
from dbus_fn.row_json import NATIVE_SWITCH as ENCODE_SWITCH


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``dbus_native`` with every native switch on; the test is skipped only where no
    Rust toolchain could build it (then the Python code does all its work)."""
    for switch in (DECODE_SWITCH, ENCODE_SWITCH):
        monkeypatch.delenv(switch, raising=False)
    if _native.module is None:
        assert shutil.which("cargo") is None, "cargo is on PATH but dbus_native is not built"
        pytest.skip("no Rust toolchain on this machine: the Python code does the native work")
    return _native.module
