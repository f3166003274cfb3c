"""The daemon a runtime's task workers fork from: what it loads before the forks, and
that it becomes Spark's own daemon when a load started a thread."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

from dbus_spark.spark import worker_daemon
from dbus_spark.spark.session import _SPARK_SETTINGS


def test_the_runtime_starts_its_task_workers_from_this_daemon() -> None:
    assert ("spark.python.daemon.module", worker_daemon.__name__) in _SPARK_SETTINGS


def test_what_it_loads_before_the_forks_starts_no_thread_and_loads_no_threaded_library() -> None:
    code = textwrap.dedent(
        """
        import os, sys
        from dbus_spark.spark import worker_daemon
        print(worker_daemon.preload(), len(os.listdir("/proc/self/task")))
        print(sorted(m for m in ("pyarrow", "pandas", "numpy") if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True 1", "[]"]


def _daemon(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int, str]:
    """A task workers' daemon as Spark starts one: its port (the first thing it writes)
    and the command line it runs under once it wrote it."""
    daemon = subprocess.Popen(
        [sys.executable, "-m", worker_daemon.__name__, worker_daemon.TASK_WORKER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    assert daemon.stdout is not None
    port = struct.unpack("!i", daemon.stdout.read(4))[0]
    command = Path(f"/proc/{daemon.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return daemon, port, command


def _end(daemon: subprocess.Popen[bytes]) -> str:
    """Close its stdin (Spark's JVM going): it ends; what it said on stderr."""
    assert daemon.stdin is not None and daemon.stdout is not None and daemon.stderr is not None
    daemon.stdin.close()
    daemon.wait(timeout=30)
    daemon.stdout.close()
    with daemon.stderr:
        return daemon.stderr.read().decode()


def test_a_daemon_with_its_modules_loaded_serves_as_itself() -> None:
    daemon, port, command = _daemon(dict(os.environ))
    try:
        assert port > 0
        assert f"-m {worker_daemon.__name__} pyspark.worker" in command
    finally:
        said = _end(daemon)
    assert "started a thread" not in said


def test_a_load_that_started_a_thread_makes_it_spark_s_own_daemon(tmp_path: Path) -> None:
    # A sitecustomize that starts a thread, as a library imported early might.
    (tmp_path / "sitecustomize.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    daemon, port, command = _daemon(env)
    try:
        assert port > 0
        assert f"-m {worker_daemon.SPARK_DAEMON} pyspark.worker" in command
    finally:
        said = _end(daemon)
    assert said.strip().splitlines()[0] == (
        "dbus: a module the task workers' daemon loads started a thread; "
        "it runs as Spark's daemon instead"
    )
