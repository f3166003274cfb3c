"""How the binlog source plans a micro-batch: a task per source, or shards of a busy one."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_runtime_config import _config

import dbus_spark.planning.source as planning
from dbus_fn.capture import SourceSpec
from dbus_fn.errors import SourceError, SourceUnreachableError
from dbus_spark.config.runtime import SourceBinding, default_decode_shards
from dbus_spark.planning.source import SHARD_MIN_BYTES, BinlogSourceReader
from dbus_spark.stage.worker import worker_reader
from dbus_spark.state.checkpoint import (
    ProgressFolder,
    forget_reached,
    load_reached,
    record_delivered,
    record_reached,
    take_delivered,
)


def _offset(pos: int, file: str = "bin.000001") -> dict[str, Any]:
    return {"file": file, "pos": pos, "gtid": "", "epoch": 0}


@pytest.fixture
def config_path(tmp_path: Path) -> str:
    config = _config(sources=("a=mysql://u:p@127.0.0.1:1", "b=mysql://u:p@127.0.0.1:1"))
    return str(replace(config, checkpoint_dir=str(tmp_path / "ckpt")).save(tmp_path / "c.json"))


def _plan(path: str, shards: int, **moves: tuple[dict[str, Any], dict[str, Any]]) -> list[Any]:
    reader = BinlogSourceReader(path, shards=shards)
    start = {name: begin for name, (begin, _) in moves.items()}
    end = {name: upto for name, (_, upto) in moves.items()}
    return [(r.source, r.shard, r.shards) for r in reader.partitions(start, end)]


def test_a_small_range_is_one_task(config_path: str) -> None:
    small = (_offset(4), _offset(4 + SHARD_MIN_BYTES - 1))
    assert _plan(config_path, 2, a=small) == [("a", 0, 1)]


def test_a_busy_source_is_read_as_one_shard_per_core(config_path: str) -> None:
    busy = (_offset(4), _offset(4 + SHARD_MIN_BYTES))
    assert _plan(config_path, 3, a=busy) == [("a", 0, 3), ("a", 1, 3), ("a", 2, 3)]
    across_files = (_offset(10**6), _offset(4, "bin.000002"))
    assert _plan(config_path, 2, a=across_files) == [("a", 0, 2), ("a", 1, 2)]


def test_busy_sources_share_the_cores(config_path: str) -> None:
    busy = (_offset(4), _offset(4 + 10 * SHARD_MIN_BYTES))
    assert _plan(config_path, 2, a=busy, b=busy) == [("a", 0, 1), ("b", 0, 1)]
    assert _plan(config_path, 4, a=busy, b=busy) == [
        ("a", 0, 2), ("a", 1, 2), ("b", 0, 2), ("b", 1, 2),
    ]  # fmt: skip


def test_a_source_that_did_not_move_is_not_read(config_path: str) -> None:
    still = (_offset(4), _offset(4))
    assert _plan(config_path, 2, a=still) == []


def _starts(path: str, **moves: tuple[dict[str, Any], dict[str, Any]]) -> list[Any]:
    reader = BinlogSourceReader(path, shards=2)
    start = {name: begin for name, (begin, _) in moves.items()}
    end = {name: upto for name, (_, upto) in moves.items()}
    return [(r.source, r.start["pos"], r.end["pos"]) for r in reader.partitions(start, end)]


def test_a_range_starts_past_what_an_open_read_delivered(config_path: str, tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    record_reached(checkpoint, {"a": {"file": "bin.000001", "pos": 500}})
    # Past the planned start: the range starts there, and keeps its other fields.
    assert _starts(config_path, a=(_offset(100), _offset(900))) == [("a", 500, 900)]
    # All of it delivered already: nothing to read.
    assert _starts(config_path, a=(_offset(100), _offset(400))) == []
    assert _starts(config_path, a=(_offset(100), _offset(500))) == []
    # Behind the planned start (an older note): the planned start holds.
    assert _starts(config_path, a=(_offset(600), _offset(900))) == [("a", 600, 900)]
    # Another source's note does not move this one.
    assert _starts(config_path, b=(_offset(100), _offset(900))) == [("b", 100, 900)]
    assert load_reached(checkpoint) == {"a": {"file": "bin.000001", "pos": 500}}
    forget_reached(checkpoint)
    assert _starts(config_path, a=(_offset(100), _offset(900))) == [("a", 100, 900)]


def test_a_run_s_first_plan_starts_past_what_the_last_run_s_read_noted_as_delivered(
    config_path: str, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "ckpt")
    record_reached(checkpoint, {"a": {"file": "bin.000001", "pos": 300}})
    record_delivered(checkpoint, "a", {"file": "bin.000001", "pos": 500}, ["orders", "old"])
    # A run's first plan takes the note (its deployments all had it), once.
    assert _starts(config_path, a=(_offset(100), _offset(900))) == [("a", 500, 900)]
    assert load_reached(checkpoint) == {"a": {"file": "bin.000001", "pos": 500}}
    assert ProgressFolder.of(checkpoint).read("delivered") == {}


def test_a_note_is_taken_only_where_it_is_further_and_covers_every_deployment(
    tmp_path: Path,
) -> None:
    checkpoint = str(tmp_path / "ckpt")
    record_reached(
        checkpoint, {"a": {"file": "bin.000002", "pos": 4}, "b": {"file": "bin.000001", "pos": 9}}
    )
    record_delivered(checkpoint, "a", {"file": "bin.000001", "pos": 500}, ["orders"])  # behind
    record_delivered(checkpoint, "b", {"file": "bin.000001", "pos": 700}, ["orders"])
    record_delivered(checkpoint, "c", {"file": "bin.000001", "pos": 800}, ["orders"])
    # ``new`` was deployed since: it got none of what the notes cover.
    assert take_delivered(checkpoint, ["orders", "new"]) == {}
    assert load_reached(checkpoint)["b"] == {"file": "bin.000001", "pos": 9}
    record_delivered(checkpoint, "a", {"file": "bin.000001", "pos": 500}, ["orders"])
    record_delivered(checkpoint, "b", {"file": "bin.000001", "pos": 700}, ["orders"])
    record_delivered(checkpoint, "c", {"file": "bin.000001", "pos": 800}, ["orders"])
    assert take_delivered(checkpoint, ["orders"]) == {
        "b": {"file": "bin.000001", "pos": 700}, "c": {"file": "bin.000001", "pos": 800},
    }  # fmt: skip
    assert load_reached(checkpoint)["a"] == {"file": "bin.000002", "pos": 4}
    assert take_delivered(checkpoint, ["orders"]) == {}, "taken once"
    record_delivered(checkpoint, "a", {"file": "bin.000003", "pos": 4}, ["orders"])
    forget_reached(checkpoint)  # a new checkpoint: nothing of the old one's reads
    assert take_delivered(checkpoint, ["orders"]) == {}


def test_what_a_read_task_delivered_itself_adds_up_with_the_writers_counts() -> None:
    from dbus_spark.sinks.batch_commit import TaskReport
    from dbus_spark.stage.counts import SinkCounts

    writer = TaskReport(records=2, kafka=2, seconds=0.5, started=20.0)
    writer.per_source["a"] += 2
    reader = TaskReport(records=5, kafka=3, elasticsearch=2, fenced=0, seconds=2.0, started=10.0)
    reader.per_source.update({"a": 4, "b": 1})
    writer.add_sinks(SinkCounts.from_bytes(reader.sink_counts().to_bytes()))  # as it travels
    assert (writer.records, writer.kafka, writer.elasticsearch) == (7, 5, 2)
    assert (writer.seconds, writer.started) == (2.0, 10.0)
    assert writer.per_source == {"a": 6, "b": 1}
    empty = TaskReport()
    empty.add_sinks(TaskReport().sink_counts())
    assert empty.started == 0.0


def test_where_an_open_read_reached_travels_with_the_stage_counts() -> None:
    from dbus_spark.stage.counts import StageCounts

    one, other = StageCounts(), StageCounts()
    one.reached["a"] = {"file": "bin.000001", "pos": 500}
    other.reached["b"] = {"file": "bin.000002", "pos": 4}
    total = StageCounts.from_bytes(one.to_bytes())
    total.add(other)
    assert total.reached == {"a": {"file": "bin.000001", "pos": 500},
                             "b": {"file": "bin.000002", "pos": 4}}  # fmt: skip


@pytest.mark.parametrize(("cores", "shards"), [(1, 1), (2, 1), (3, 1), (8, 4)])
def test_by_default_a_busy_source_gets_a_shard_per_two_cores(cores: int, shards: int) -> None:
    assert default_decode_shards(cores) == shards


def test_a_source_whose_server_does_not_answer_stays_where_its_last_batch_ended(
    config_path: str,
) -> None:
    """Nothing answers on port 1: the batch reads none of either source, and the
    runtime goes on (its other sources would), up to the reader's ``reconnect_for``."""
    planner = BinlogSourceReader(config_path)
    start = {"a": _offset(100), "b": _offset(200, "bin.000002")}
    try:
        assert planner.latestOffset(start) == start, "no source moved: no micro-batch"
        for reader in planner._readers.values():
            reader.reconnect_for = 0.0
        time.sleep(0.01)
        with pytest.raises(SourceError) as stopped:
            planner.latestOffset(start)
        text = str(stopped.value)
        assert text.startswith("source 'a': its server did not answer for 0s (")
        assert "start the runtime again once the server is back" in text
        assert "\n" not in text and "u:p@" not in text, "one line, no password"
    finally:
        planner.stop()


