"""The JSON the runtime's values were written in is read back, and written again alike.

Files beside a Spark checkpoint, offsets in Spark's log and a cluster's records in
ZooKeeper outlive the runtime that wrote them: a new runtime reads what an older one
wrote (older still: without the keys added since, which take their old defaults),
and an older runtime reads what a new one writes. Each JSON text here is what the
runtime wrote before its values became pydantic dataclasses.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dbus_fn.capture import SourceSpec
from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX
from dbus_fn.coordination import ZooKeeperSettings
from dbus_fn.errors import DsnError
from dbus_fn.events import BinlogPosition
from dbus_fn.manifest import Destination
from dbus_spark.config.kafka_source import KafkaSource
from dbus_spark.config.runtime import (
    DEFAULT_CHUNK_ROWS,
    DEFAULT_DETACH_SECONDS,
    DEFAULT_OPEN_READ_SECONDS,
    DEFAULT_PREVIEW_WINDOW,
    DeploymentFolder,
    RuntimeConfig,
    SourceBinding,
    WriteFencing,
)
from dbus_spark.sinks.batch_commit import TaskReport
from dbus_spark.stage.counts import StageCounts, counter_of_pairs
from dbus_spark.state.history.records import (
    ChunkDone,
    HistoryTask,
    PlannedChunk,
    Refusal,
    ReplayPart,
    ReplayTask,
)
from dbus_spark.state.progress import Admission, Behind, CaughtUp, Detached

ORDERS = str(Path(__file__).resolve().parents[3] / "functions" / "orders")
AT = {"file": "binlog.000003", "pos": 4711, "gtid": "0-1-42"}
EARLIER = {"file": "binlog.000003", "pos": 4000}

KAFKA_SOURCE = """{"name": "dc2", "bootstrap": "b1:9092,b2:9092", "topics": ["dbus.shop.*",
"orders"], "settings": {"security.protocol": "SASL_SSL", "sasl.password_env":
"DC2_PASSWORD"}, "start": {"orders": {"0": 120, "1": 7}}}"""
FOLDER = """{"name": "orders-eu", "path": "/srv/functions/orders"}"""
FENCING = """{"zookeeper": {"hosts": "zk1:2181,zk2:2181", "cluster": "prod", "auth": null,
"root": null, "connect_timeout": 10.0, "session_timeout": 20.0}, "runtime_id": "rt-a",
"transaction_timeout": 3.0, "hold_seconds": 1.5}"""
CONFIG = f"""{{"sources": [{{"name": "shop", "dsn": "mysql://dbus@127.0.0.1:3306", "tables":
["shop.orders", "shop.items"], "keep_helper_tables": true, "replica_id": 2134567, "start":
{{"file": "binlog.000003", "pos": 4711, "gtid": "0-1-42"}}, "epoch": 2, "generation": 5,
"shard_replica_ids": [2134568], "history": {{"tasks": []}}, "taken": "taken-1"}}],
"deployments": [{FOLDER}], "kafka_bootstrap": "127.0.0.1:9092", "elasticsearch_url":
"http://127.0.0.1:9200", "checkpoint_dir": "/var/lib/dbus/ckpt", "trigger_seconds": 0.5,
"type_prefix": "io.dbus", "topic_partitions": 6, "decode_shards": 2, "fencing": {FENCING},
"chunk_rows": 5000, "open_read_seconds": 1.5, "detach_seconds": 4.0, "extra": {{"note":
"x"}}, "kafka_sources": [{KAFKA_SOURCE}], "preview_window": 50, "exactly_once_deployments":
["orders-eu"], "incarnation": "5e1f0c2a9b3d4e6f"}}"""
STAGE = """{"rows": 10, "ddl": 1, "read_seconds": 0.8, "started": 1767312000.25, "tables":
[["shop", "shop.orders", 10]], "offered": [["shop", "shop.orders", "orders-eu", 10]],
"routed": [["orders-eu", "kafka://orders.paid", 9]], "delivered": {"orders-eu": 8},
"filtered": {"orders-eu": 1}, "dead": {"orders-eu": 1}, "positions": {"shop":
"binlog.000003:4711"}, "last_commit": {"shop": 1767312000.5}, "held": {"orders-eu": 2},
"snapshot_rows": {"orders-eu": 3}, "chunks": [{"source": "shop", "task":
"orders-eu:shop.items", "lower": null, "upper": [["i", 100]], "position": {"file":
"binlog.000003", "pos": 4711}, "rows": 3, "seq": 0, "run": 1, "since": {"file":
"binlog.000003", "pos": 4000}, "seconds": 0.5}], "replays": [{"source": "shop",
"deployment": "orders-eu", "run": 1, "start": {"file": "binlog.000003", "pos": 4}, "stop":
{"file": "binlog.000003", "pos": 4711}, "rows": 4, "ended": false}], "reached": {"shop":
{"file": "binlog.000003",
"pos": 4711, "gtid": "0-1-42"}}, "busy": {"orders-eu": 0.25}, "progress": [{"kind":
"detached", "source": "shop", "deployment": "orders-eu", "position": {"file":
"binlog.000003", "pos": 4711, "gtid": "0-1-42"}, "reason": "es down", "commit_time":
1767311999.0}, {"kind": "read", "source": "shop", "deployment": "orders-eu", "position":
{"file": "binlog.000003", "pos": 4711, "gtid": "0-1-42"}, "commit_time": 1767311999.5,
"ended": true}], "refused": [{"source": "shop", "deployment": "orders-eu", "reason":
"timeout"}], "recent": [["shop", "shop.orders", ["{\\"id\\": \\"e1\\"}"]]]}"""
REPORT = f"""{{"records": 9, "kafka": 8, "elasticsearch": 1, "fenced": 0, "already": 0,
"seconds": 0.4, "started": 1767312000.0, "read_seconds": 0.8, "per_source": {{"shop": 10}}, "stage":
{STAGE}}}"""
PLANNED = """["orders-eu:shop.items", [["id", 100]], [["id", 200]], 2]"""
CHUNK_DONE = """{"source": "shop", "task": "orders-eu:shop.items", "lower": [["id", 100]],
"upper": [["id", 200]], "position": {"file": "binlog.000003", "pos": 4711, "gtid":
"0-1-42"}, "rows": 100, "seq": 3, "run": 2, "since": {"file": "binlog.000003", "pos":
4000}, "seconds": 0.75}"""
TASK = """{"deployment": "orders-eu", "table": "shop.items", "key": ["id"], "splittable":
true, "unchunked": false, "done": [[[["id", 100]], {"file": "binlog.000003", "pos": 4711,
"gtid": "0-1-42"}, {"file": "binlog.000003", "pos": 4000}]], "rows": 100, "started":
1767311000.0, "finished": 0.0, "live": false, "run": 2, "where": "id > 5",
"estimated_rows": 1000, "deletes": [["kafka://orders", "[7]"]], "repair": false, "rate":
130.5, "bootstrap": false}"""
REPLAY = """{"deployment": "orders-eu", "start": {"file": "binlog.000001", "pos": 4}, "end":
{"file": "binlog.000003", "pos": 4711, "gtid": "0-1-42"}, "route": "kafka://shadow",
"since": 1767300000.0, "until": 1767310000.0, "cursor": {"file": "binlog.000002", "pos":
99}, "rows": 42, "run": 3, "started": 1767311000.0, "finished": 0.0}"""
BEHIND = """{"position": {"file": "binlog.000003", "pos": 4711, "gtid": "0-1-42"}, "reason":
"es down", "since": 1767311999.0, "commit_time": 1767311998.5, "retry_at": 1767312001.0,
"failures": 2, "caught_up": false, "paused": false}"""
ADMISSION = """{"left_out": ["audit", "search"], "back": {"orders-eu": {"file":
"binlog.000003", "pos": 4711, "gtid": "0-1-42"}}, "default_start": 4711}"""


def _old(text: str) -> Any:
    return json.loads(text)


def _without(data: dict[str, Any], *kept: str) -> dict[str, Any]:
    """What an older runtime wrote: only the keys ``kept``."""
    return {key: data[key] for key in kept}


def test_a_kafka_source_reads_and_writes_its_old_json() -> None:
    source = KafkaSource.from_json(_old(KAFKA_SOURCE))
    assert source == KafkaSource(
        "dc2", "b1:9092,b2:9092", ("dbus.shop.*", "orders"),
        {"security.protocol": "SASL_SSL", "sasl.password_env": "DC2_PASSWORD"},
        {"orders": {"0": 120, "1": 7}},
    )  # fmt: skip
    assert source.to_json() == _old(KAFKA_SOURCE)
    older = KafkaSource.from_json(_without(_old(KAFKA_SOURCE), "name", "bootstrap", "topics"))
    assert (older.settings, older.start) == ({}, "latest")


def test_a_deployment_folder_reads_and_writes_its_old_json() -> None:
    folder = DeploymentFolder.from_json(_old(FOLDER))
    assert folder == DeploymentFolder("orders-eu", "/srv/functions/orders")
    assert folder.to_json() == _old(FOLDER)
    # Written before deployments had names of their own: a path, named by its manifest,
    # or by its last part once the folder is gone.
    assert DeploymentFolder.from_json(ORDERS) == DeploymentFolder("orders", ORDERS)
    assert DeploymentFolder.from_json("/gone/shop-sync") == DeploymentFolder(
        "shop-sync", "/gone/shop-sync"
    )


def test_write_fencing_reads_and_writes_its_old_json() -> None:
    fencing = WriteFencing.from_json(_old(FENCING))
    assert fencing == WriteFencing(
        ZooKeeperSettings("zk1:2181,zk2:2181", "prod", None, 10.0, 20.0), "rt-a", 3.0, 1.5
    )
    assert fencing.to_json() == _old(FENCING)


def test_a_runtime_config_reads_and_writes_its_old_json() -> None:
    config = RuntimeConfig.from_json(_old(CONFIG))
    (binding,) = config.sources
    assert binding == SourceBinding(
        SourceSpec("shop", "mysql://dbus@127.0.0.1:3306", ("shop.orders", "shop.items"), True),
        2134567, BinlogPosition("binlog.000003", 4711, "0-1-42"), 2, 5, (2134568,),
        {"tasks": []}, "taken-1",
    )  # fmt: skip
    assert config.deployments == (DeploymentFolder("orders-eu", "/srv/functions/orders"),)
    assert config.fencing == WriteFencing.from_json(_old(FENCING))
    assert config.kafka_sources == (KafkaSource.from_json(_old(KAFKA_SOURCE)),)
    assert (config.trigger_seconds, config.topic_partitions, config.preview_window) == (0.5, 6, 50)
    assert config.exactly_once_deployments == ("orders-eu",)
    assert config.writes_once("orders-eu") and config.exactly_once
    assert config.incarnation == "5e1f0c2a9b3d4e6f"
    assert config.to_json() == _old(CONFIG)


def test_an_older_runtime_config_takes_the_defaults_of_the_keys_it_lacks() -> None:
    data = _without(
        _old(CONFIG), "sources", "deployments", "kafka_bootstrap", "elasticsearch_url",
        "checkpoint_dir",
    )  # fmt: skip
    data["sources"] = [
        {**_without(data["sources"][0], "name", "dsn", "tables", "replica_id"), "start": "latest"}
    ]
    data["deployments"] = [ORDERS]
    config = RuntimeConfig.from_json(data)
    assert config == RuntimeConfig(
        (SourceBinding(SourceSpec("shop", "mysql://dbus@127.0.0.1:3306",
                                  ("shop.orders", "shop.items")), 2134567),),
        (DeploymentFolder("orders", ORDERS),), "127.0.0.1:9092", "http://127.0.0.1:9200",
        "/var/lib/dbus/ckpt",
    )  # fmt: skip
    assert (config.type_prefix, config.chunk_rows, config.preview_window) == (
        DEFAULT_TYPE_PREFIX, DEFAULT_CHUNK_ROWS, DEFAULT_PREVIEW_WINDOW,
    )  # fmt: skip
    assert (config.open_read_seconds, config.detach_seconds, config.fencing) == (
        DEFAULT_OPEN_READ_SECONDS, DEFAULT_DETACH_SECONDS, None,
    )  # fmt: skip


def test_a_dsn_refused_in_a_config_is_refused_as_a_dsn_is() -> None:
    data = _old(CONFIG)
    data["sources"][0]["dsn"] = "postgres://dbus@127.0.0.1:5432"
    with pytest.raises(DsnError, match="unsupported scheme 'postgres'"):
        RuntimeConfig.from_json(data)


def test_a_config_it_cannot_read_is_refused_without_its_passwords() -> None:
    data = _old(CONFIG)
    data["sources"] = [{"dsn": "mysql://dbus:secretpw@127.0.0.1:3306", "replica_id": 1}]
    with pytest.raises((KeyError, ValueError), match="name") as caught:
        RuntimeConfig.from_json(data)
    assert "secretpw" not in str(caught.value)


def _stage() -> StageCounts:
    counts = StageCounts(rows=10, ddl=1, read_seconds=0.8, started=1767312000.25)
    counts.tables[("shop", "shop.orders")] += 10
    counts.offered[("shop", "shop.orders", "orders-eu")] += 10
    counts.routed[("orders-eu", Destination.parse("kafka://orders.paid"))] += 9
    counts.delivered["orders-eu"] += 8
    counts.filtered["orders-eu"] += 1
    counts.dead["orders-eu"] += 1
    counts.positions["shop"] = "binlog.000003:4711"
    counts.last_commit["shop"] = 1767312000.5
    counts.held["orders-eu"] += 2
    counts.snapshot_rows["orders-eu"] += 3
    counts.chunks.append(ChunkDone(
        "shop", "orders-eu:shop.items", None, [["i", 100]], {"file": "binlog.000003", "pos": 4711},
        3, 0, 1, {"file": "binlog.000003", "pos": 4000}, 0.5,
    ))  # fmt: skip
    counts.replays.append(ReplayPart(
        "shop", "orders-eu", 1, {"file": "binlog.000003", "pos": 4},
        {"file": "binlog.000003", "pos": 4711}, 4, False,
    ))  # fmt: skip
    counts.reached["shop"] = AT
    counts.busy["orders-eu"] += 0.25
    counts.progress += [
        Detached("shop", "orders-eu", AT, "es down", 1767311999.0),
        CaughtUp("shop", "orders-eu", AT, 1767311999.5, True),
    ]
    counts.refused.append(Refusal("shop", "orders-eu", "timeout"))
    counts.recent[("shop", "shop.orders")] = ['{"id": "e1"}']
    return counts


def test_stage_counts_read_and_write_their_old_json() -> None:
    counts = StageCounts.from_bytes(STAGE.encode())
    read = _stage()
    read.routed = counter_of_pairs([["orders-eu", "kafka://orders.paid", 9]])  # as text
    assert counts == read
    assert json.loads(_stage().to_bytes()) == _old(STAGE)
    again = StageCounts.from_bytes(counts.to_bytes())
    assert again == counts and again.to_json() == _old(STAGE)


def test_older_stage_counts_take_the_defaults_of_the_keys_they_lack() -> None:
    kept = ("rows", "ddl", "read_seconds", "delivered", "filtered", "dead")
    counts = StageCounts.from_bytes(json.dumps(_without(_old(STAGE), *kept)))
    assert counts == StageCounts(
        rows=10, ddl=1, read_seconds=0.8, delivered=Counter({"orders-eu": 8}),
        filtered=Counter({"orders-eu": 1}), dead=Counter({"orders-eu": 1}),
    )  # fmt: skip


def test_a_task_report_writes_its_old_json() -> None:
    report = TaskReport(
        records=9, kafka=8, elasticsearch=1, seconds=0.4, started=1767312000.0,
        per_source=Counter({"shop": 10}), stage=_stage(),
    )  # fmt: skip
    assert json.loads(json.dumps(report.to_json())) == _old(REPORT)
    # One written before ``already`` was counted reads as none dropped.
    before = {key: value for key, value in _old(REPORT).items() if key != "already"}
    assert TaskReport.from_json(before).already == 0


def test_a_planned_chunk_reads_and_writes_its_old_list() -> None:
    chunk = PlannedChunk.from_json(_old(PLANNED))
    assert chunk == PlannedChunk("orders-eu:shop.items", [["id", 100]], [["id", 200]], 2)
    assert chunk.to_json() == _old(PLANNED)
    whole = PlannedChunk.from_json(["orders-eu:shop.items", None, None, 1])
    assert (whole.lower, whole.upper, whole.run) == (None, None, 1)


def test_a_finished_chunk_reads_and_writes_its_old_json() -> None:
    done = ChunkDone.from_json(_old(CHUNK_DONE))
    assert done == ChunkDone(
        "shop", "orders-eu:shop.items", [["id", 100]], [["id", 200]], AT, 100, 3, 2, EARLIER, 0.75
    )
    assert done.to_json() == _old(CHUNK_DONE)
    kept = ("source", "task", "lower", "upper", "position", "rows", "seq")
    older = ChunkDone.from_json(_without(_old(CHUNK_DONE), *kept))
    assert (older.run, older.since, older.seconds) == (1, AT, 0.0)  # since: its position
    assert ChunkDone.from_json({**_old(CHUNK_DONE), "since": {}}).since == AT


def test_a_history_task_reads_and_writes_its_old_json() -> None:
    task = HistoryTask.from_json(_old(TASK))
    assert task == HistoryTask(
        "orders-eu", "shop.items", ("id",), True, done=[([["id", 100]], AT, EARLIER)],
        rows=100, started=1767311000.0, run=2, where="id > 5", estimated_rows=1000,
        deletes=[("kafka://orders", "[7]")], rate=130.5,
    )  # fmt: skip
    assert task.to_json() == _old(TASK)


def test_an_older_history_task_is_a_bootstrap_when_it_was_a_first_plain_read() -> None:
    older = _without(_old(TASK), "deployment", "table", "key", "splittable")
    task = HistoryTask.from_json(older)
    assert task == HistoryTask("orders-eu", "shop.items", ("id",), True, bootstrap=True)
    assert not HistoryTask.from_json({**older, "run": 2}).bootstrap
    assert not HistoryTask.from_json({**older, "where": "id > 5"}).bootstrap
    assert not HistoryTask.from_json({**older, "repair": True}).bootstrap
    assert not HistoryTask.from_json({**older, "bootstrap": False}).bootstrap


def test_a_replay_reads_and_writes_its_old_json() -> None:
    replay = ReplayTask.from_json(_old(REPLAY))
    assert replay == ReplayTask(
        "orders-eu", {"file": "binlog.000001", "pos": 4}, AT, "kafka://shadow", 1767300000.0,
        1767310000.0, {"file": "binlog.000002", "pos": 99}, 42, 3, 1767311000.0, 0.0,
    )  # fmt: skip
    assert replay.to_json() == _old(REPLAY)
    older = ReplayTask.from_json(_without(_old(REPLAY), "deployment", "start", "end"))
    assert older == ReplayTask("orders-eu", {"file": "binlog.000001", "pos": 4}, AT)


def test_a_deployment_behind_reads_and_writes_its_old_json() -> None:
    behind = Behind.from_json(_old(BEHIND))
    assert behind == Behind(AT, "es down", 1767311999.0, 1767311998.5, 1767312001.0, 2)
    assert behind.to_json() == _old(BEHIND)
    older = Behind.from_json(_without(_old(BEHIND), "position", "reason", "since"))
    assert older == Behind(AT, "es down", 1767311999.0)
    # As a cluster member commits it, with its state beside it.
    assert Behind.from_json({**_old(BEHIND), "state": "detached"}) == behind


def test_an_admission_reads_and_writes_its_old_json() -> None:
    admission = Admission.from_json(_old(ADMISSION))
    assert admission == Admission(frozenset({"search", "audit"}), {"orders-eu": AT}, 4711)
    assert admission.to_json() == _old(ADMISSION)
    assert Admission.from_json(None) == Admission.from_json({}) == Admission()
