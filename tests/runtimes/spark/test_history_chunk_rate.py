"""A history chunk reports the time its rows took, not what opening it cost: the next
chunk is sized from that rate (``HistoryTask.chunk_rows``), and a fixed cost counted
in would shrink every chunk after it. Real MySQL and Kafka; the chunk is read in this
process, as a Spark task reads it, so that the cost of its first record can be made
long (no server makes a transaction's start take seconds on demand)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from support import kafka_count, one_source_config, route_code

from dbus_fn.capture import BinlogReader, replica_id_for
from dbus_spark.config.runtime import deployment_folders
from dbus_spark.reads.history_chunks import ChunkRange, _chunk_rows
from dbus_spark.reads.task import ReadTask
from dbus_spark.sinks.writer import Output
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.stage.shipment import Shipment
from dbus_spark.stage.worker import position_to_offset
from dbus_spark.state.history import PlannedChunk

pytestmark = pytest.mark.integration

ROWS = 300
FIRST_RECORD = 2.0
"""What the chunk's first record costs here (an exactly-once lane's transaction)."""


def test_a_chunks_reported_seconds_leave_out_the_cost_of_its_first_record(
    services: Any, mysql_database: Any, kafka_topic: str, function_folder: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    table = f"{mysql_database.name}.p"
    folder = function_folder("relay", route_code(table, f"kafka://{kafka_topic}"), [table])
    config = one_source_config(services, mysql_database, folder, tmp_path / "checkpoint")
    with mysql_database.connect().cursor() as cursor:
        cursor.execute("CREATE TABLE p (id INT PRIMARY KEY, note VARCHAR(10))")
        cursor.executemany("INSERT INTO p VALUES (%s, 'x')", [(i,) for i in range(1, ROWS + 1)])
    binlog = BinlogReader(config.source("src").spec, replica_id=replica_id_for(str(tmp_path)))
    end = position_to_offset(binlog.master_position())
    binlog.close()

    put = Output.put
    first: list[float] = []

    def slow_first_put(self: Output, record: Any) -> None:
        if not first:
            first.append(time.monotonic())
            time.sleep(FIRST_RECORD)
        put(self, record)

    monkeypatch.setattr(Output, "put", slow_first_put)
    stage = FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")
    chunk = PlannedChunk(f"relay:{table}", None, None, 1)
    partition = ChunkRange(Shipment("test", "{}"), "src", end, chunk.to_json(), 0, "relay",
                           table, False)  # fmt: skip
    task = ReadTask("src")
    task.deliver_to(config, stage, paced=False)
    _chunk_rows(partition, stage, config.source("src"), task)

    [done] = task.counts.chunks
    assert done.rows == ROWS and first, "the chunk read every row, records out"
    read = task.counts.read_seconds
    assert read >= FIRST_RECORD
    # Its rows' time is inside the read, and the first record's cost outside it.
    assert 0 < done.seconds <= read - FIRST_RECORD, (done.seconds, read)
    bootstrap = services.kafka.bootstrap_servers
    assert kafka_count(bootstrap, kafka_topic, expected=ROWS, within=60) == ROWS
