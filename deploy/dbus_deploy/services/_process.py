"""Service processes: start them detached, find them again by pid file, stop them.

A pid file alone can point at an unrelated process once the pid is reused, so a
pid only counts as "ours" when the process started when the pid file says it did
(in seconds since the machine booted, ``started_at``) and its command line
mentions the service's own directory. Stopping
signals the process group the service was started in (its own session), which
also reaches children such as Elasticsearch's server JVM, and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dbus_fn.processes import still_running

if TYPE_CHECKING:
    # Imported where used: a worker container of the runtime image imports this
    # module (through dbus_deploy.spark) without the dev extra that brings psutil.
    import psutil

# Lines that say more about a failure than the plain last line of a log...
_MEANINGFUL = re.compile(r"\b(ERROR|FATAL|Exception|Error|error|Could not|Cannot|Can't|Aborting)\b")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# ...except the advice tools print after the real error (Maven's help links), and the
# lines a JVM that could not start prints after the option or setting it refused.
_BOILERPLATE = re.compile(
    r"^\[ERROR\] \[Help \d+\]|Re-run Maven|For more information about"
    r"|To see the full stack trace|^\[ERROR\]\s*$"
    r"|^Error: Could not create the Java Virtual Machine\.$"
    r"|^Error: A fatal exception has occurred\. Program will exit\.$"
    r"|^\$ "  # the command line run_logged writes first
)


@dataclass(frozen=True, slots=True)
class Launch:
    """How to run one service process: command, environment, log, and as whom."""

    argv: Sequence[str]
    log_file: Path
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None


# Services outlive the call that started them. Holding their Popen objects keeps
# Python from warning "subprocess is still running" when one would be collected
# while a test session (which starts services in-process) is still going.
_SPAWNED: list[subprocess.Popen[bytes]] = []


def spawn(launch: Launch, pid_file: Path) -> subprocess.Popen[bytes]:
    """Start ``launch`` in its own session with output appended to its log file."""
    launch.log_file.parent.mkdir(parents=True, exist_ok=True)
    with launch.log_file.open("ab") as log:
        process = subprocess.Popen(
            list(launch.argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=launch.cwd,
            env=dict(launch.env),
            start_new_session=True,
            user=launch.user,
            group=None if launch.user is None else _primary_group(launch.user),
            extra_groups=None if launch.user is None else [],
        )
    _SPAWNED[:] = [child for child in _SPAWNED if child.poll() is None]
    _SPAWNED.append(process)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{process.pid} {started_at(process.pid):.2f}\n")
    return process


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the machine booted.

    Not its start in wall-clock time (psutil's ``create_time``): that is reckoned
    from the boot time the kernel derives from the wall clock, which moves when
    the clock is set, and moves forward by the whole pause when a paused virtual
    machine resumes (a snapshot, a migration); every running service would then
    seem to have started after its pid file was written. Nor ``create_time``
    less ``boot_time``: each reads the boot time anew, in whole seconds, and
    while the clock is being slewed two reads a moment apart can differ by one,
    which once made a service just started look like a reused pid. The kernel's
    own count of clock ticks (``/proc/<pid>/stat``) is read where there is one.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            raise ProcessLookupError(pid) from None
        import psutil  # no procfs (macOS): the wall-clock reckoning is all there is

        return psutil.Process(pid).create_time() - psutil.boot_time()
    # The command name (field 2) is in parentheses and may hold any byte, spaces
    # and parentheses too; the start time is field 22, the 20th after its ")".
    ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
    return ticks / os.sysconf("SC_CLK_TCK")


def run_logged(
    argv: Sequence[str],
    *,
    log_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> str | None:
    """Run one setup step to completion with its output appended to ``log_file``.

    Returns ``None`` on success, else why it failed (exit code or timeout).
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        try:
            result = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=None if env is None else dict(env),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"timed out after {timeout:.0f}s"
    return None if result.returncode == 0 else f"exit code {result.returncode}"


