"""A Kafka source's bad input: each one line with its exit code, nothing read wrong.

The URL's mistakes need no service; the broker, the topic and retention are a real
Kafka's (the local one, and a closed port for a broker that does not answer).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support import free_port

from dbus_fn.cli import cli
from dbus_fn.errors import ConfigError, PositionError
from dbus_spark.config.kafka_source import KafkaSource, parse_kafka_source, ranges
from dbus_spark.planning.kafka_planner import KafkaPlanner
from dbus_spark.spark.preflight import check_kafka_source

MIRROR = str(Path(__file__).resolve().parents[3] / "functions" / "mirror")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("kafka://", "no broker"),
        ("kafka:///orders", "no broker"),
        ("kafka://broker/orders", "is not host:port"),
        ("kafka://broker:99999/orders", "is not host:port"),
        ("kafka://broker:9092", "no topic"),
        ("kafka://broker:9092/orders,", "no topic"),
        ("kafka://broker:9092/orders?group.id=mine", "setting group.id is dbus's own"),
        ("kafka://broker:9092/orders?isolation.level_env=X", "isolation.level is dbus's own"),
    ],
)
def test_a_malformed_kafka_source_is_one_line_naming_the_fix(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_kafka_source("dc2", url)
    message = str(caught.value)
    assert problem in message and "kafka://host:9092/" in message and "\n" not in message
    assert caught.value.exit_code == 2


def test_a_kafka_source_url_names_brokers_topics_and_consumer_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = parse_kafka_source(
        "dc2", "kafka://b1:9092,b2:9093/dbus.shop.*,audit?security.protocol=SSL&ssl.key.password_env=KEYPW"
    )
    assert (source.bootstrap, source.topics) == ("b1:9092,b2:9093", ("dbus.shop.*", "audit"))
    assert source.matches("dbus.shop.orders") and source.matches("audit")
    assert not source.matches("dbus.crm.contacts") and not source.matches("audits")
    with pytest.raises(ConfigError, match="KEYPW, which is not set"):
        source.consumer_settings()
    monkeypatch.setenv("KEYPW", "s3cret")
    settings = source.consumer_settings()
    assert settings["ssl.key.password"] == "s3cret" and settings["security.protocol"] == "SSL"
    assert settings["isolation.level"] == "read_committed" and not settings["enable.auto.commit"]
    assert KafkaSource.from_json(source.to_json()) == source


def test_ranges_are_the_partitions_with_messages_between_two_offsets() -> None:
    begin = {"a": {"0": 5, "1": 9}}
    end = {"a": {"0": 8, "1": 9, "2": 3}, "b": {"0": 1}}
    assert ranges(begin, end) == [("a", 0, 5, 8), ("a", 2, 0, 3), ("b", 0, 0, 1)]
    assert ranges(end, end) == []


def start(tmp_path: Path, source: str) -> Result:
    return CliRunner().invoke(cli, [
        "runtime", "start", "--source", f"dc2={source}", "--functions", MIRROR,
        "--checkpoint", str(tmp_path / "checkpoint"), "--kafka", "127.0.0.1:9092",
        "--elasticsearch", "http://127.0.0.1:9200", "--for", "1",
    ])  # fmt: skip


def one_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("kafka://dc2:hunter2@host:9092/topics", "kafka://dc2:***@host:9092/topics"),
        ("kafka://dc2:hun/ter2@host:9092/topics", "kafka://dc2:***@host:9092/topics"),
        ("kafka://dc2:hun?ter2@host:9092/topics", "kafka://dc2:***@host:9092/topics"),
        ("kafka://dc2:hun@ter2@b1:9092,b2:9092/topics?security.protocol=SASL_SSL",
         "kafka://dc2:***@b1:9092,b2:9092/topics"),
    ],
)  # fmt: skip
def test_a_login_in_a_kafka_source_url_is_refused_under_source_without_its_password(
    tmp_path: Path, url: str, shown: str
) -> None:
    result = start(tmp_path, url)
    line = one_line(result, 2)
    assert f"--source 'dc2={shown}': a user and password in the URL are not read" in line
    assert "sasl.password_env=VARIABLE" in line and "--kafka" not in line
    assert "ter2" not in result.output
    assert not (tmp_path / "checkpoint").exists()


@pytest.mark.integration
def test_a_login_in_the_url_of_a_real_broker_is_refused_before_it_is_asked(
    tmp_path: Path, kafka_service: Any
) -> None:
    brokers = kafka_service.bootstrap_servers
    result = start(tmp_path, f"kafka://dc2:hunter2@{brokers}/dbus-login-{uuid.uuid4().hex[:8]}")
    line = one_line(result, 2)
    assert f"--source 'dc2=kafka://dc2:***@{brokers}/" in line
    assert "hunter2" not in result.output and "--kafka" not in line
    assert not (tmp_path / "checkpoint").exists()


def test_a_login_in_a_kafka_source_from_the_environment_names_the_variable(
    tmp_path: Path,
) -> None:
    result = CliRunner().invoke(
        cli,
        ["runtime", "start", "--functions", MIRROR, "--checkpoint", str(tmp_path / "c"),
         "--kafka", "127.0.0.1:9092", "--elasticsearch", "http://127.0.0.1:9200"],
        env={"DBUS_SOURCES": "dc2=kafka://dc2:hunter2@host:9092/topics"},
    )  # fmt: skip
    line = one_line(result, 2)
    assert "DBUS_SOURCES (from the environment) 'dc2=kafka://dc2:***@host:9092/topics'" in line
    assert "hunter2" not in result.output


def test_a_kafka_source_s_brokers_are_checked_under_its_own_flag() -> None:
    with pytest.raises(ConfigError) as caught:
        check_kafka_source("dc2", "dc2:hunter2@host:9092")
    message = str(caught.value)
    assert message.startswith("--source dc2 'dc2:***@host:9092'") and "--kafka" not in message
    assert "hunter2" not in message


@pytest.mark.integration
def test_a_kafka_source_whose_brokers_do_not_answer_is_exit_3(
    tmp_path: Path, kafka_service: object
) -> None:
    port = free_port()
    line = one_line(start(tmp_path, f"kafka://127.0.0.1:{port}/orders"), 3)
    assert f"Kafka at 127.0.0.1:{port} does not answer" in line and "check that the brokers" in line


@pytest.mark.integration
def test_a_kafka_source_topic_that_does_not_exist_is_exit_2(
    tmp_path: Path, kafka_service: object
) -> None:
    line = one_line(start(tmp_path, "kafka://127.0.0.1:9092/dbus-no-such-topic-4f1c"), 2)
    assert "topic 'dbus-no-such-topic-4f1c' does not exist" in line and "pattern" in line


@pytest.mark.integration
def test_a_setting_the_consumer_refuses_is_exit_2(tmp_path: Path, kafka_service: object) -> None:
    line = one_line(start(tmp_path, "kafka://127.0.0.1:9092/orders?no.such.setting=1"), 2)
    assert "refuses its settings" in line and "no.such.setting" in line


@pytest.mark.integration
def test_offsets_retention_deleted_before_they_were_read_are_refused(
    kafka_service: object, kafka_topic: str
) -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:9092"})
    for n in range(10):
        producer.produce(kafka_topic, value=b"x", partition=0, key=str(n))
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
    for future in admin.delete_records([TopicPartition(kafka_topic, 0, 6)]).values():
        future.result(timeout=30)  # what retention does to messages past their time
    planner = KafkaPlanner(parse_kafka_source("dc2", f"kafka://127.0.0.1:9092/{kafka_topic}"))
    try:
        assert planner.latest({kafka_topic: {"0": 6}})[kafka_topic]["0"] == 10
        with pytest.raises(PositionError) as caught:
            planner.latest({kafka_topic: {"0": 2}})
    finally:
        planner.close()
    message = str(caught.value)
    assert f"topic {kafka_topic} partition 0 no longer holds offset 2 (its first is 6)" in message
    assert "--from earliest" in message and caught.value.exit_code == 4


def test_history_and_pace_of_a_kafka_source_are_refused_with_the_reason() -> None:
    from dbus_fn.manifest import load_manifest
    from dbus_spark.planning.request_models import BackfillRequest, PaceRequest, ReplayRequest
    from dbus_spark.planning.requests import kafka_refusal

    mirror = load_manifest(Path(MIRROR))  # reads the Kafka source dc2 only
    orders = load_manifest(Path(MIRROR).parent / "orders")  # reads the binlog source shop
    manifests = [mirror, orders]
    refusal = kafka_refusal(BackfillRequest("mirror"), manifests, ["shop"], ["dc2"])
    assert refusal is not None and refusal.exit_code == 2
    assert "Kafka source dc2, whose history is its topics' retention" in str(refusal)
    assert "dbus fn replay mirror --from TIME" in str(refusal)
    # A replay reads what the topics keep (tests/e2e/test_kafka_source_dead_letters.py).
    assert kafka_refusal(ReplayRequest("mirror", "2026-01-01T00:00:00Z"), manifests, ["shop"],
                         ["dc2"]) is None  # fmt: skip
    paused = kafka_refusal(PaceRequest("mirror", True), manifests, ["shop"], ["dc2"])
    assert paused is not None and "cannot be held" in str(paused)
    every = load_manifest(Path(MIRROR).parent / "mask_pii")  # names no source: reads all
    refusal = kafka_refusal(BackfillRequest("mask-pii"), [every], ["shop"], [])
    assert refusal is None  # no Kafka source here
    # Its binlog sources are backfilled; pausing it would leave its Kafka source running.
    assert kafka_refusal(BackfillRequest("mask-pii"), [every], ["shop"], ["dc2"]) is None
    assert kafka_refusal(PaceRequest("mask-pii", True), [every], ["shop"], ["dc2"]) is not None
    for request in (ReplayRequest("orders", "2026-01-01T00:00:00Z"), PaceRequest("orders", True)):
        assert kafka_refusal(request, manifests, ["shop"], ["dc2"]) is None
    assert kafka_refusal(BackfillRequest("mirror"), manifests, ["shop"], []) is None


def test_a_busy_partition_is_shared_by_key_among_the_cores_while_partitions_are_few() -> None:
    from dbus_spark.planning.kafka_planner import SHARD_MIN_MESSAGES, kafka_shards
    from dbus_spark.reads.kafka_read import KafkaRange

    assert kafka_shards(SHARD_MIN_MESSAGES - 1, 1, 2) == 1  # too short to share
    assert kafka_shards(SHARD_MIN_MESSAGES, 3, 2) == 2
    assert kafka_shards(100_000, 8, 2) == 1  # enough partitions to keep the cores busy
    shards = [KafkaRange(None, "dc2", "t", 0, 0, 10, shard, 2) for shard in (0, 1)]
    keys = [f'["{n}"]'.encode() for n in range(200)] + [None]
    for key in keys:  # each key in exactly one task
        assert [part.keeps(key) for part in shards].count(True) == 1
    kept = sum(shards[0].keeps(key) for key in keys)
    assert 60 < kept < 140  # shared, not all in one task
    assert KafkaRange(None, "dc2", "t", 0, 0, 10).keeps(b"anything")
