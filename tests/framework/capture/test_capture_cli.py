"""`dbus source add|list|remove|tail|record`."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from capture_support import execute
from click.testing import CliRunner
from decode_faults import refuse_rows_holding

from dbus_fn.capture import BinlogReader, SourceSpec, position_to_json, replica_id_for
from dbus_fn.cli import cli
from dbus_fn.json_format import read_jsonl


@dataclass(frozen=True)
class Failure:
    exit_code: int
    message: str


def failure(result: Any) -> Failure:
    """How a command failed: its exit code and the one line it printed on stderr."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: "), result.output
    return Failure(result.exit_code, lines[0].removeprefix("Error: "))


def add_source(runner: CliRunner, name: str, database: Any) -> None:
    """``dbus source add`` of every table of the test's database."""
    added = runner.invoke(
        cli, ["source", "add", name, database.endpoint.dsn, "-t", f"{database.name}.*"]
    )
    assert added.exit_code == 0, added.output


ON_BOTH_SERVERS = pytest.mark.parametrize("server", ["mariadb", "mysql"])
"""For a test on ``database`` (the capture tests' fresh database on ``server``): the
commands read both servers alike."""


def end_of(database: Any) -> dict[str, Any]:
    """Where the binlog of ``database``'s server ends now, as JSON."""
    spec = SourceSpec(name="end", dsn=database.endpoint.dsn, tables=(f"{database.name}.*",))
    reader = BinlogReader(spec, replica_id=replica_id_for(f"test/{uuid.uuid4()}"))
    try:
        return position_to_json(reader.master_position())
    finally:
        reader.close()


@pytest.fixture
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path / "sources.json"))
    return CliRunner()


def test_add_and_list_never_print_the_password(runner: CliRunner, tmp_path: Path) -> None:
    added = runner.invoke(
        cli, ["source", "add", "shop", "mysql://app:s3cret@db:3307", "-t", "shop.*", "--no-check"]
    )
    assert added.exit_code == 0, added.output
    listed = runner.invoke(cli, ["source", "list"])
    as_json = runner.invoke(cli, ["source", "list", "--json"])
    for result in (added, listed, as_json):
        assert "s3cret" not in result.output
    assert "shop\tmysql://app:***@db:3307\tshop.*" in listed.output
    assert json.loads(as_json.output) == [
        {"name": "shop", "dsn": "mysql://app:***@db:3307", "tables": ["shop.*"],
         "keep_helper_tables": False}
    ]  # fmt: skip
    stored = tmp_path / "sources.json"
    assert stored.stat().st_mode & 0o777 == 0o600


def test_adding_twice_needs_replace_and_remove_forgets(runner: CliRunner) -> None:
    add = ["source", "add", "a", "--no-check"]
    assert runner.invoke(cli, [*add, "mariadb://u:p@h"]).exit_code == 0
    again = runner.invoke(cli, [*add, "mariadb://u:p@h"])
    assert failure(again).exit_code == 2 and "--replace" in failure(again).message
    assert runner.invoke(cli, [*add, "mysql://u:p@h", "--replace"]).exit_code == 0
    assert runner.invoke(cli, ["source", "remove", "a"]).exit_code == 0
    assert "no sources yet" in runner.invoke(cli, ["source", "list"]).output


def test_a_source_that_does_not_answer_is_not_added_unless_told_not_to_check(
    runner: CliRunner, tmp_path: Path
) -> None:
    dsn = "mysql://u:s3cret@127.0.0.1:1"
    checked = runner.invoke(cli, ["source", "add", "nowhere", dsn])
    assert failure(checked).exit_code == 3
    assert "127.0.0.1:1" in failure(checked).message
    assert "s3cret" not in checked.output
    assert "no sources yet" in runner.invoke(cli, ["source", "list"]).output
    unchecked = runner.invoke(cli, ["source", "add", "nowhere", dsn, "--no-check"])
    assert unchecked.exit_code == 0, unchecked.output
    assert "nowhere" in runner.invoke(cli, ["source", "list"]).output


