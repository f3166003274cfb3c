"""Options backed by DBUS_* variables: one variable means the same for every command,
and an error about a value from a variable names the variable, not a flag."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dbus_fn.cli import cli

ORDERS = str(Path(__file__).resolve().parents[2] / "functions" / "orders")
NOWHERE = "mysql://u:p@127.0.0.1:1"


def refused(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.stderr


@pytest.mark.parametrize(
    "command",
    [["source", "tail"], ["source", "record"], ["fn", "run-local"], ["runtime", "start"]],
)
def test_every_command_that_reads_a_source_takes_dbus_from(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0
    assert "--from" in result.output
    assert "DBUS_FROM" in result.output


@pytest.mark.parametrize("command", [["source", "tail"], ["source", "record", "-o", "x.jsonl"]])
def test_a_bad_start_from_the_environment_names_the_variable(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    from_env = CliRunner().invoke(cli, [*command, NOWHERE], env={"DBUS_FROM": "banana"})
    message = refused(from_env)
    assert "DBUS_FROM (from the environment) 'banana' is not a place to start" in message
    assert "--from" not in message.split("is not a place")[0]
    typed = CliRunner().invoke(cli, [*command, NOWHERE, "--from", "banana"])
    assert "--from 'banana' is not a place to start" in refused(typed)
    assert not (tmp_path / "x.jsonl").exists()


def test_the_runtime_names_dbus_from_when_it_cannot_start_there() -> None:
    result = CliRunner().invoke(
        cli,
        ["runtime", "start", "--source", f"s={NOWHERE}", "--functions", ORDERS],
        env={"DBUS_FROM": "snapshot"},
    )
    message = refused(result)
    assert "DBUS_FROM (from the environment)" in message
    assert "'snapshot' is not one of 'earliest', 'latest'" in message


def test_a_cluster_from_the_environment_is_named_as_the_variable() -> None:
    result = CliRunner().invoke(
        cli, ["runtime", "start", "--source", f"s={NOWHERE}"], env={"DBUS_CLUSTER": "prod"}
    )
    message = refused(result)
    assert message.strip().startswith(
        "Error: DBUS_CLUSTER (from the environment) takes the sources and functions"
    )
    assert "drop --source " in message


@pytest.mark.parametrize(
    ("option", "value"),
    [("--trigger", "-1"), ("--for", "0"), ("--for", "-5"), ("--capacity", "0")],
)
def test_runtime_durations_and_shares_below_their_range_are_refused(
    option: str, value: str
) -> None:
    result = CliRunner().invoke(
        cli, ["runtime", "start", "--source", f"s={NOWHERE}", "--functions", ORDERS, option, value]
    )
    assert option in refused(result)


def test_help_names_the_files_dbus_writes() -> None:
    sources = CliRunner().invoke(cli, ["source", "--help"])
    assert "$DBUS_SOURCES_FILE" in sources.output
    assert "~/.config/dbus/sources.json" in sources.output
    runtime = CliRunner().invoke(cli, ["runtime", "start", "--help"])
    assert "DBUS_CHECKPOINT" in runtime.output
    assert "whatever the current folder" in " ".join(runtime.output.split())


def test_the_readme_installs_the_sdk_the_way_it_can_be_installed() -> None:
    from dbus_fn.cli._errors import dbus_fn_requirement

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (target,) = re.findall(r"^pip install (\S+)", readme, flags=re.MULTILINE)
    # No package index serves dbus-fn: the SDK installs from a clone, as this one was.
    assert target == "/path/to/dbus"
    assert Path(dbus_fn_requirement()).is_dir()
