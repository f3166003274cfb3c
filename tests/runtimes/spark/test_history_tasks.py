"""History tasks and the gate, without services: which live changes a deployment
being bootstrapped receives, and how committed chunks add up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import route_code

from dbus_fn.capture import position_to_json
from dbus_fn.events import BinlogPosition
from dbus_fn.testing import update
from dbus_spark.state.history import ChunkDone, Gate, HistoryStore, HistoryTask, Refusal
from dbus_spark.state.history.queries import key_of_text, keys_where
from dbus_spark.state.records import position_order

TABLE = "shop.products"


def at(pos: int, file: str = "binlog.000001") -> dict[str, Any]:
    return position_to_json(BinlogPosition(file, pos))


def change(key: int, pos: int, file: str = "binlog.000001", table: str = TABLE) -> Any:
    event = update(table, {"id": key, "v": 1}, v=2)
    return type(event)(
        event.source, event.database, event.table, event.op, event.before, event.after,
        ("id",), BinlogPosition(file, pos), event.commit_time, event.server_id,
    )  # fmt: skip


def task(done: list[tuple[Any, dict[str, Any]]], **fields: Any) -> HistoryTask:
    """A task with these chunks (upper bound, the position its batch ended at); each
    was read a little later than that."""
    chunks = [(upper, at(since["pos"] + 50, since["file"]), since) for upper, since in done]
    return HistoryTask("catalog", TABLE, ("id",), True, done=chunks,
                       **{"bootstrap": True, **fields})  # fmt: skip


def test_before_any_chunk_is_read_every_change_of_the_table_is_held() -> None:
    gate = Gate([task([])])
    assert not gate.admits("catalog", change(5, 1000))
    assert gate.admits("other", change(5, 1000))  # another deployment: untouched
    assert gate.admits("catalog", change(5, 1000, table="shop.orders"))  # another table


def test_a_read_chunk_admits_only_changes_after_its_batch_ended() -> None:
    gate = Gate([task([([["i", 100]], at(5000)), ([["i", 200]], at(7000))])])
    assert not gate.admits("catalog", change(50, 4999))  # the chunk holds it
    assert not gate.admits("catalog", change(100, 5000))  # its upper bound is inclusive
    assert gate.admits("catalog", change(100, 5001))
    assert not gate.admits("catalog", change(101, 6000))  # second chunk, older than it
    assert gate.admits("catalog", change(200, 7001))
    assert not gate.admits("catalog", change(201, 9999))  # no chunk read there yet


def test_the_last_chunk_is_unbounded_and_positions_order_across_files() -> None:
    gate = Gate([task([([["i", 100]], at(5000)), (None, at(40, "binlog.000002"))])])
    assert not gate.admits("catalog", change(10**9, 9000))  # file 1 is older than file 2
    assert gate.admits("catalog", change(10**9, 41, "binlog.000002"))
    assert position_order(BinlogPosition("binlog.000002", 4)) > position_order(
        BinlogPosition("binlog.000001", 10**8)
    )


def test_the_gate_survives_json() -> None:
    gate = Gate([task([([["i", 100]], at(5000)), (None, at(9000))])])
    again = Gate.from_json(gate.to_json())
    for key, pos in [(1, 4000), (1, 6000), (150, 8000), (150, 9500)]:
        assert again.admits("catalog", change(key, pos)) == gate.admits("catalog", change(key, pos))


def test_a_backfill_and_a_settled_bootstrap_hold_nothing(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.json")
    store._tasks["src"] = {
        "catalog:a": HistoryTask("catalog", "shop.a", ("id",), True, where="id > 5"),
        "catalog:b": HistoryTask("catalog", "shop.b", ("id",), True, live=True, bootstrap=True),
        "catalog:c": HistoryTask("catalog", "shop.c", ("id",), True, bootstrap=True),
        "catalog:d": HistoryTask("catalog", "shop.d", ("id",), True, run=2),
    }
    assert [t.table for t in store.gated("src")] == ["shop.c"]
    # A task stored before the field existed is a bootstrap if it is the first read.
    old = {k: v for k, v in store._tasks["src"]["catalog:c"].to_json().items()
           if k != "bootstrap"}  # fmt: skip
    assert HistoryTask.from_json(old).bootstrap
    assert not HistoryTask.from_json({**old, "run": 2}).bootstrap


def done(task_name: str, lower: Any, upper: Any, pos: int, seq: int, run: int = 1) -> ChunkDone:
    return ChunkDone("src", task_name, lower, upper, at(pos), 10, seq, run, at(pos - 100))


def test_chunks_are_recorded_in_plan_order_and_a_replay_only_moves_positions(
    tmp_path: Path,
) -> None:
    store = HistoryStore(tmp_path / "h.json")
    store._tasks["src"] = {"catalog:shop.products": task([])}
    name = "catalog:shop.products"
    store.record([done(name, [["i", 100]], [["i", 200]], 600, 1),
                  done(name, None, [["i", 100]], 500, 0)])  # fmt: skip
    again = HistoryStore(tmp_path / "h.json")
    recorded = again.tasks("src")[name]
    assert [upper for upper, _, _ in recorded.done] == [[["i", 100]], [["i", 200]]]
    assert recorded.rows == 20 and recorded.cursor == [["i", 200]] and not recorded.finished
    # The same batch replayed after a crash reads its chunks at later positions; where
    # its batch ended (what the gate holds changes back to) stays.
    again.record([done(name, None, [["i", 100]], 800, 0)])
    assert again.tasks("src")[name].done[0][1:] == (at(800), at(400))
    assert again.tasks("src")[name].rows == 20
    # A chunk of an earlier run (before a backfill replaced the task) is ignored.
    again.record([done(name, [["i", 200]], None, 900, 0, run=0)])
    assert again.tasks("src")[name].chunks == 2
    again.record([done(name, [["i", 200]], None, 900, 0)])
    finished = again.tasks("src")[name]
    assert finished.planned_all and finished.finished > 0
    # Once the stream has read past where every chunk's batch ended, the gate lets go;
    # for a deployment not with the stream (detached, paused), once its own read has.
    again.settle("src", BinlogPosition("binlog.000001", 750))
    assert not again.tasks("src")[name].live
    again.settle("src", BinlogPosition("binlog.000001", 800),
                 {"catalog": BinlogPosition("binlog.000001", 700)})  # fmt: skip
    assert not again.tasks("src")[name].live
    again.settle("src", BinlogPosition("binlog.000001", 800),
                 {"other": BinlogPosition("binlog.000001", 700)})  # fmt: skip
    assert again.tasks("src")[name].live


def test_a_deployment_whose_sinks_refused_its_history_is_read_again_after_a_backoff(
    tmp_path: Path,
) -> None:
    from dbus_spark.state.history.records import ReplayTask

    store = HistoryStore(tmp_path / "h.json")
    name = "catalog:shop.products"
    store._tasks["src"] = {name: task([]), "other:shop.a": HistoryTask("other", "shop.a", ("id",),
                                                                       True)}  # fmt: skip
    store._replays["src"] = {"catalog": ReplayTask("catalog", at(4), at(900))}
    refused = Refusal("src", "catalog", "Elasticsearch is down")
    store.refused([refused, refused], now=100.0)  # two chunks of one batch: one refusal
    assert store.waiting("src")["catalog"]["failures"] == 1
    # Nothing of that deployment is planned before its backoff ends; the other's is.
    assert [t.deployment for t in store.due("src", 100.5)] == ["other"]
    assert store.due_replays("src", 100.5) == []
    assert {t.deployment for t in store.due("src", 101.0)} == {"catalog", "other"}
    assert [r.deployment for r in store.due_replays("src", 101.0)] == ["catalog"]
    # Refused again, it waits twice as long; the reason survives a reload.
    store.refused([refused], now=200.0)
    again = HistoryStore(tmp_path / "h.json")
    assert again.waiting("src")["catalog"] == {
        "reason": "Elasticsearch is down", "failures": 2, "retry_at": 202.0,
    }  # fmt: skip
    assert [t.deployment for t in again.due("src", 201.9)] == ["other"]
    # A deployment held (paused, or its stream's sinks refusing) waits whatever its backoff.
    assert [t.deployment for t in again.due("src", 300.0, {"catalog"})] == ["other"]
    assert again.due_replays("src", 300.0, {"catalog"}) == []
    # A chunk its sinks took ends the wait.
    again.record([done(name, None, [["i", 100]], 500, 0)])
    assert again.waiting("src") == {}
    assert {t.deployment for t in again.due("src", 0.0)} == {"catalog", "other"}


def test_a_batch_s_chunks_and_refusals_are_saved_once_at_its_end(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.json")
    name = "catalog:shop.products"
    store._tasks["src"] = {name: task([])}
    refused = Refusal("other", "other", "Kafka is away")
    with store.saved_once():
        store.record([done(name, None, [["i", 100]], 500, 0)])
        store.refused([refused], now=100.0)
        assert not store.path.exists(), "nothing is written before the batch's end"
    again = HistoryStore(tmp_path / "h.json")
    assert again.tasks("src")[name].rows == store.tasks("src")[name].rows > 0
    assert again.waiting("other")["other"]["failures"] == 1
    store.refused([refused], now=200.0)  # outside, each change is saved at once
    assert HistoryStore(tmp_path / "h.json").waiting("other")["other"]["failures"] == 2


@pytest.mark.parametrize(
    ("text", "columns", "key"),
    [("12", 1, ("12",)), ("[12]", 1, (12,)), ('[1,"a"]', 2, (1, "a")), ("[1]", 2, None)],
)
def test_sink_key_texts_name_key_values(text: str, columns: int, key: Any) -> None:
    assert key_of_text(text, columns) == key


def test_keys_are_selected_with_quoted_values() -> None:
    assert keys_where(("id",), [(1,), (2,)]) == "(`id`) IN ((1), (2))"
    assert keys_where(("a", "b"), [(1, "x'y")]) == "(`a`, `b`) IN ((1, 'x\\'y'))"


def test_a_gained_source_takes_its_committed_history_over_once(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.json")
    store._tasks["src"] = {"catalog:shop.products": task([([["i", 100]], at(5000))])}
    store._tasks["other"] = {"catalog:shop.x": HistoryTask("catalog", "shop.x", ("id",), True)}
    store.save()
    committed = store.section("src")
    committed["tasks"][0]["rows"] = 77  # as the last owner committed it
    fresh = HistoryStore(tmp_path / "h.json")
    assert fresh.adopt("src", "rt-2/1", committed)
    assert not fresh.adopt("src", "rt-2/1", {})  # once per gain
    again = HistoryStore(tmp_path / "h.json")
    assert again.adopted("src") == "rt-2/1"
    assert again.tasks("src")["catalog:shop.products"].rows == 77
    assert again.tasks("src")["catalog:shop.products"].cursor == [["i", 100]]
    assert "catalog:shop.x" in again.tasks("other")  # other sources are untouched
    # Gained again later, with nothing committed: everything of it is forgotten.
    assert again.adopt("src", "rt-2/2", {})
    assert HistoryStore(tmp_path / "h.json").tasks("src") == {}


def test_a_cluster_request_is_handed_to_the_driver_once_and_answered_back(
    tmp_path: Path,
) -> None:
    from dbus_spark.planning.mailbox import answer, forward, pending
    from dbus_spark.planning.request_models import Answer, answer_from_json

    checkpoint = str(tmp_path / "checkpoint")
    r1 = "1" * 32  # the id ZooKeeper's request box gave it
    body = {"kind": "backfill", "id": "a" * 32, "deployment": "catalog", "tables": []}
    assert forward(checkpoint, body, r1, "shop") is None
    assert forward(checkpoint, body, r1, "shop") is None  # not handed over twice
    ((request, only),) = list(pending(checkpoint))
    assert (request.id, request.deployment, only) == (f"{r1}-shop", "catalog", "shop")
    answer(checkpoint, request, Answer(True, "started 1 table read(s)", (("shop", "t"),)))
    assert list(pending(checkpoint)) == []
    reply = forward(checkpoint, body, r1, "shop")
    assert reply is not None and answer_from_json(reply).tasks == (("shop", "t"),)


def test_chunks_are_sized_to_the_rate_their_reads_went_at(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h.json")
    name = "catalog:shop.products"
    store._tasks["src"] = {name: task([])}
    fresh = store.tasks("src")[name]
    assert fresh.chunk_rows(10_000) == 2_000  # the rate is not known yet
    assert fresh.chunk_rows(500) == 500  # never more than asked
    slow = ChunkDone("src", name, None, [["i", 100]], at(600), 4_001, 0, 1, at(500), 2.0)
    store.record([slow])
    recorded = HistoryStore(tmp_path / "h.json").tasks("src")[name]
    assert recorded.rate == 2_000.0
    assert recorded.chunk_rows(10_000) == 1_500  # 0.75 s at 2,000 rows/s
    fast = ChunkDone("src", name, [["i", 100]], [["i", 200]], at(700), 4_001, 0, 1, at(650), 0.2)
    store.record([fast])
    assert store.tasks("src")[name].rate == 11_000.0  # halfway to the newest rate
    assert store.tasks("src")[name].chunk_rows(10_000) == 8_250
    one = ChunkDone("src", name, [["i", 200]], [["i", 300]], at(800), 1, 0, 1, at(750), 0.0)
    store.record([one])
    assert store.tasks("src")[name].rows == 8_003
    assert store.tasks("src")[name].rate == 11_000.0  # one row tells no rate
    store.tasks("src")[name].rate = 10.0
    assert store.tasks("src")[name].chunk_rows(10_000) == 200  # a floor for slow tables
    assert store.tasks("src")[name].chunk_rows(100) == 100  # below the floor when asked


def test_a_deployment_gets_no_change_of_a_table_before_its_history_is_planned() -> None:
    # A cluster member: the stage may run a deployment the driver has not considered.
    gate = Gate([], {"catalog": ["shop.*"], "audit": []})
    assert gate.admits("catalog", change(5, 1000))
    assert not gate.admits("audit", change(5, 1000))  # no table of it planned yet
    assert not gate.admits("new", change(5, 1000))  # not seen at all yet
    assert not gate.admits("catalog", change(5, 1000, table="other.orders"))
    again = Gate.from_json(gate.to_json())
    assert again.admits("catalog", change(5, 1000)) and not again.admits("new", change(5, 1))
    assert not Gate([]) and Gate([], {})  # alone, no task: no gate at all


def test_a_new_owner_reads_again_what_the_last_one_planned_and_did_not_commit(
    tmp_path: Path,
) -> None:
    name = "catalog:shop.products"
    committed = {"tasks": [task([([["i", 100]], at(5000))]).to_json()]}
    planned = [
        {"end": at(5000), "chunks": [[name, None, [["i", 100]], 1]]},  # committed since
        {"end": at(6000), "chunks": [[name, [["i", 100]], [["i", 200]], 1],
                                     [name, [["i", 200]], [["i", 300]], 1]]},
        {"end": at(6100), "chunks": [["gone:shop.x", None, None, 1]]},  # no such task
        {"end": at(7000), "chunks": [[name, [["i", 300]], None, 1]]},
    ]  # fmt: skip
    from dbus_spark.state.history.plans import open_plans

    still = open_plans(planned, committed)
    assert [plan["end"] for plan in still] == [at(6000), at(7000)]
    store = HistoryStore(tmp_path / "h.json")
    store.adopt("src", "rt-2/1", {**committed, "plans": still})
    end, chunks = store.next_replan("src") or ({}, [])
    # The same chunks, in a micro-batch that ends where the planned one did.
    assert end == at(6000) and [c.upper for c in chunks] == [[["i", 200]], [["i", 300]]]
    store.replanned("src")
    end, chunks = store.next_replan("src") or ({}, [])
    assert end == at(7000) and [c.upper for c in chunks] == [None]
    store.replanned("src")
    assert store.next_replan("src") is None


def test_a_deployment_s_own_read_is_gated_as_the_shared_read_is(function_folder: Any) -> None:
    """A deployment detached while it is bootstrapped catches up through the same gate:
    a change its chunks bring instead never comes before (or after) their rows."""
    from dbus_spark.config.runtime import deployment_folders
    from dbus_spark.stage.counts import StageCounts
    from dbus_spark.stage.functions import FunctionStage

    folder = function_folder("catalog", route_code(TABLE, "kafka://products"), [TABLE])
    stage = FunctionStage(deployment_folders((str(folder),)), type_prefix="dbus")
    gate = Gate([task([([["i", 100]], at(5000))])])
    counts = StageCounts()
    held = list(stage.process_only("catalog", change(50, 4000), counts, gate=gate))
    newer = list(stage.process_only("catalog", change(50, 6000), counts, gate=gate))
    unread = list(stage.process_only("catalog", change(150, 6000), counts, gate=gate))
    assert (len(held), len(newer), len(unread)) == (0, 1, 0)
    assert counts.held["catalog"] == 2
    assert len(list(stage.process_only("catalog", change(50, 4000), StageCounts()))) == 1