def test_a_source_whose_servers_all_stay_silent_names_each_of_them(
    runner: CliRunner, tmp_path: Path
) -> None:
    refused = runner.invoke(
        cli, ["source", "add", "pair", "mysql://u:s3cret@127.0.0.1:1,127.0.0.1:2"]
    )
    said = failure(refused)
    assert said.exit_code == 3
    assert "none of its 2 servers answers" in said.message
    assert "127.0.0.1:1" in said.message and "127.0.0.1:2" in said.message
    assert "s3cret" not in refused.output
    assert "no sources yet" in runner.invoke(cli, ["source", "list"]).output


def test_a_source_of_several_servers_is_added_while_one_answers(
    runner: CliRunner, fresh_database: Any
) -> None:
    answering = fresh_database.endpoint
    dsn = f"{answering.dsn},127.0.0.1:1"
    added = runner.invoke(cli, ["source", "add", "pair", dsn])
    assert added.exit_code == 0, added.output
    assert "warning: source 'pair' at" in added.stderr and "127.0.0.1:1" in added.stderr
    listed = runner.invoke(cli, ["source", "list"]).output
    assert f"{answering.user}:***@{answering.host}:{answering.port},127.0.0.1:1" in listed
    nowhere = runner.invoke(cli, ["source", "add", "none", "mysql://u:s3cret@127.0.0.1:1,[::1]:1"])
    assert failure(nowhere).exit_code == 3 and "s3cret" not in nowhere.output


@pytest.mark.parametrize(
    ("dsn", "problem"),
    [
        ("127.0.0.1:3306", "no scheme"),
        ("postgres://u:p@h:5432", "unsupported scheme"),
        ("mysql://u:p@h:99999", "port"),
        ("mysql://u:p@:3306", "no host"),
        ("mysql://h:3306", "no user"),
        ("mysql://u:p@h/shop", "database path"),
    ],
)
def test_bad_dsn_is_one_line_naming_the_problem_and_the_fix(
    runner: CliRunner, dsn: str, problem: str
) -> None:
    result = runner.invoke(cli, ["source", "add", "x", dsn])
    assert failure(result).exit_code == 2
    message = failure(result).message
    assert problem in message and "\n" not in message and "e.g. mysql://" in message
    assert ":p@" not in message


