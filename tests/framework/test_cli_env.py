"""Options backed by DBUS_* variables: one variable means the same for every command,
and an error about a value from a variable names the variable, not a flag."""

from __future__ import annotations

import re
from collections.abc import Iterator
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


@pytest.mark.parametrize(
    "command",
    [
        ["cluster", "init"],
        ["cluster", "status"],
        ["fn", "list"],
        ["ui", "--api", "127.0.0.1:0", "--for", "1"],
        ["runtime", "start", "--api", "off", "--for", "1"],
    ],
    ids=lambda command: " ".join(command[:2]),
)
def test_an_empty_cluster_option_is_refused_while_an_empty_dbus_cluster_is_unset(
    command: list[str],
) -> None:
    from support import free_port

    # No ZooKeeper answers there: each ends at once with its one line and code.
    nowhere = ["--zookeeper", f"127.0.0.1:{free_port()}"]
    if command[0] != "runtime":
        nowhere += ["--zk-timeout", "0.5"]
    # Given empty, --cluster once meant the cluster "default" (or none), which
    # `cluster init` then created (issue #46).
    typed = CliRunner().invoke(cli, [*command, *nowhere, "--cluster", ""])
    assert refused(typed).strip().startswith("Error: --cluster '' is empty; give a cluster name")
    assert len(typed.stderr.strip().splitlines()) == 1, typed.output
    from_env = CliRunner().invoke(cli, [*command, *nowhere], env={"DBUS_CLUSTER": ""})
    assert "is empty" not in from_env.output
    assert len(from_env.stderr.strip().splitlines()) == 1, from_env.output


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
@pytest.mark.parametrize(
    "option", ["--trigger", "--open-read", "--detach-after", "--for", "--capacity",
               "--zk-session-timeout"],
)  # fmt: skip
def test_runtime_durations_and_shares_that_are_not_finite_are_refused_before_spark(
    option: str, value: str
) -> None:
    # nan passes every bound and inf every lower one: --trigger inf started Spark and
    # failed in it (issue #46).
    result = CliRunner().invoke(
        cli, ["runtime", "start", "--source", f"s={NOWHERE}", "--functions", ORDERS, option, value]
    )
    message = refused(result)
    assert option in message
    if value != "-inf":  # that one is below the range
        expected = f"Error: {option} {value!r} is not a finite number; give one such as 2.5"
        assert message.strip() == expected


def test_a_duration_that_is_not_finite_from_the_environment_names_the_variable() -> None:
    result = CliRunner().invoke(
        cli, ["runtime", "start", "--source", f"s={NOWHERE}", "--functions", ORDERS],
        env={"DBUS_DETACH_AFTER": "nan"},
    )  # fmt: skip
    assert refused(result).strip().startswith(
        "Error: DBUS_DETACH_AFTER (from the environment) 'nan' is not a finite number"
    )


@pytest.mark.parametrize(("args", "env"), [(["--decode-shards", "10000"], {}),
                                           ([], {"DBUS_DECODE_SHARDS": "65"})])  # fmt: skip
def test_decode_shards_over_their_bound_are_refused_with_its_reason(
    args: list[str], env: dict[str, str]
) -> None:
    result = CliRunner().invoke(
        cli, ["runtime", "start", "--source", f"s={NOWHERE}", "--functions", ORDERS, *args],
        env=env,
    )  # fmt: skip
    message = refused(result)
    assert len(message.strip().splitlines()) == 1
    assert (
        "is over 64, the most one source is read with: each shard is a replication "
        "connection of its own to the source; give at most 64"
    ) in message
    flag = "--decode-shards 10000" if args else "DBUS_DECODE_SHARDS (from the environment) 65"
    assert flag in message


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


@pytest.fixture
def signal_handlers() -> Iterator[None]:
    """`runtime start` installs its own SIGINT/SIGTERM handlers; give pytest its back."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


_START = ["runtime", "start", "--functions", ORDERS, "--for", "1"]


@pytest.mark.parametrize(
    ("command", "variable", "value", "says"),
    [
        ([*_START, "--api", "off"], "DBUS_SOURCES", "bogus",
         "DBUS_SOURCES (from the environment) 'bogus' is not NAME=DSN"),
        ([*_START, "--api", "off", "--source", f"s={NOWHERE}"], "DBUS_SPARK_MASTER", "bogus",
         "DBUS_SPARK_MASTER (from the environment) 'bogus' is not a Spark master URL"),
        ([*_START, "--source", f"s={NOWHERE}"], "DBUS_API", "bogus",
         "DBUS_API (from the environment): invalid API address 'bogus'"),
        (["runtime", "start", "--api", "off"], "DBUS_CLUSTER", "bad/name",
         "DBUS_CLUSTER (from the environment): invalid cluster 'bad/name'"),
        (["cluster", "status"], "DBUS_CLUSTER", "bad/name",
         "DBUS_CLUSTER (from the environment): invalid cluster 'bad/name'"),
        (["ui", "--for", "1"], "DBUS_UI", "bogus",
         "DBUS_UI (from the environment): invalid API address 'bogus'"),
    ],
    ids=["sources", "master", "api", "runtime-cluster", "cluster-status", "ui"],
)  # fmt: skip
def test_a_bad_value_from_a_variable_is_named_as_the_variable(
    command: list[str], variable: str, value: str, says: str, signal_handlers: None
) -> None:
    message = refused(CliRunner().invoke(cli, command, env={variable: value}))
    assert says in message
    assert len(message.strip().splitlines()) == 1


def test_a_bad_value_given_as_a_flag_still_names_the_flag(signal_handlers: None) -> None:
    result = CliRunner().invoke(
        cli, [*_START, "--api", "off", "--source", f"s={NOWHERE}", "--master", "bogus"]
    )
    assert "Error: --master 'bogus' is not a Spark master URL" in refused(result)


@pytest.mark.parametrize("moment", ["2030-01-01T00:00:00", "2020-01-01T00:00:00Z", "2026-11-25"])
@pytest.mark.parametrize("command", [["source", "tail", NOWHERE], ["run-local"]])
def test_a_time_given_as_from_is_refused_not_read_as_a_purged_file(
    command: list[str], moment: str
) -> None:
    if command == ["run-local"]:
        command = ["fn", "run-local", ORDERS, "--source", NOWHERE]
    message = refused(CliRunner().invoke(cli, [*command, "--from", moment]))
    assert f"--from {moment!r} is a time; reading a source starts at a position" in message
    assert "purged" not in message
