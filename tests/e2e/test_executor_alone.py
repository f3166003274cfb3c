"""The executor side needs nothing of the driver's disk.

The driver plans a micro-batch (binlog ranges and bootstrap chunks) as Spark does
and makes the sink writer; what Spark would send an executor (the pickled reader,
its partitions, the writer) goes to a new Python process after the driver's whole
folder (configuration, function folder, checkpoint, metrics folder) is deleted.
There the partitions are read and written to Kafka and Elasticsearch, under an
audit hook that records every file the process opens, lists or makes: none is
under the driver's folder, and every row arrives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from e2e_support import Scratch
from pyspark import cloudpickle
from support import kafka_consumer

from dbus_spark.planning.source import BinlogSourceReader
from dbus_spark.sinks.batch_commit import SinkWriter

pytestmark = [pytest.mark.e2e]

EXECUTOR = textwrap.dedent('''
    import json, os, sys

    driver = sys.argv[1]
    touched = []

    def audit(event, args):
        if event in ("open", "os.listdir", "os.scandir", "os.mkdir", "os.rename",
                     "os.remove", "shutil.rmtree", "os.chdir"):
            path = args[0] if args else None
            if isinstance(path, (str, bytes, os.PathLike)):
                path = os.fsdecode(path)
                if path.startswith(driver):
                    touched.append(f"{event} {path}")

    sys.addaudithook(audit)
    from pyspark import cloudpickle
    reader, partitions, writer = cloudpickle.loads(sys.stdin.buffer.read())
    batches = [batch for partition in partitions for batch in reader.read(partition)]
    report = writer.write(iter(batches))
    print(json.dumps({"records": report.records, "kafka": report.kafka,
                      "es": report.elasticsearch, "touched": touched}))
''')


def _deployment(scratch: Scratch) -> tuple[Path, str]:
    table = f"{scratch.fresh_database.name}.items"
    folder = scratch.function_folder(
        "split",
        f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def where(event: fn.RowChange) -> str:
            if event.row["id"] % 2:
                return "kafka://{scratch.kafka_topic}"
            return "es://{scratch.es_index}"
        ''',
        [table],
    )
    return folder, table


def _documents(url: str, index: str) -> int:
    urllib.request.urlopen(f"{url}/{index}/_refresh", data=b"", timeout=10).close()
    with urllib.request.urlopen(f"{url}/{index}/_count", timeout=10) as answer:
        return int(json.loads(answer.read())["count"])


def _messages(bootstrap: str, topic: str, expected: int) -> set[int]:
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen: set[int] = set()
    try:
        for _ in range(120):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.add(json.loads(msg.value())["after"]["id"])
            if len(seen) >= expected:
                break
    finally:
        consumer.close()
    return seen


def test_the_executor_side_reads_and_writes_with_the_drivers_folder_gone(
    scratch: Scratch, tmp_path: Path
) -> None:
    driver = tmp_path / "driver"
    folder, _ = _deployment(scratch)
    shipped_folder = driver / "functions" / "split"
    shutil.copytree(folder, shipped_folder)
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))")
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, "old") for i in range(1, 21)])
    config = replace(scratch.runtime_config(shipped_folder), checkpoint_dir=str(driver / "cp"))
    path = config.save(driver / "cp.config.json")
    reports = driver / "cp.reports"
    reports.mkdir()
    planner = BinlogSourceReader(str(path), reports=str(reports))
    start = planner.initialOffset()
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO items VALUES (%s, %s)", [(i, "new") for i in range(21, 41)])
    end = planner.latestOffset(start)
    partitions = list(planner.partitions(start, end))
    assert any("chunks" in offset for offset in end.values()), "a bootstrap chunk is planned"
    # What Spark sends executors: a reader made for the read function, the partitions,
    # the writer; then the driver's folder is gone.
    shipped = cloudpickle.dumps(
        (BinlogSourceReader(str(path), reports=str(reports)), partitions,
         SinkWriter(str(path), str(reports)))
    )  # fmt: skip
    planner.stop()
    shutil.rmtree(driver)
    elsewhere = tmp_path / "executor"
    elsewhere.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", EXECUTOR, str(driver)], input=shipped, capture_output=True,
        cwd=elsewhere, env={**os.environ, "TMPDIR": str(elsewhere)}, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert report["touched"] == []
    assert not driver.exists(), "the executor side made a folder of the driver's"
    # 20 rows in the table (the bootstrap chunk) and 20 inserted (the binlog); a row
    # inserted after the chunk was read may come both ways, so at least 40.
    assert report["records"] >= 40 and report["kafka"] >= 20 and report["es"] >= 20
    services = scratch.services
    odd = _messages(services.kafka.bootstrap_servers, scratch.kafka_topic, 20)
    assert odd == set(range(1, 41, 2))
    assert _documents(services.elasticsearch.url, scratch.es_index) == 20
    assert any(elsewhere.glob("dbus-bundles-*/*/dbus.toml")), "the folder unpacked here"
