"""A runtime's binlog read (``range_read``) sends rows it could not decode to the
dead letters of the deployment that reads the table, and the rows after them to their
routes: one value stops no stream. Real MySQL and Kafka; the read runs in this
process, as a Spark task runs it, so that the decoding fault can be injected (no
server writes a value the decoders refuse)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from decode_faults import refuse_rows_holding
from support import kafka_events, one_source_config

from dbus_fn.capture import BinlogReader, position_to_json, replica_id_for
from dbus_spark.config.runtime import deployment_folders
from dbus_spark.reads.range_read import SourceRange, read_source_range
from dbus_spark.stage.functions import FunctionStage
from dbus_spark.stage.shipment import Shipment

pytestmark = pytest.mark.integration

INJECTED = "a malformed value (injected)"


def test_rows_a_read_cannot_decode_go_to_the_dead_letters_and_the_rest_to_their_route(
    services: Any, mysql_database: Any, kafka_topic: str, function_folder: Any,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    table = f"{mysql_database.name}.o"
    folder = function_folder(
        "relay",
        f"""
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def out(event: fn.RowChange) -> str:
            return "kafka://{kafka_topic}"
        """,
        [table],
        dead_letter=f"kafka://{kafka_topic}.dead",
    )
    config = replace(one_source_config(services, mysql_database, folder,
                                       tmp_path / "checkpoint"), open_read_seconds=0.0)  # fmt: skip
    binlog = BinlogReader(config.source("src").spec, replica_id=replica_id_for(str(tmp_path)))
    with mysql_database.connect().cursor() as cursor:
        cursor.execute("CREATE TABLE o (id INT PRIMARY KEY, note VARCHAR(10))")
        start = binlog.master_position()
        cursor.execute("INSERT INTO o VALUES (1, 'a'), (2, 'bad'), (3, 'c')")
        cursor.execute("INSERT INTO o VALUES (4, 'd')")
        end = binlog.master_position()
    binlog.close()
    refuse_rows_holding(monkeypatch, "bad", INJECTED)
    stage = FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")
    part = SourceRange(Shipment("test", "{}"), "src", position_to_json(start),
                       position_to_json(end))  # fmt: skip
    batches = list(read_source_range(part, config, stage, None))
    assert batches, "the read hands Spark its counts"
    bootstrap = services.kafka.bootstrap_servers
    delivered = kafka_events(bootstrap, kafka_topic, 2, 60)
    assert sorted(event.get_data()["after"]["id"] for _, event in delivered) == [1, 4]
    [(_, letter)] = kafka_events(bootstrap, f"{kafka_topic}.dead", 1, 60)
    data = letter.get_data()
    assert letter.get_extension("dbusstage") == "capture"
    assert (data["position"]["file"], data["position"]["row_index"]) == (start.file, 1)
    assert data["error"]["message"] == INJECTED
    assert json.dumps(b"bad".hex())[1:-1] in data["rows"]["images"]
