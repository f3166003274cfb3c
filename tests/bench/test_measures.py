"""The measurements the benches share that need no service: the CPU of a process tree
whose grandchildren no parent waits for, as Spark's worker daemons fork them."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

from measures import TreeCpu

# A child that ignores SIGCHLD (as pyspark's daemon does) and forks a grandchild that
# burns ``BURN`` CPU seconds: the kernel reaps the grandchild, so no parent's
# RUSAGE_CHILDREN ever holds its CPU.
BURN = 0.6
DAEMON_LIKE = textwrap.dedent(f"""
    import os, signal, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        end = time.process_time() + {BURN}
        while time.process_time() < end:
            pass
        os._exit(0)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
""")


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def test_the_tree_s_cpu_counts_a_grandchild_its_parent_never_waited_for() -> None:
    before = _children_cpu()
    with TreeCpu(every=0.05) as cpu:
        subprocess.run([sys.executable, "-c", DAEMON_LIKE], check=True, timeout=60)
    waited_for = _children_cpu() - before
    # Sampled, the grandchild counts up to its last sample (at most 0.05 s before its end).
    assert cpu.seconds >= BURN - 0.15, f"the tree's CPU: {cpu.seconds:.2f} s"
    # Counted by the kernel for the parent that waited: the child alone, not its child.
    assert waited_for < BURN - 0.2, f"RUSAGE_CHILDREN: {waited_for:.2f} s"
