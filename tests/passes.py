"""How the integration tests run: their two passes side by side, the exclusive one first
in line for the cores and on services of its own.

The parallel pass runs the tests that share no service state, a file per worker
(``tests/timing.py`` hands them out); the exclusive pass runs, one at a time, the tests
that bound a latency (a deployment detached after 2 s, a handoff within a 4 s
ZooKeeper session, an outage in the metrics within 10 s). Run one after the other,
about half of the two cores stood idle through the exclusive pass's 13 minutes. Here
they run at once:

- the exclusive pass on services of its own: a home made for the run (the installed
  artefacts shared, as ``support.PrivateHomes`` does), other ports, started before
  its first test, so no load of the parallel pass reaches a service it measures;
- the parallel pass, and the shared services it uses, in a CPU cgroup of low weight
  (``cpu.shares`` 128 against the default 1,024): when the exclusive tests want both
  cores they get about nine tenths of them, and the parallel pass takes what they
  leave. (``nice`` would not do: the kernel groups the processes of each session, and
  the runtimes and services start sessions of their own.)
- each pass hands out ports from a range of its own (``support.PORTS_VARIABLE``).

Where no cgroup can be made (not root, no cgroup v1 ``cpu`` controller) the passes run
one after the other, as before, and this says so in one line.

``python tests/passes.py [WORKERS] [-- PYTEST ARGS]``: what `tox -e integration` runs.
The exclusive pass's output is kept in ``<home>/logs/exclusive-pass.log`` and printed
whole when it ends.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")
SHARES = 128
"""The parallel pass's weight, against the 1,024 of everything else."""
PARALLEL = "(integration or e2e) and not exclusive"
EXCLUSIVE = "(integration or e2e) and exclusive"
SPLIT_PORT = 29000
"""Ports below (from 20000) for the parallel pass, from here up for the exclusive one."""


def pytest_command(marks: str, pass_name: str, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-m", marks, "--pass-name", pass_name, *extra]


def _own_cpu_cgroup() -> Path | None:
    """This process's cgroup v1 ``cpu`` folder (None: no such controller here)."""
    if not (CPU_CGROUPS / "cpu.shares").is_file():
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(","):
            return CPU_CGROUPS / path.lstrip("/")
    return None


class LowWeight:
    """A child cpu cgroup of low weight; ``close`` moves whatever is left in it back to
    the parent and removes it."""

    def __init__(self, parent: Path, name: str) -> None:
        self.parent = parent
        self.path = parent / name
        self.path.mkdir()
        (self.path / "cpu.shares").write_text(str(SHARES))

    @classmethod
    def make(cls) -> LowWeight | None:
        parent = _own_cpu_cgroup()
        if parent is None:
            return None
        try:
            return cls(parent, f"dbus-parallel-pass-{os.getpid()}")
        except OSError:
            return None

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: this one) in; its children from then on are in too."""
        (self.path / "cgroup.procs").write_text(str(pid or os.getpid()))

    def join_tree(self, pid: int) -> None:
        """Move ``pid`` and the processes it started in (a process that ended meanwhile
        is passed over)."""
        import psutil

        try:
            tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for process in tree:
            with suppress(OSError):  # it ended
                self.join(process.pid)

    def close(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():
            with suppress(OSError):  # it ended
                (self.parent / "cgroup.procs").write_text(pid)
        self.path.rmdir()


def _ports(count: int, low: int) -> list[int]:
    """``count`` ports nobody listens on, from ``low`` up."""
    chosen: list[int] = []
    port = low
    while len(chosen) < count:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                chosen.append(port)
            except OSError:
                pass
        port += 1
    return chosen


@contextmanager
def exclusive_services() -> Iterator[dict[str, str]]:
    """The default services running in a home of their own; the environment that
    points at them, and hands out ports above theirs."""
    from support import PORTS_VARIABLE, port_range

    from dbus_deploy.services import PORT_VARIABLES, down, load_config, up

    # Elasticsearch runs as its own user, who must traverse the home.
    home = Path(tempfile.mkdtemp(prefix="dbus-exclusive-pass-"))
    home.chmod(0o755)
    (home / "lib").symlink_to(load_config().lib_dir, target_is_directory=True)
    ports = _ports(len(PORT_VARIABLES), SPLIT_PORT)
    _, high = port_range(os.environ)
    env = {
        **os.environ,
        "DBUS_HOME": str(home),
        **{variable: str(port) for variable, port in zip(PORT_VARIABLES, ports, strict=True)},
        PORTS_VARIABLE: f"{max(ports) + 1}-{high}",
    }
    config = load_config(env)
    try:
        up(config=config)
        yield env
    finally:
        down(config=config)
        shutil.rmtree(home, ignore_errors=True)


def _shared_service_pids() -> list[int]:
    from dbus_deploy.services import status

    return [service.pid for service in status() if service.running and service.pid]


def side_by_side(workers: str, extra: Sequence[str], group: LowWeight) -> int:
    from support import PORTS_VARIABLE, port_range

    from dbus_fn.errors import DbusError
    from dbus_fn.home import dbus_home

    low, _ = port_range(os.environ)
    for pid in _shared_service_pids():
        group.join_tree(pid)
    log = dbus_home() / "logs" / "exclusive-pass.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    parallel = subprocess.Popen(
        pytest_command(PARALLEL, "parallel", ["-n", workers, "--dist", "loadfile", *extra]),
        env={**os.environ, PORTS_VARIABLE: f"{low}-{SPLIT_PORT}"},
        preexec_fn=group.join,  # the child moves in before it runs pytest
    )
    try:
        try:
            with exclusive_services() as env, log.open("wb") as out:
                exclusive = subprocess.call(
                    pytest_command(EXCLUSIVE, "exclusive", extra),
                    env=env, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
        except DbusError as exc:
            log.write_text(f"the exclusive pass's own services did not start: {exc}\n")
            exclusive = 1
        print(f"\n===== the exclusive pass (exit {exclusive}; kept in {log}) =====", flush=True)
        sys.stdout.write(log.read_text(errors="replace"))
        print("===== the exclusive pass ends; the parallel pass goes on =====\n", flush=True)
        return parallel.wait() or exclusive
    finally:
        if parallel.poll() is None:
            parallel.terminate()
            parallel.wait()


def one_after_the_other(workers: str, extra: Sequence[str]) -> int:
    parallel = subprocess.call(
        pytest_command(PARALLEL, "parallel", ["-n", workers, "--dist", "loadfile", *extra])
    )
    exclusive = subprocess.call(pytest_command(EXCLUSIVE, "exclusive", extra))
    return parallel or exclusive


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    extra = args[args.index("--") + 1 :] if "--" in args else []
    positional = args[: args.index("--")] if "--" in args else args
    workers = positional[0] if positional else "3"
    group = LowWeight.make()
    if group is None:
        print("tests/passes.py: no cpu cgroup can be made here (root and cgroup v1's cpu "
              "controller are needed): the exclusive pass runs after the parallel one")  # fmt: skip
        return one_after_the_other(workers, extra)
    try:
        return side_by_side(workers, extra, group)
    finally:
        group.close()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main(sys.argv[1:]))
