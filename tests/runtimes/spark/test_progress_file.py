"""One folder beside the checkpoint holds the runtime's progress beyond Spark's offset
log: where each deployment not with the stream stands, how far open reads
delivered, and the history tasks, a file per section."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from pathlib import Path

from dbus_spark.state.checkpoint import (
    ProgressFolder,
    checkpoint_incarnation,
    load_reached,
    progress_path,
    record_reached,
)
from dbus_spark.state.history import HistoryStore
from dbus_spark.state.history.records import HistoryTask
from dbus_spark.state.progress import Behind, ProgressBook, detached

AT = {"file": "bin.000001", "pos": 300}


def test_every_concern_is_a_section_of_one_folder_and_nothing_else_is_written(
    tmp_path: Path,
) -> None:
    checkpoint = str(tmp_path / "ckpt")
    record_reached(checkpoint, {"a": AT})
    ProgressBook(checkpoint).apply([detached("a", "b", AT, "es down")], now=1.0)
    store = HistoryStore(progress_path(checkpoint))
    store.save()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.progress"]
    folder = tmp_path / "ckpt.progress"
    assert sorted(p.name for p in folder.iterdir()) == [
        "deployments.json", "history.json", "reached.json"
    ]
    assert json.loads((folder / "reached.json").read_text()) == {"a": AT}
    deployments = json.loads((folder / "deployments.json").read_text())
    assert deployments["a"]["b"]["reason"] == "es down"
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in folder.iterdir())
    assert load_reached(checkpoint) == {"a": AT}


def test_a_section_written_every_batch_leaves_the_others_files_alone(tmp_path: Path) -> None:
    """A long history is neither written again nor read again for an open read's note."""
    checkpoint = str(tmp_path / "ckpt")
    store = HistoryStore(progress_path(checkpoint))
    store._tasks["a"] = {"b:shop.orders": HistoryTask("b", "shop.orders", ("id",), True)}
    store.save()
    history = tmp_path / "ckpt.progress" / "history.json"
    before = history.stat()
    for pos in range(5):
        record_reached(checkpoint, {"a": {**AT, "pos": pos}})
    after = history.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert ProgressFolder(tmp_path / "ckpt.progress").stamp("history") == before.st_mtime_ns


def test_changes_inside_held_are_written_once_at_its_end(tmp_path: Path) -> None:
    progress = ProgressFolder(tmp_path / "ckpt.progress")
    with progress.held():
        progress.write("reached", {"a": AT})
        progress.update("reached", lambda known: {**known, "b": AT})
        assert progress.read("reached") == {"a": AT, "b": AT}  # what it will write
        assert not progress.file("reached").exists()
    assert ProgressFolder(progress.path).read("reached") == {"a": AT, "b": AT}
    progress.forget("reached")
    assert ProgressFolder(progress.path).read("reached") == {}


def _write_many(path: str, section: str, count: int, name: str) -> None:
    progress = ProgressFolder(path)
    for n in range(count):
        progress.update(section, lambda known, n=n: {**known, f"{name}{n}": n})


def test_two_processes_changing_one_section_at_once_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "ckpt.progress")
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_write_many, args=(path, "reached", 150, name))
        for name in ("a", "b")
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    assert len(ProgressFolder(path).read("reached")) == 300


def test_an_older_runtimes_files_are_read_once_and_folded_in(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    old_book = {"a": {"b": Behind(AT, "es down", 1.0).to_json()}}
    (tmp_path / "ckpt.progress.json").write_text(json.dumps(old_book))
    (tmp_path / "ckpt.reached.json").write_text(json.dumps({"a": AT}))
    task = HistoryTask("b", "shop.orders", ("id",), True)
    (tmp_path / "ckpt.history.json").write_text(
        json.dumps({"tasks": {"a": [task.to_json()]}, "considered": {}, "replays": {}})
    )

    assert ProgressBook(checkpoint).load() == {"a": {"b": Behind(AT, "es down", 1.0)}}
    assert load_reached(checkpoint) == {"a": AT}
    assert list(HistoryStore(progress_path(checkpoint)).tasks("a")) == ["b:shop.orders"]

    record_reached(checkpoint, {"c": AT})  # a section's first write folds its old file in
    ProgressBook(checkpoint).pause("z", {"a": AT})
    HistoryStore(progress_path(checkpoint)).save()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.progress"]
    assert load_reached(checkpoint) == {"a": AT, "c": AT}
    assert ProgressBook(checkpoint).load()["a"]["b"] == Behind(AT, "es down", 1.0)
    assert list(HistoryStore(progress_path(checkpoint)).tasks("a")) == ["b:shop.orders"]


def test_a_history_store_keeps_its_state_when_another_section_changes(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    store = HistoryStore(progress_path(checkpoint))
    with store.saved_once():
        store._tasks["a"] = {  # as consider() makes them, unsaved until the block ends
            "b:shop.orders": HistoryTask("b", "shop.orders", ("id",), True)
        }
        store.save()  # held until the block ends
        assert not store.path.exists()
        record_reached(checkpoint, {"a": AT})  # another process writes its section
        store.reload()
        assert list(store.tasks("a")) == ["b:shop.orders"]
    other = HistoryStore(progress_path(checkpoint))
    assert list(other.tasks("a")) == ["b:shop.orders"]
    other._tasks["a"] = {}
    other.save()
    store.reload()  # what another store wrote is seen
    assert store.tasks("a") == {}


def test_a_book_with_an_entry_it_cannot_read_is_read_as_empty(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "ckpt")
    book = ProgressFolder.of(checkpoint)
    book.write("deployments", {"a": {"b": {"position": AT, "since": 1.0}}})  # no reason
    assert ProgressBook(checkpoint).load() == {}
    book.write("deployments", {"a": ["b"]})
    assert ProgressBook(checkpoint).load() == {}


def _planned(checkpoint: Path) -> None:
    """Spark planned batch 0 there (its offset log's first file)."""
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}\n")


def test_a_checkpoint_deleted_and_begun_again_at_its_path_is_another_incarnation(
    tmp_path: Path,
) -> None:
    """Its exactly-once lanes are scoped by it: a restart keeps them, a checkpoint
    begun again at the same path (its progress folder left behind) gets new ones."""
    checkpoint = tmp_path / "ckpt"
    first = checkpoint_incarnation(str(checkpoint))
    _planned(checkpoint)
    assert checkpoint_incarnation(str(checkpoint)) == first  # a restart
    assert checkpoint_incarnation(str(checkpoint)) == first
    shutil.rmtree(checkpoint)
    assert (tmp_path / "ckpt.progress").is_dir()
    again = checkpoint_incarnation(str(checkpoint))
    _planned(checkpoint)
    assert len(first) == len(again) == 16 and again != first
    assert checkpoint_incarnation(str(checkpoint)) == again


def test_a_checkpoint_begun_before_incarnations_keeps_the_lanes_it_had(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    _planned(checkpoint)
    assert checkpoint_incarnation(str(checkpoint)) == ""
    assert not (tmp_path / "ckpt.progress" / "incarnation.json").exists()