def test_a_server_that_stops_answering_within_a_plan_is_waited_out_as_one_that_did_not_answer(
    fresh_database: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan asks a source's server more than where its binlog ends (a table's
    definition, a chunk's bounds). A server that stops answering after the first
    question failed the plan, and with it the runtime, where one that did not answer
    the first is waited out. The second question's failure is injected: no real
    server stops between two questions of one plan on cue."""
    config = _config(sources=(f"a={fresh_database.endpoint.dsn}",))
    path = replace(config, checkpoint_dir=str(tmp_path / "ckpt")).save(tmp_path / "c.json")
    planner = BinlogSourceReader(str(path))
    asked: list[int] = []

    def unanswered(*args: Any, **kwargs: Any) -> list[Any]:
        asked.append(1)
        raise SourceUnreachableError("source 'a' at 127.0.0.1:3306 is unreachable (lost)")

    try:
        first = planner.latestOffset(None)
        write = f"CREATE TABLE {fresh_database.name}.t (id INT PRIMARY KEY)"
        with fresh_database.connect() as connection, connection.cursor() as cursor:
            cursor.execute(write)  # the binlog moves: a plan would read it
        monkeypatch.setattr(planning, "plan_chunks", unanswered)
        assert planner.latestOffset(first) == first, "it stays where its last batch ended"
        assert asked, "the plan got as far as the chunks' question"
        assert "a" in planner._unanswered
        monkeypatch.undo()
        moved = planner.latestOffset(first)
        assert moved["a"] != first["a"], "answered again, it is planned as before"
        assert "a" not in planner._unanswered
    finally:
        planner.stop()


def test_a_source_never_read_whose_server_does_not_answer_stops_the_runtime(
    config_path: str,
) -> None:
    planner = BinlogSourceReader(config_path)
    try:
        with pytest.raises(SourceUnreachableError, match=r"^source 'a' at .* is unreachable"):
            planner.latestOffset({"b": _offset(200)})
    finally:
        planner.stop()


def test_a_kafka_source_whose_brokers_do_not_answer_stays_where_its_last_batch_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No broker answers on port 1: the batch reads none of the Kafka source, asked
    briefly once its outage is known, up to ``OUTAGE_SECONDS``; then one line stops the
    runtime. Never read, such a source stops it at once."""
    config = _config(sources=("k=kafka://127.0.0.1:1/dc2.shop.t",))
    path = replace(config, checkpoint_dir=str(tmp_path / "ckpt")).save(tmp_path / "c.json")
    planner = BinlogSourceReader(str(path))
    start = {"k": {"kafka": {"dc2.shop.t": {"0": 12}}}}
    try:
        with pytest.raises(SourceUnreachableError, match=r"^source 'k': Kafka at 127.0.0.1:1 "):
            planner.latestOffset(None)
        assert planner.latestOffset(start) == start, "no source moved: no micro-batch"
        began = time.monotonic()
        assert planner.latestOffset(start) == start
        # Asked unhurried, the topics alone take 5 s to fail; hurried, 2 s.
        assert time.monotonic() - began < 4.5, "a cluster known to be away is asked briefly"
        monkeypatch.setattr(planning, "OUTAGE_SECONDS", 0.0)
        with pytest.raises(SourceError) as stopped:
            planner.latestOffset(start)
        text = str(stopped.value)
        assert text.startswith("source 'k': its brokers did not answer for 0s (")
        assert "start the runtime again once the brokers are back" in text
        assert "\n" not in text
    finally:
        planner.stop()


def test_a_worker_keeps_one_reader_per_source_spec() -> None:
    """Two queries may name their sources alike: the tables decide what a reader reads,
    so a kept reader is only reused for the very same spec (a reader kept by name read
    another test's database, and delivered nothing)."""
    first = SourceBinding(SourceSpec("src", "mysql://u:p@127.0.0.1:1", ("a.*",)), replica_id=7)
    other = replace(first, spec=replace(first.spec, tables=("b.*",)))
    kept = worker_reader(first, 7)
    try:
        assert worker_reader(first, 7) is kept
        assert worker_reader(other, 7) is not kept
        assert worker_reader(first, 8) is not kept
    finally:
        for reader in {kept, worker_reader(other, 7), worker_reader(first, 8)}:
            reader.close()


@pytest.mark.parametrize(
    ("value", "on"),
    [(None, True), ("", True), ("0", False), (" Off ", False), ("false", False), ("no", False),
     ("1", True), ("on", True)],
)  # fmt: skip
def test_reads_are_carried_across_batches_unless_switched_off(value: str | None, on: bool) -> None:
    from dbus_spark.reads import open_read_control

    environ = {} if value is None else {open_read_control.SWITCH: value}
    assert open_read_control.switched_on(environ) is on


@pytest.mark.parametrize("value", ["2", "maybe", "of"])
def test_a_carry_switch_that_is_neither_on_nor_off_is_refused(value: str) -> None:
    from dbus_fn.errors import ConfigError
    from dbus_spark.reads import open_read_control

    with pytest.raises(ConfigError) as caught:
        open_read_control.switched_on({open_read_control.SWITCH: value})
    assert str(caught.value).startswith(f"DBUS_CARRY_OPEN_READS={value!r} is neither on nor off")
    assert caught.value.exit_code == 2
