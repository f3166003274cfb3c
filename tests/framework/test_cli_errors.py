"""The line for a missing extra says how to install it from where this dbus-fn came."""

from __future__ import annotations

from pathlib import Path

from dbus_fn.cli._errors import dbus_fn_requirement, missing_extra

REPO = Path(__file__).resolve().parents[2]


def test_running_from_a_checkout_the_requirement_is_the_checkout() -> None:
    assert dbus_fn_requirement() == str(REPO)


def test_a_missing_extra_names_it_and_a_command_that_installs_it() -> None:
    error = missing_extra("dbus source", "pymysql.cursors")
    assert error is not None
    assert error.message == (
        "`dbus source` needs the capture extra (pymysql is missing); "
        f"install it with: pip install '{REPO}[capture]'"
    )
    assert missing_extra("dbus source", "dbus_fn.capture") is None
    assert missing_extra("dbus source", "no_such_module") is None
