"""The SDK never imports the runtime: commands that need it (`dbus runtime`, `dbus fn
backfill` ...) come through entry points, and without the runtime's extras `--help`
still works and using one of them says which extra to install. (That no module of the
SDK names the runtime in an import is tests/test_layers.py's.)"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dbus_fn.cli._errors import EXTRA_OF_MODULE

REPO = Path(__file__).resolve().parents[2]
HISTORY_COMMANDS = ("backfill", "deadletters", "redrive", "replay", "verify")


def _python(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


def test_the_sdk_imports_with_the_runtime_unimportable() -> None:
    result = _python(
        """
        import importlib, pkgutil, sys
        sys.modules["dbus_spark"] = sys.modules["dbus_deploy"] = None  # import fails
        import dbus_fn, dbus_fn.cli
        for module in pkgutil.walk_packages(dbus_fn.__path__, "dbus_fn."):
            importlib.import_module(module.name)
        print("imported")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"


# The SDK installed without the runtime's extras: their third-party modules are missing.
_MISSING = sorted({*EXTRA_OF_MODULE, "rich", "fastapi", "uvicorn", "prometheus_client"})
_WITHOUT_EXTRAS = """
    import importlib.abc, sys

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in MISSING:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Missing())
    from dbus_fn.cli import main
    assert "dbus_spark" not in sys.modules, "importing the CLI imported the runtime"
    sys.argv[1:] = ARGS
    main()
"""


def _without_extras(*args: str) -> subprocess.CompletedProcess[str]:
    script = _WITHOUT_EXTRAS.replace("ARGS", repr(list(args)))
    return _python(f"MISSING = {_MISSING!r}\n" + textwrap.dedent(script))


def test_fn_help_lists_the_history_commands_without_the_runtime_extra() -> None:
    result = _without_extras("fn", "--help")
    assert result.returncode == 0, result.stderr
    listed = dict(
        line.split(None, 1) for line in result.stdout.split("Commands:")[1].strip().splitlines()
    )
    for command in HISTORY_COMMANDS:
        assert listed[command].startswith("(unavailable: "), result.stdout
    assert "Run the deployment's functions" in listed["run-local"]  # the SDK's own, as ever


@pytest.mark.parametrize("command", HISTORY_COMMANDS)
def test_a_history_command_without_the_runtime_extra_says_what_to_install(
    command: str,
) -> None:
    result = _without_extras("fn", command, "orders")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.fullmatch(
        rf"Error: `dbus fn {command}` needs the (capture|coordination|runtime) extra "
        rf"\(\w+ is missing\); install it with: pip install '.+\[\w+\]'",
        lines[0],
    ), lines[0]
