"""Rows the binlog read could not decode reach the dead letters of the deployments that
read their table, and only theirs; a read for one deployment gives them to it alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from dbus_fn.events import BinlogPosition, Operation, UndecodedRows
from dbus_spark.config.runtime import deployment_folders
from dbus_spark.stage.counts import StageCounts
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.state.records import KafkaRecord

RELAY = """
import dbus_fn as fn

@fn.route(tables="{table}")
def out(event: fn.RowChange) -> str:
    return "kafka://{name}.out"
"""


def _rows(table: str) -> UndecodedRows:
    database, name = table.split(".")
    return UndecodedRows(
        "src", database, name, Operation.INSERT, BinlogPosition("binlog.000003", 900),
        datetime(2026, 1, 1, tzinfo=UTC), "1", 1, "ValueError", "a malformed value",
        b"\x00\x01", "binlog.000003:800",
    )  # fmt: skip


def test_undecoded_rows_are_a_dead_letter_of_each_deployment_that_reads_the_table(
    function_folder: Any,
) -> None:
    readers = (("orders", "shop.orders"), ("audit", "shop.orders"), ("users", "shop.users"))
    folders = [
        function_folder(name, RELAY.format(table=table, name=name), [table],
                        dead_letter=f"kafka://{name}.dead")
        for name, table in readers
    ]  # fmt: skip
    stage = FunctionStage(deployment_folders(tuple(map(str, folders))), type_prefix="dbus")
    counts = StageCounts()
    records = list(stage.undecoded(_rows("shop.orders"), counts))
    kafka = [r.record for r in records if isinstance(r.record, KafkaRecord)]
    assert sorted(zip([r.deployment for r in records], [k.topic for k in kafka], strict=True)
                  ) == [("audit", "audit.dead"), ("orders", "orders.dead")]  # fmt: skip
    record = kafka[0]
    letter = json.loads(record.value)
    assert letter["dbusstage"] == "capture" and letter["type"] == "dbus.deadletter"
    assert letter["data"]["position"]["row_index"] == 1
    assert letter["data"]["error"] == {
        "type": "ValueError", "message": "a malformed value", "traceback": "", "cause": None,
    }  # fmt: skip
    assert (counts.dead["orders"], counts.dead["audit"], counts.dead["users"]) == (1, 1, 0)
    # A read for one deployment (a replay, a catch-up) gives them to that one alone.
    alone = list(stage.undecoded(_rows("shop.orders"), StageCounts(), only="audit"))
    assert [r.deployment for r in alone] == ["audit"]
    assert list(stage.undecoded(_rows("shop.nobody"), StageCounts())) == []
