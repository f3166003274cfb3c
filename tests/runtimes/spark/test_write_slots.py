"""Write slots: the stable transactional ids of a standalone runtime's exactly-once
Kafka writes. A slot is held by one live process at a time, the lowest free first,
and is free again once its holder is gone, however it ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dbus_spark.sinks.write_slots import WriteSlot
from dbus_spark.state.checkpoint import slots_dir


def test_each_holder_gets_its_own_slot_lowest_first_and_gives_it_back(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    first, second = WriteSlot(checkpoint), WriteSlot(checkpoint)
    assert (first.number, second.number) == (0, 1)
    assert first.transactional_id != second.transactional_id
    first.release()
    again = WriteSlot(checkpoint)
    assert (again.number, again.transactional_id) == (0, first.transactional_id)
    assert sorted(p.name for p in slots_dir(checkpoint).iterdir()) == ["0.lock", "1.lock"]
    for slot in (second, again):
        slot.release()


def test_another_checkpoint_writes_under_other_ids(tmp_path: Path) -> None:
    one = WriteSlot(str(tmp_path / "one"))
    other = WriteSlot(str(tmp_path / "other"))
    assert one.number == other.number == 0
    assert one.transactional_id != other.transactional_id
    one.release()
    other.release()


def test_a_killed_holders_slot_goes_to_the_next_runtime_with_its_id(tmp_path: Path) -> None:
    """kill -9 leaves no cleanup to run: the kernel drops the lock with the process."""
    checkpoint = str(tmp_path / "checkpoint")
    ready = tmp_path / "ready"
    code = (
        "import sys, time; from dbus_spark.sinks.write_slots import WriteSlot; "
        "slot = WriteSlot(sys.argv[1]); print(slot.transactional_id, flush=True); "
        "open(sys.argv[2], 'w').close(); time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, checkpoint, str(ready)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "no slot was taken"
            time.sleep(0.05)
        beside = WriteSlot(checkpoint)
        assert beside.number == 1  # 0 is held by the live process
        beside.release()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert holder.stdout is not None
    killed_id = holder.stdout.read().strip()
    holder.stdout.close()
    follower = WriteSlot(checkpoint)
    assert (follower.number, follower.transactional_id) == (0, killed_id)
    follower.release()