@ON_BOTH_SERVERS
def test_record_writes_cloudevents_the_emulator_reads(
    runner: CliRunner, database: Any, tmp_path: Path
) -> None:
    connection = database.connect()
    execute(connection, "CREATE TABLE o (id INT PRIMARY KEY, s VARCHAR(5))")
    position = end_of(database)
    execute(connection, "INSERT INTO o VALUES (1, 'a'), (2, 'b')", "UPDATE o SET s = 'c'")
    add_source(runner, "rec", database)
    output = tmp_path / "events.jsonl"
    result = runner.invoke(cli, [
        "source", "record", "rec", "--output", str(output), "--max-events", "5",
        "--from", f"{position['file']}:{position['pos']}",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    events = list(read_jsonl(output))
    assert [e.get_type() for e in events] == [
        "io.dbus.row.inserted", "io.dbus.row.inserted", "io.dbus.transaction.committed",
        "io.dbus.row.updated", "io.dbus.row.updated",
    ]  # fmt: skip
    assert events[0].get_data()["after"] == {"id": 1, "s": "a"}
    assert "recorded 5 events" in result.output


@ON_BOTH_SERVERS
def test_record_says_each_rows_event_it_could_not_decode_writes_the_rest_and_exits_1(
    runner: CliRunner, database: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_rows_holding(monkeypatch, "bad", "a malformed value (injected)")
    connection = database.connect()
    execute(connection, "CREATE TABLE o (id INT PRIMARY KEY, note VARCHAR(5))")
    position = end_of(database)
    execute(connection, "INSERT INTO o VALUES (1, 'a'), (2, 'bad')",
            "INSERT INTO o VALUES (3, 'c')")  # fmt: skip
    add_source(runner, "rec", database)
    output = tmp_path / "events.jsonl"
    result = runner.invoke(cli, [
        "source", "record", "rec", "--output", str(output), "--max-events", "4",
        "--from", f"{position['file']}:{position['pos']}",
    ])  # fmt: skip
    assert result.exit_code == 1, result.output
    said, recorded, error = result.stderr.strip().splitlines()
    where = f"{database.name}.o at {position['file']}:"
    assert said.startswith(f"dbus: the insert rows of {where}") and "from row 1" in said
    assert "(ValueError: a malformed value (injected)); they are not in the output" in said
    assert recorded == f"recorded 4 events to {output}"
    assert error.startswith("Error: 1 rows event(s) could not be decoded, the first: ")
    assert "every other change was written" in error and "dead letters" in error
    events = list(read_jsonl(output))
    assert [e.get_data().get("after") for e in events] == [
        {"id": 1, "note": "a"}, None, {"id": 3, "note": "c"}, None,
    ]  # fmt: skip


@ON_BOTH_SERVERS
def test_record_from_snapshot_starts_with_the_tables_as_they_are(
    runner: CliRunner, database: Any, tmp_path: Path
) -> None:
    connection = database.connect()
    execute(
        connection,
        "CREATE TABLE o (id INT PRIMARY KEY, s VARCHAR(5))",
        "INSERT INTO o VALUES (1, 'a'), (2, 'b')",
        "UPDATE o SET s = 'c' WHERE id = 2",
    )
    add_source(runner, "snap", database)
    output = tmp_path / "snapshot.jsonl"
    result = runner.invoke(cli, [
        "source", "record", "snap", "--output", str(output), "--max-events", "3",
        "--from", "snapshot",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    events = list(read_jsonl(output))
    assert [e.get_type() for e in events] == [
        "io.dbus.row.inserted", "io.dbus.row.inserted", "io.dbus.transaction.committed",
    ]  # fmt: skip
    assert [e.get_data()["after"] for e in events[:2]] == [{"id": 1, "s": "a"}, {"id": 2, "s": "c"}]


@ON_BOTH_SERVERS
def test_tail_in_lines_without_commits_shows_text_as_text(
    runner: CliRunner, database: Any
) -> None:
    connection = database.connect()
    execute(connection, "CREATE TABLE o (id INT PRIMARY KEY, s VARCHAR(20))")
    start = end_of(database)
    execute(connection, "INSERT INTO o VALUES (1, 'café'), (2, 'b')", "DELETE FROM o WHERE id = 2")
    add_source(runner, "lines", database)
    result = runner.invoke(cli, [
        "source", "tail", "lines", "--format", "line", "--no-commits", "--max-events", "3",
        "--from", f"{start['file']}:{start['pos']}",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    table = f"{database.name}.o"
    assert len(lines) == 3
    assert lines[0].endswith(f' insert {table} [1] {{"id": 1, "s": "café"}}')
    assert f" insert {table} [2] " in lines[1]
    assert lines[2].endswith(f' delete {table} [2] {{"id": 2, "s": "b"}}')
    assert not any(" commit " in line for line in lines)


@pytest.mark.parametrize(
    "argv",
    [["source", "list"], ["source", "add", "shop", "mysql://u:p@db:3306", "--no-check"]],
    ids=["list", "add"],
)
def test_a_sources_file_that_is_a_folder_is_one_line_naming_the_variable(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_SOURCES_FILE", str(tmp_path))
    result = CliRunner().invoke(cli, argv)
    problem = failure(result)
    assert problem.exit_code == 2
    assert "DBUS_SOURCES_FILE" in problem.message and "is a folder" in problem.message
    assert list(tmp_path.iterdir()) == []
