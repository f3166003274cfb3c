"""Service processes: reading a failed service's log (the line that explains it, from
this run only), and knowing a running service by its pid file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import under_a_subreaper_that_does_not_reap

from dbus_deploy.services._process import (
    Launch,
    last_log_line,
    log_sizes,
    running_pid,
    service_pid,
    spawn,
    started_at,
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


def test_a_jvm_that_cannot_start_is_quoted_by_what_it_refused(tmp_path: Path) -> None:
    log = tmp_path / "zookeeper.log"
    log.write_text(
        "$ java -Xms256m -XX:+DbusNoSuchOption -cp zk.jar QuorumPeerMain\n"
        "Unrecognized VM option 'DbusNoSuchOption'\n"
        "Error: Could not create the Java Virtual Machine.\n"
        "Error: A fatal exception has occurred. Program will exit.\n"
    )
    assert last_log_line(log) == "Unrecognized VM option 'DbusNoSuchOption'"


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


def test_a_service_is_still_known_after_the_wall_clock_jumped(tmp_path: Path) -> None:
    """A paused virtual machine resumes with its boot time (from which wall-clock
    start times are reckoned) moved forward by the pause, so every running service
    seemed to start long after its pid file was written, and was taken for gone
    (every test of a run then failed at once: "mariadb is not running"). The pid
    file's start, in seconds since boot, does not move."""
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(home)]
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        hour_ago = time.time() - 3600  # as the pid file looks once an hour of pause is added
        os.utime(pid_file, (hour_ago, hour_ago))
        assert running_pid(pid_file, home) == process.pid
    finally:
        process.kill()
        process.wait()


def test_a_pid_file_whose_start_is_not_the_processes_is_a_reused_pid(tmp_path: Path) -> None:
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(home)]
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        pid, started = pid_file.read_text().split()
        assert int(pid) == process.pid
        assert abs(float(started) - started_at(process.pid)) < 0.05
        pid_file.write_text(f"{pid} {float(started) - 60:.2f}\n")  # a process of a minute ago
        assert running_pid(pid_file, home) is None
    finally:
        process.kill()
        process.wait()


def test_a_service_just_started_is_known_while_the_boot_time_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel gives the boot time reckoned from the wall clock, in whole
    seconds: while the clock is slewed two reads a moment apart can differ by one,
    and a clock that is set moves it by any amount. A start reckoned from two such
    reads is off by as much, and a service just started would be taken for a
    reused pid. The move is injected, between the first read and the next: no test
    can make the kernel's boot time move when it needs it to."""
    reads = iter(range(1_000_000))
    real = psutil._psplatform.boot_time
    monkeypatch.setattr(psutil._psplatform, "boot_time", lambda: real() + 5 * min(1, next(reads)))
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(home)]
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        for _ in range(4):
            assert running_pid(pid_file, home) == process.pid
    finally:
        process.kill()
        process.wait()


def test_a_service_asked_about_before_its_exec_laid_out_its_arguments_is_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Popen returns once the child's exec closed the pipe it waits on, and the
    kernel writes the new program's arguments out after that: asked at once, a
    service showed an empty command line, was not the service's, and was taken for
    gone (the unit job of two runs failed on it, by chance, on a loaded machine).
    The empty reads are injected: the kernel's moment between the two steps can
    not be had on cue."""
    real = psutil.Process.cmdline
    empty_reads = iter([[], [], []])
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: next(empty_reads, real(self)))
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(home)]
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        assert running_pid(pid_file, home) == process.pid
        assert next(empty_reads, "all read") == "all read"
    finally:
        process.kill()
        process.wait()


def test_a_pid_whose_command_line_stays_empty_is_not_the_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel thread given a reused pid has no command line, ever: it is waited
    for a second at most, then the pid is not the service's."""
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: [])
    home = tmp_path / "svc"
    pid_file = home / "svc.pid"
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(home)]
    process = spawn(Launch(argv=argv, log_file=home / "svc.log", cwd=tmp_path), pid_file)
    try:
        began = time.monotonic()
        assert running_pid(pid_file, home) is None
        assert 1.0 <= time.monotonic() - began < 10.0  # waited, and not for ever
    finally:
        process.kill()
        process.wait()


def test_the_start_of_a_process_whose_name_holds_parentheses_and_spaces(tmp_path: Path) -> None:
    """The name in /proc/<pid>/stat is the executable's, in parentheses, as it is:
    the fields after it are found from its last ")"."""
    odd = tmp_path / "a) b (c) d"
    odd.symlink_to(sys.executable)
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    process = subprocess.Popen([str(odd), "-c", "import time; time.sleep(60)"])
    after = time.clock_gettime(time.CLOCK_BOOTTIME)
    try:
        assert psutil.Process(process.pid).name().startswith("a) b (c)")
        tick = 1 / os.sysconf("SC_CLK_TCK")
        assert before - tick <= started_at(process.pid) <= after + tick
    finally:
        process.kill()
        process.wait()
    with pytest.raises(ProcessLookupError):
        started_at(process.pid)


# `dbus services down` under a subreaper that reaps nothing: the service's leader,
# started by a launcher that has exited, is that subreaper's, and stays a zombie once
# TERM ends it.
STOP_A_LEADER_LEFT_UNREAPED = """
    import json, subprocess, sys, time
    import psutil
    from dbus_deploy.services._process import stop

    launcher = subprocess.run([sys.executable, "-c",
        "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
        "'import time; time.sleep(60)'], start_new_session=True, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"],
        capture_output=True, text=True, check=True)
    leader = int(launcher.stdout)
    began = time.monotonic()
    killed = stop(leader, grace=20)
    took = time.monotonic() - began
    print(json.dumps({"took": took, "killed": killed,
                      "zombie": psutil.Process(leader).status() == psutil.STATUS_ZOMBIE}))
"""


def test_a_service_that_ended_unreaped_is_not_waited_for() -> None:
    # Waited for until reaped, the stop held its whole grace and KILL's 10 s (30 s).
    seen = under_a_subreaper_that_does_not_reap(STOP_A_LEADER_LEFT_UNREAPED)
    assert seen["zombie"], seen  # ended, and nobody reaped it
    assert not seen["killed"], seen
    assert seen["took"] < 5, seen
