"""A checkpoint a real runtime wrote for source ``ux`` is not taken over by ``other``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

RELAY = """
import dbus_fn as fn

@fn.route(tables="{table}")
def relay(event: fn.RowChange) -> str:
    return "kafka://{topic}"
"""


def _runtime(services: Any, source: str, folder: Path, checkpoint: Path) -> list[str]:
    return [
        str(Path(sys.executable).parent / "dbus"), "runtime", "start",
        "--source", f"{source}={services.mariadb.dsn}", "--functions", str(folder),
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", str(checkpoint), "--master", "local[1]", "--api", "off",
    ]  # fmt: skip


def test_a_renamed_source_is_refused_its_old_names_checkpoint(
    services: Any, fresh_database: Any, kafka_topic: str, function_folder: Any, tmp_path: Path
) -> None:
    table = f"{fresh_database.name}.t"
    with fresh_database.connect().cursor() as cursor:
        cursor.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    folder = function_folder("relay", RELAY.format(table=table, topic=kafka_topic), [table])
    checkpoint = tmp_path / "checkpoint"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with (tmp_path / "ux.log").open("wb") as log:
        process = subprocess.Popen(
            [*_runtime(services, "ux", folder, checkpoint), "--for", "150"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        row = 0
        while not any((checkpoint / "commits").glob("[0-9]*")):
            assert process.poll() is None, (tmp_path / "ux.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no batch committed"
            row += 1
            with fresh_database.connect().cursor() as cursor:
                cursor.execute(f"INSERT INTO t VALUES ({row})")
            time.sleep(1)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=90) == 0, (tmp_path / "ux.log").read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    before = sorted(p.name for p in (checkpoint / "offsets").iterdir())

    renamed = subprocess.run(
        [*_runtime(services, "other", folder, checkpoint), "--for", "10"], capture_output=True,
        text=True,
        env=env, timeout=120,
    )  # fmt: skip
    assert renamed.returncode == 2, renamed.stderr[-3000:]
    lines = [line for line in renamed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in renamed.stderr, renamed.stderr[-3000:]
    assert "holds the position of source ux" in lines[0] and "--source ux=DSN" in lines[0]
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir()) == before
