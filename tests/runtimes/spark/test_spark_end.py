"""A runtime's end of its Spark (``end_spark``): what it started is gone when it returns,
and py4j's complaints that the JVM went are not the runtime's output. Each case runs in
a process of its own, as a runtime's CLI does (the end is its process's last act: here it
would end any Spark this test process holds). The JVM's own end is in
``tests/e2e/test_checkpoint_uri.py`` (no process of a stopped runtime runs)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import psutil
from support import under_a_subreaper_that_does_not_reap

CHILD_OUTLIVES_THE_WAIT = """
    import subprocess, sys, time
    from dbus_spark.spark.session import end_spark

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    began = time.monotonic()
    end_spark(timeout=0.5)
    print(json.dumps({"pid": child.pid, "took": time.monotonic() - began}))
"""

# The runtime (a process of its own) whose Spark process B starts C and ends first: C
# goes to the nearest subreaper, which waits for the runtime alone (as a bench adopting
# its orphans does, or an init that reaps late) and leaves C a zombie once it exits.
ORPHAN_LEFT_UNREAPED = """
    import json, subprocess, sys, time
    import psutil
    from dbus_spark.spark.session import end_spark

    b = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1)']); "
        "time.sleep(0.3)"])
    while len(psutil.Process().children(recursive=True)) < 2:
        time.sleep(0.01)
    began = time.monotonic()
    end_spark(timeout=20)
    print(json.dumps({"took": time.monotonic() - began}))
"""

PY4J_RECORDS = """
    import logging
    from dbus_spark.spark.session import end_spark

    handler = logging.NullHandler()
    logging.getLogger().addHandler(handler)

    def kept(pathname):
        return bool(handler.filter(logging.LogRecord(
            "root", logging.INFO, pathname, 1, "Exception while sending command.", None, None
        )))

    py4j = "/venv/lib/python3.11/site-packages/py4j/java_gateway.py"
    own = "/work/dbus_spark/spark/job.py"
    before = kept(py4j)
    end_spark(timeout=0.5)
    print(json.dumps({"before": before, "after": kept(py4j), "own": kept(own)}))
"""


def _run(script: str) -> Any:
    done = subprocess.run([sys.executable, "-c", "import json\n" + textwrap.dedent(script)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_child_that_outlives_the_wait_is_killed() -> None:
    seen = _run(CHILD_OUTLIVES_THE_WAIT)
    assert not psutil.pid_exists(seen["pid"]), "the child still runs"
    assert 0.5 <= seen["took"] < 10, seen


def test_py4j_records_are_dropped_once_spark_ends() -> None:
    assert _run(PY4J_RECORDS) == {"before": True, "after": False, "own": True}


def test_a_process_that_ended_unreaped_is_not_waited_for() -> None:
    # C ends 1 s in; waited for until reaped, it held the end its whole timeout (20 s).
    seen = under_a_subreaper_that_does_not_reap(ORPHAN_LEFT_UNREAPED)
    assert 0.9 <= seen["took"] < 10, seen
