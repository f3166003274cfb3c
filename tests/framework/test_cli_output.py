"""Files the CLI writes (``-o``): never emptied by a failed run, never overwritten unasked."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dbus_fn.cli import cli

UNREACHABLE = "mysql://dbus:dbus@127.0.0.1:1"
"""A source DSN nothing listens on: the recording fails before its first event."""

KEPT = b'{"a recording": "the user made earlier"}\n'


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path / "sources.json"))
    return CliRunner()


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "recording.jsonl"
    path.write_bytes(KEPT)
    return path


def one_line_error(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def left_behind(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


@pytest.mark.parametrize(
    ("extra", "code", "says"),
    [
        (["--from", "banana"], 2, "banana"),
        ([], 3, "127.0.0.1:1"),
    ],
    ids=["bad-position", "unreachable-source"],
)
def test_a_failed_recording_leaves_the_existing_file_as_it_was(
    runner: CliRunner, recording: Path, extra: list[str], code: int, says: str
) -> None:
    for mode in ("--force", "--append"):
        result = runner.invoke(
            cli, ["source", "record", UNREACHABLE, "-o", str(recording), mode, *extra]
        )
        assert says in one_line_error(result, code)
        assert recording.read_bytes() == KEPT
        assert left_behind(recording.parent) == []


def test_an_existing_file_is_not_replaced_without_force(
    runner: CliRunner, recording: Path
) -> None:
    result = runner.invoke(cli, ["source", "record", UNREACHABLE, "-o", str(recording)])
    line = one_line_error(result, 2)
    assert "already exists" in line
    assert "--force" in line
    assert "--append" in line
    assert recording.read_bytes() == KEPT


def test_force_and_append_together_are_refused(runner: CliRunner, recording: Path) -> None:
    result = runner.invoke(
        cli, ["source", "record", UNREACHABLE, "-o", str(recording), "--force", "--append"]
    )
    assert "exclude each other" in one_line_error(result, 2)
    assert recording.read_bytes() == KEPT


@pytest.mark.parametrize("command", ["record", "run-local"])
def test_output_into_a_missing_folder_is_one_line_naming_the_folder(
    runner: CliRunner, tmp_path: Path, command: str
) -> None:
    target = tmp_path / "no" / "such" / "out.jsonl"
    if command == "record":
        args = ["source", "record", UNREACHABLE, "-o", str(target)]
    else:
        events = tmp_path / "events.jsonl"
        events.write_text("")
        args = ["fn", "run-local", str(tmp_path), "--events", str(events), "-o", str(target)]
    line = one_line_error(runner.invoke(cli, args), 2)
    assert f"the folder {target.parent} does not exist" in line
    assert "mkdir -p" in line
    assert not target.parent.exists()


def test_output_that_is_a_folder_is_refused(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["source", "record", UNREACHABLE, "-o", str(tmp_path)])
    assert "is a folder" in one_line_error(result, 2)


@pytest.mark.parametrize(
    ("option", "value"),
    [("--max-events", "0"), ("--max-events", "-3"), ("--idle-timeout", "-1"),
     ("--idle-timeout", "0")],
)  # fmt: skip
@pytest.mark.parametrize("command", ["tail", "record"])
def test_counts_and_timeouts_below_their_range_are_refused(
    runner: CliRunner, tmp_path: Path, command: str, option: str, value: str
) -> None:
    args = ["source", command, UNREACHABLE, option, value]
    if command == "record":
        args += ["-o", str(tmp_path / "out.jsonl")]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert option in result.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("output", ["/proc/x.jsonl", "/sys/x.jsonl"])
@pytest.mark.parametrize("mode", [[], ["--append"]])
def test_output_in_a_folder_that_takes_no_new_file_is_one_line_before_recording(
    runner: CliRunner, output: str, mode: list[str]
) -> None:
    # Not even root makes a file there (a folder made read-only would not stop root):
    # the source is never asked, or this would exit 3.
    result = runner.invoke(cli, ["source", "record", UNREACHABLE, "-o", output, *mode])
    line = one_line_error(result, 2)
    assert f"--output {output}: cannot create a file in {Path(output).parent} (" in line
    assert line.endswith("); choose a writable path with --output")


@pytest.mark.parametrize("value", ["nan", "inf"])
@pytest.mark.parametrize("command", ["tail", "record"])
def test_an_idle_timeout_that_is_not_a_finite_number_is_refused(
    runner: CliRunner, tmp_path: Path, command: str, value: str
) -> None:
    args = ["source", command, UNREACHABLE, "--idle-timeout", value]
    if command == "record":
        args += ["-o", str(tmp_path / "out.jsonl")]
    line = one_line_error(runner.invoke(cli, args), 2)
    assert f"--idle-timeout {value!r} is not a finite number" in line
    assert not (tmp_path / "out.jsonl").exists()
