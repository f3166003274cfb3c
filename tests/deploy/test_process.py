"""Reading a failed service's log: the line that explains it, from this run only."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dbus_deploy.services._process import (
    Launch,
    last_log_line,
    log_sizes,
    running_pid,
    service_pid,
    spawn,
)


def test_prefers_the_last_error_line_over_the_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("starting\n[ERROR] cannot open table\nshutting down\n\n")
    assert last_log_line(log) == "[ERROR] cannot open table"


def test_falls_back_to_the_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("starting\nlistening\n")
    assert last_log_line(log) == "listening"


def test_quotes_only_what_this_run_wrote(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("ERROR an earlier run failed differently\n")
    before = log_sizes([log])
    with log.open("a") as handle:
        handle.write("exiting on request\n")
    assert last_log_line(log, since=before) == "exiting on request"
    assert last_log_line(log) == "ERROR an earlier run failed differently"


def test_skips_maven_advice_colour_codes_and_command_echo(tmp_path: Path) -> None:
    log = tmp_path / "maven.log"
    log.write_text(
        "$ mvn -q dependency:copy-dependencies\n"
        "\x1b[0m\x1b[0m[ERROR] Failed to execute goal: x:absent:jar:1 was not found -> [Help 1]\n"
        "[ERROR] \n"
        "[ERROR] Re-run Maven using the -X switch to enable full debug logging.\n"
        "[ERROR] [Help 1] http://cwiki.apache.org/confluence/display/MAVEN/X\n"
        "\x1b[0m\x1b[0m\n"
    )
    assert last_log_line(log) == (
        "[ERROR] Failed to execute goal: x:absent:jar:1 was not found -> [Help 1]"
    )


def test_uses_the_next_log_when_the_first_is_missing_or_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    other = tmp_path / "other.log"
    other.write_text("Could not reserve enough space for object heap\n")
    assert last_log_line(tmp_path / "missing.log", empty, other) == (
        "Could not reserve enough space for object heap"
    )


def test_knows_a_service_whose_state_directory_is_reached_through_a_symlink(
    tmp_path: Path,
) -> None:
    real = tmp_path / "state" / "mariadb"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "state")
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--defaults-file={real}/my.cnf"]
    )
    try:
        pid_file = real / "mariadb.pid"
        pid_file.write_text(f"{process.pid}\n")
        assert running_pid(pid_file, tmp_path / "link" / "mariadb") == process.pid
        assert running_pid(pid_file, real) == process.pid
        assert running_pid(pid_file, tmp_path / "elsewhere") is None
    finally:
        process.kill()
        process.wait()


def test_a_service_just_started_is_judged_by_its_child_not_its_command_line(
    tmp_path: Path,
) -> None:
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]  # home is not in it
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        assert running_pid(pid_file, home) is None
        assert service_pid(pid_file, home, process) == process.pid
    finally:
        process.kill()
        process.wait()
    assert service_pid(pid_file, home, process) is None
