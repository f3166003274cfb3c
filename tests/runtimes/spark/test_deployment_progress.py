"""Each deployment at its own pace, without servers: the progress book's rules, who a
shared read serves from where, and how a batch is planned around a deployment behind."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_runtime_config import _config

from dbus_fn.events import BinlogPosition
from dbus_fn.testing import insert
from dbus_spark.planning.source import BinlogSourceReader
from dbus_spark.reads.catchup import CatchUpRange
from dbus_spark.reads.range_read import SourceRange
from dbus_spark.stage.counts import StageCounts
from dbus_spark.state.progress import (
    MAX_BACKOFF,
    Admission,
    Behind,
    CaughtUp,
    Detached,
    NotTaken,
    ProgressBook,
    Rejoined,
    caught_up_to,
    detached,
    fold,
    not_taken,
    rejoined,
    start_order,
)


def _at(pos: int) -> dict[str, Any]:
    return {"file": "bin.000001", "pos": pos}


def _change(pos: int) -> Any:
    return replace(insert("shop.orders", id=1), position=BinlogPosition("bin.000001", pos))


def test_a_task_s_pace_events_reach_the_driver_as_the_typed_values_it_made() -> None:
    made = [detached("src", "b", _at(300), "es down", commit_time=5.0),
            caught_up_to("src", "b", _at(400), 50.0, ended=True),
            not_taken("src", "c", "kafka down"), rejoined("src", "b")]  # fmt: skip
    counts = StageCounts()
    counts.progress += made
    back = StageCounts.from_bytes(counts.to_bytes()).progress  # as a task's counts travel
    assert back == made
    assert [type(event) for event in back] == [Detached, CaughtUp, NotTaken, Rejoined]
    assert back[0].position == _at(300) and back[1].ended and back[2].reason == "kafka down"


def test_a_detached_deployment_keeps_the_earliest_position_its_reads_report() -> None:
    book = fold({}, [detached("src", "b", _at(500), "es down"),
                     detached("src", "b", _at(300), "es down")], now=100.0)  # fmt: skip
    behind = book["src"]["b"]
    assert behind.position == _at(300) and behind.reason == "es down"
    assert (behind.since, behind.retry_at, behind.state) == (100.0, 101.0, "detached")
    assert not behind.due(100.5) and behind.due(101.0)


def test_a_catch_up_read_moves_the_position_and_a_refused_one_backs_off() -> None:
    book = fold({}, [detached("src", "b", _at(300), "es down")], now=0.0)
    book = fold(book, [caught_up_to("src", "b", _at(400), 50.0, ended=False)], now=2.0)
    behind = book["src"]["b"]
    assert (behind.position, behind.commit_time, behind.caught_up) == (_at(400), 50.0, False)
    assert behind.state == "catching-up" and behind.reason == "es down"
    for failures in range(1, 9):
        book = fold(book, [not_taken("src", "b", "still down")], now=10.0)
        behind = book["src"]["b"]
        assert behind.failures == failures and behind.position == _at(400)
        assert behind.retry_at == 10.0 + min(MAX_BACKOFF, 2.0 ** (failures - 1))
    assert behind.state == "detached" and behind.reason == "still down"
    book = fold(book, [caught_up_to("src", "b", _at(900), 60.0, ended=True)], now=20.0)
    assert book["src"]["b"].caught_up and not book["src"]["b"].due(20.0)


def test_a_rejoin_ends_it_unless_the_same_batch_detached_it_again() -> None:
    book = fold({}, [detached("src", "b", _at(300), "es down")], now=0.0)
    assert fold(book, [rejoined("src", "b")], now=1.0) == {"src": {}}
    again = fold(book, [rejoined("src", "b"), detached("src", "b", _at(300), "down again")], 1.0)
    assert again["src"]["b"].reason == "down again" and again["src"]["b"].since == 0.0


def test_pause_holds_the_position_and_resume_lets_it_catch_up(tmp_path: Path) -> None:
    book = ProgressBook(str(tmp_path / "ckpt"))
    book.pause("b", {"src": _at(700)})
    paused = book.load()["src"]["b"]
    assert paused.paused and paused.state == "paused" and not paused.due(10**12)
    # A detach or a catch-up read reported meanwhile does not move a paused one.
    book.apply([caught_up_to("src", "b", _at(900), 1.0, ended=True), rejoined("src", "b")])
    assert book.load()["src"]["b"].position == _at(700)
    assert book.resume("b") and not book.resume("a")
    resumed = book.load()["src"]["b"]
    assert not resumed.paused and resumed.due(0.0) and resumed.position == _at(700)


def test_the_book_survives_its_file_and_an_unreadable_one_is_empty(tmp_path: Path) -> None:
    book = ProgressBook(str(tmp_path / "ckpt"))
    assert book.load() == {}
    book.apply([detached("src", "b", _at(300), "es down", commit_time=5.0)], now=1.0)
    assert book.load() == {"src": {"b": Behind(_at(300), "es down", 1.0, 5.0, 2.0)}}
    (tmp_path / "ckpt.progress" / "deployments.json").write_text("{not json")
    assert book.load() == {}


def test_an_admission_leaves_out_some_and_starts_others_at_their_own_position() -> None:
    assert not Admission() and Admission().admits("a", _change(10))
    admission = Admission(frozenset({"c"}), {"b": _at(300)}, start_order(_at(500)))
    assert admission and not admission.admits("c", _change(900))
    assert [admission.admits("b", _change(p)) for p in (300, 301, 600)] == [False, True, True]
    assert [admission.admits("a", _change(p)) for p in (301, 500, 501)] == [False, False, True]
    assert Admission.from_json(admission.to_json()) == admission
    assert not admission.without("a").admits("a", _change(900))


@pytest.fixture
def config_path(tmp_path: Path) -> str:
    config = replace(_config(), checkpoint_dir=str(tmp_path / "ckpt"))
    return str(config.save(tmp_path / "c.json"))


def _offset(pos: int, **behind: dict[str, Any]) -> dict[str, Any]:
    offset: dict[str, Any] = {"file": "bin.000001", "pos": pos, "gtid": "", "epoch": 0}
    if behind:
        offset["behind"] = behind
    return offset


def _behind(pos: int, *, caught_up: bool = False, due: bool | None = None) -> dict[str, Any]:
    due = not caught_up if due is None else due
    return {"position": _at(pos), "caught_up": caught_up, "paused": False, "due": due}


def test_a_deployment_behind_is_left_out_of_the_shared_read_and_read_for_alone(
    config_path: str,
) -> None:
    reader = BinlogSourceReader(config_path)
    end = _offset(900, b=_behind(300), c=_behind(200, due=False))
    live, *rest = reader.partitions({"shop": _offset(500)}, {"shop": end})
    assert isinstance(live, SourceRange) and live.start["pos"] == 500
    assert Admission.from_json(live.admission).left_out == {"b", "c"}
    [catch_up] = rest  # c waits out its backoff
    assert isinstance(catch_up, CatchUpRange)
    assert (catch_up.deployment, catch_up.start, catch_up.end["pos"]) == ("b", _at(300), 900)


def test_a_deployment_behind_while_bootstrapped_reads_alone_through_the_history_gate(
    config_path: str,
) -> None:
    from dbus_spark.state.history import Gate, HistoryTask

    reader = BinlogSourceReader(config_path)
    task = HistoryTask("b", "shop.orders", ("id",), True, bootstrap=True)
    reader._history._tasks["shop"] = {task.id: task}
    live, catch_up = reader.partitions(
        {"shop": _offset(500)}, {"shop": _offset(900, b=_behind(300))}
    )
    assert isinstance(live, SourceRange) and isinstance(catch_up, CatchUpRange)
    assert catch_up.gate is not None and catch_up.gate == live.gate
    assert not Gate.from_json(catch_up.gate).admits("b", _change(400))  # its chunk sends it


def test_a_deployment_whose_own_read_reached_the_batch_end_is_taken_back_from_its_position(
    config_path: str,
) -> None:
    reader = BinlogSourceReader(config_path)
    end = _offset(900, b=_behind(400, caught_up=True))
    [live] = reader.partitions({"shop": _offset(500)}, {"shop": end})
    assert isinstance(live, SourceRange) and live.start["pos"] == 400  # reaches back to b
    admission = Admission.from_json(live.admission)
    assert admission.back == {"b": _at(400)} and admission.default_start == start_order(_at(500))
    # Nothing new for the stream, but b is taken back for what it lacks.
    [only] = reader.partitions({"shop": _offset(900)}, {"shop": _offset(900, b=_behind(
        400, caught_up=True))})  # fmt: skip
    assert isinstance(only, SourceRange) and (only.start["pos"], only.end["pos"]) == (400, 900)
