"""The pure parts of the peer bench: the table, the peer's configuration, the offset
it is started at, the keys it writes; and, with Kafka, how long a topic took to fill."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from debezium_peer import (
    DEFAULT,
    TUNED,
    connector_config,
    offsets_payload,
    row_id,
    worker_properties,
)
from measures import SteadyLoad, TopicCount, percentile
from side_by_side import Metric, ratio, render

from dbus_deploy.services import KafkaEndpoint, MariaDBEndpoint
from dbus_fn.events import BinlogPosition


def test_the_table_has_a_ratio_column_per_peer_and_dashes_where_nothing_was_measured() -> None:
    metrics = [
        Metric("rows/s, 20 columns", "rows/s", {"dbus": 30_000, "peer": 20_000, "tuned": 40_000}),
        Metric("p99 at 1,000/s", "ms", {"dbus": 250, "tuned": 500}),
    ]
    lines = render(metrics, ["dbus", "peer", "tuned"]).splitlines()
    assert lines[0].split("  ")[0] == "metric"
    assert lines[0].endswith("dbus ÷ peer  dbus ÷ tuned")
    assert lines[1].split() == ["rows/s,", "20", "columns", "(rows/s)", "30,000", "20,000",
                                "40,000", "1.50", "0.75"]  # fmt: skip
    assert lines[2].split()[-5:] == ["250", "—", "500", "—", "0.50"]
    assert len({len(line) for line in lines}) == 1  # aligned columns


def test_a_ratio_needs_both_figures() -> None:
    assert ratio(3, 2) == "1.50"
    assert ratio(None, 2) == ratio(3, None) == ratio(3, 0) == "—"


def test_a_metric_has_a_known_unit() -> None:
    with pytest.raises(ValueError, match="unit 'parsecs'"):
        Metric("distance", "parsecs")


def test_the_offset_names_the_connectors_partition_and_the_binlog_position() -> None:
    body = offsets_payload("peers.x.default-wide", BinlogPosition("binlog.000025", 680))
    assert body == {
        "offsets": [
            {
                "partition": {"server": "peers.x.default-wide"},
                "offset": {"file": "binlog.000025", "pos": 680},
            }
        ]
    }
    json.dumps(body)  # the REST body
    # On MySQL with GTIDs the connector asks for the binlog by set: the offset holds it.
    at = BinlogPosition("binlog.000002", 135078, "2d19560c-eed5-11f1-a2bc-02fc00000001:1-14")
    offset = offsets_payload("p", at)["offsets"][0]["offset"]
    assert offset == {"file": "binlog.000002", "pos": 135078, "gtids": at.gtid}


def properties(text: str) -> dict[str, str]:
    pairs = [line.split("=", 1) for line in text.splitlines()]
    assert len(pairs) == len({key for key, _ in pairs}), "a setting given twice"
    return dict(pairs)  # type: ignore[arg-type]


def test_both_workers_use_the_json_converter_and_promise_what_our_producer_does() -> None:
    for variant in (DEFAULT, TUNED):
        worker = properties(worker_properties("127.0.0.1:9092", 18083, Path("/o.dat"), variant))
        assert worker["key.converter"] == worker["value.converter"]
        assert worker["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert worker["listeners"] == "http://127.0.0.1:18083"
        assert worker["offset.storage.file.filename"] == "/o.dat"
        assert worker["producer.acks"] == "all"
        assert worker["producer.enable.idempotence"] == "true"
    default = properties(worker_properties("b:9092", 1, Path("/o"), DEFAULT))
    assert not any(key.startswith("producer.linger") for key in default)
    tuned = properties(worker_properties("b:9092", 1, Path("/o"), TUNED))
    assert tuned["producer.linger.ms"] == "5"


def test_a_connector_snapshots_schemas_only_and_keeps_its_history_in_a_file() -> None:
    source = MariaDBEndpoint("127.0.0.1", 3306, "dbus", "secret")
    config = connector_config(
        "peers.x.tuned-wide", source, ["peers_x.wide", "peers_x.ready"], 4242,
        Path("/h/wide.history"), TUNED,
    )  # fmt: skip
    assert config["snapshot.mode"] == "no_data"
    assert config["database.include.list"] == "peers_x"
    assert config["table.include.list"] == "peers_x.wide,peers_x.ready"
    assert config["database.server.id"] == "4242"
    assert config["schema.history.internal.file.filename"] == "/h/wide.history"
    assert config["poll.interval.ms"] == "10"
    default = connector_config("p", source, ["d.t"], 1, Path("/h"), DEFAULT)
    assert "poll.interval.ms" not in default
    assert all(isinstance(value, str) for value in default.values())


def test_the_row_id_is_read_from_keys_with_and_without_their_schema() -> None:
    with_schema = {"schema": {"type": "struct"}, "payload": {"id": 7}}
    assert row_id(json.dumps(with_schema).encode()) == 7
    assert row_id(b'{"id": -1}') == -1


def test_percentiles_are_nearest_rank() -> None:
    ordered = [float(n) for n in range(1, 101)]
    assert percentile(ordered, 0.5) == 50
    assert percentile(ordered, 0.99) == 99
    assert percentile([5.0], 0.99) == 5
    load = SteadyLoad(ordered, committed=100, achieved_rate=998.4)
    assert load.describe() == "p50 50 ms, p99 99 ms (100 of 100 rows, inserted at 998 rows/s)"


def test_a_topics_span_runs_from_its_first_message_stamp_to_its_last(
    kafka_service: KafkaEndpoint, kafka_topic: str
) -> None:
    """Over partitions: the earliest stamp is in one, the latest in another, and a
    partition's middle message counts for nothing."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_service.bootstrap_servers})
    for partition, stamp in [(0, 1_000_500), (1, 1_000_000), (1, 1_001_000), (1, 1_003_250),
                             (2, 1_002_000)]:  # fmt: skip
        producer.produce(kafka_topic, b"x", partition=partition, timestamp=stamp)
    assert producer.flush(30) == 0
    count = TopicCount(kafka_service.bootstrap_servers)
    try:
        assert count(kafka_topic) == 5
        assert count.span(kafka_topic) == pytest.approx(3.25)
    finally:
        count.close()