def _primary_group(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid


def running_pid(pid_file: Path, marker: Path) -> int | None:
    """The pid in ``pid_file`` if that process is alive and is the service's own."""
    import psutil

    try:
        fields = pid_file.read_text().split()
        pid = int(fields[0])
        started = float(fields[1]) if len(fields) > 1 else None
        written = pid_file.stat().st_mtime
    except (OSError, ValueError, IndexError):
        return None
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if started is not None:
            # The process ``spawn`` wrote down, not a later one given the same pid
            # (the start is in clock ticks since boot: 1 s is far more than their
            # rounding, and far less than the pid space takes to wrap around).
            if abs(started_at(pid) - started) > 1.0:
                return None
        elif process.create_time() > written + 1.0:
            # A pid file of an older dbus (the pid alone): the process must
            # predate it, as a reused pid would not.
            return None
        # Started from this service's directory, under whichever of its names (a
        # state directory reached through a symlink has two).
        cmdline = _command_line(process)
        if str(marker) not in cmdline and str(marker.resolve()) not in cmdline:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None
    return pid


def _command_line(process: psutil.Process) -> str:
    """The command line of ``process``, once its start has laid it out.

    A process a moment into ``exec`` shows an empty one: the kernel closes the
    pipe on which ``subprocess.Popen`` waits for the ``exec`` before it writes
    the new program's arguments out, so a service just spawned can be asked
    about before it has any (seen 12 times in 2,000 spawns on a loaded machine).
    It is waited for, a second at most: a process whose command line stays empty
    (a kernel thread given a reused pid) is not a service.
    """
    deadline = time.monotonic() + 1.0
    while not (argv := process.cmdline()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return " ".join(argv)


def service_pid(
    pid_file: Path, marker: Path, started: subprocess.Popen[bytes] | None = None
) -> int | None:
    """The service's pid if it runs: ``started``'s, when this process just started it
    (``spawn``), else ``running_pid``'s.

    The child is asked directly because its command line is no proof yet: a moment
    after the fork it is still this process's, and a launcher script shows its own.
    """
    if started is not None:
        return started.pid if started.poll() is None else None
    return running_pid(pid_file, marker)


def stop(pid: int, *, grace: float) -> bool:
    """TERM the process group led by ``pid``, then KILL it after ``grace`` seconds.

    TERM is repeated every couple of seconds: a server still in its early start-up
    (MariaDB before its signal thread exists) drops the first one. Returns whether
    KILL was needed.
    """
    alive = _group_members(pid)
    give_up = time.monotonic() + grace
    while alive and time.monotonic() < give_up:
        _signal_group(pid, signal.SIGTERM)
        alive = still_running(alive, timeout=min(2.0, max(0.1, give_up - time.monotonic())))
    if not alive:
        return False
    _signal_group(pid, signal.SIGKILL)
    still_running(alive, timeout=10)
    return True


def _group_members(pid: int) -> list[psutil.Process]:
    import psutil

    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pid:
                members.append(process)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def log_sizes(logs: Sequence[Path]) -> dict[Path, int]:
    """How long each log is now, so that a later look reads only what came after."""
    sizes = {}
    for log in logs:
        with contextlib.suppress(OSError):
            sizes[log] = log.stat().st_size
    return sizes


def last_log_line(*logs: Path, since: Mapping[Path, int] | None = None) -> str | None:
    """The most telling recent line of the first log that has one.

    Prefers the last line that looks like an error; falls back to the last
    non-empty line. Long lines (stack traces, JSON logs) are shortened. With
    ``since`` (from :func:`log_sizes`), earlier runs' lines in the same log are
    not considered.
    """
    for log in logs:
        try:
            with log.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                start = (since or {}).get(log, 0)
                handle.seek(max(start if start <= size else 0, size - 64 * 1024))
                tail = strip_ansi(handle.read().decode("utf-8", errors="replace"))
        except OSError:
            continue
        chosen = telling_line(tail.splitlines())
        if chosen is not None:
            return chosen
    return None


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes."""
    return _ANSI.sub("", text)


def telling_line(lines: Sequence[str]) -> str | None:
    """The last line that looks like an error, else the last non-empty one, shortened."""
    kept = [
        line.strip() for line in lines if line.strip() and not _BOILERPLATE.search(line.strip())
    ]
    if not kept:
        return None
    errors = [line for line in kept if _MEANINGFUL.search(line)]
    chosen = (errors or kept)[-1]
    return chosen if len(chosen) <= 300 else chosen[:297] + "..."
