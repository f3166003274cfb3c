"""Where a checkpoint is and where the runtime's own files go with it: a local
folder keeps them beside it; a Hadoop file system URI keeps them on the driver's
disk, where every command given the same ``--checkpoint`` finds them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dbus_fn.errors import ConfigError
from dbus_spark.interfaces.settings import (
    checkpoint_dir,
    default_home,
    member_config,
    runtime_config,
)
from dbus_spark.state.checkpoint import (
    address_path,
    beside,
    check_creatable,
    committed_positions,
    is_uri,
    last_config_path,
    local_folder,
    local_twin,
    pending_batch,
    progress_path,
    reports_dir,
    requests_dir,
    resolve,
)

ORDERS = Path(__file__).resolve().parents[3] / "functions" / "orders"


def test_a_local_checkpoint_is_made_absolute_and_a_uri_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("here/checkpoint") == str(tmp_path / "here" / "checkpoint")
    assert (
        resolve("hdfs://namenode:8020/dbus/checkpoint/") == "hdfs://namenode:8020/dbus/checkpoint"
    )
    assert resolve("S3A://bucket/dbus") == "s3a://bucket/dbus"
    assert resolve("file:///var/lib/dbus/checkpoint") == "file:///var/lib/dbus/checkpoint"
    assert is_uri("file:///x") and is_uri("abfs://c@a.dfs.core.windows.net/x")
    assert not is_uri("/var/lib/dbus/checkpoint") and not is_uri("c:/x")


@pytest.mark.parametrize(
    ("given", "example"),
    [
        ("hdfs://namenode:8020", "hdfs://host/var/lib/dbus/checkpoint"),
        ("s3a://bucket/", "s3a://host/var/lib/dbus/checkpoint"),
        ("file://relative/folder", "file:///var/lib/dbus/checkpoint"),
        ("file://", "file:///var/lib/dbus/checkpoint"),
    ],
)
def test_a_uri_without_a_folder_is_one_line_naming_the_form(given: str, example: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve(given)
    message = str(raised.value)
    assert message == f"--checkpoint {given!r} names no folder; write it as {example}"
    assert raised.value.exit_code == 2
    assert raised.value.setting == "checkpoint"


def test_a_local_checkpoint_keeps_the_runtime_files_beside_it(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "cp")
    config = runtime_config(
        sources=("src=mysql://u:p@127.0.0.1:3306",), deployments=(str(ORDERS),),
        kafka="127.0.0.1:9092",
        elasticsearch="http://127.0.0.1:9200", checkpoint=checkpoint,
    )  # fmt: skip
    assert last_config_path(config.checkpoint_dir) == tmp_path / "cp.config.json"
    assert progress_path(checkpoint) == tmp_path / "cp.progress"
    assert reports_dir(checkpoint) == tmp_path / "cp.reports"
    assert requests_dir(checkpoint) == tmp_path / "cp.requests"
    assert address_path(checkpoint) == tmp_path / "cp.api"
    assert local_folder(checkpoint) == tmp_path


@pytest.mark.parametrize(
    ("checkpoint", "says"),
    [
        ("/proc/dbus-test/cp", "cannot create /proc/dbus-test ("),
        ("/sys/dbus-test/cp", "cannot create /sys/dbus-test ("),
        ("/sys/kernel", "cannot write in /sys/kernel ("),
        ("file:///proc/dbus-test/cp", "cannot create /proc/dbus-test ("),
    ],
)
def test_a_checkpoint_the_runtime_cannot_make_or_write_is_refused_before_spark(
    checkpoint: str, says: str
) -> None:
    # /proc and /sys refuse even root, whom a folder made read-only would not stop.
    with pytest.raises(ConfigError) as raised:
        runtime_config(
            sources=("src=mysql://u:p@127.0.0.1:3306",), deployments=(str(ORDERS),),
            kafka="127.0.0.1:9092", elasticsearch="http://127.0.0.1:9200",
            checkpoint=checkpoint,
        )  # fmt: skip
    message = str(raised.value)
    assert message.startswith(f"checkpoint {checkpoint}: {says}")
    assert message.endswith("); choose a writable folder with --checkpoint")
    assert raised.value.exit_code == 2 and raised.value.setting == "checkpoint"
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        member_config(kafka="127.0.0.1:9092", elasticsearch="http://127.0.0.1:9200",
                      checkpoint=checkpoint)  # fmt: skip
    # A command that only reads what a runtime left there is not refused.
    assert checkpoint_dir(checkpoint) == resolve(checkpoint)


def test_making_sure_a_checkpoint_can_be_written_leaves_nothing_behind(tmp_path: Path) -> None:
    (tmp_path / "cp").mkdir()
    check_creatable(str(tmp_path / "cp"))
    check_creatable(str(tmp_path / "new" / "cp"))
    check_creatable("hdfs://namenode:8020/dbus/checkpoint")  # the driver's Hadoop client says
    assert [p.name for p in tmp_path.iterdir()] == ["cp"]
    assert list((tmp_path / "cp").iterdir()) == []


def test_a_uri_checkpoint_keeps_the_runtime_files_on_the_drivers_disk() -> None:
    uri = "hdfs://namenode:8020/dbus/checkpoint"
    twin = local_twin(uri)
    assert twin.parent == default_home() / "checkpoints"
    assert twin.name.startswith("hdfs-namenode-8020-dbus-checkpoint-")
    assert local_twin(uri) == twin  # every command finds the same files
    assert local_twin("hdfs://namenode:8020/dbus/other") != twin
    # Two URIs that read alike as file names still get their own files.
    assert local_twin("s3a://a-b/c") != local_twin("s3a://a/b-c")
    assert beside(uri, ".config.json") == twin.parent / f"{twin.name}.config.json"
    assert progress_path(uri) == twin.parent / f"{twin.name}.progress"
    assert reports_dir(uri) == twin.parent / f"{twin.name}.reports"
    assert local_folder(uri) == twin.parent


def test_a_uri_checkpoint_is_read_only_through_a_spark_session() -> None:
    with pytest.raises(ConfigError, match="no Spark session runs in this process") as raised:
        pending_batch("hdfs://namenode:8020/dbus/checkpoint")
    assert "\n" not in str(raised.value)


def test_the_committed_positions_are_the_newest_commits(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    for batch, pos in ((0, 100), (1, 200), (2, 300)):
        offset = {"shop": {"file": "binlog.000003", "pos": pos, "gtid": None}}
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(offset)}")
    for batch in (0, 1):
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}")
    assert {k: str(v) for k, v in committed_positions(str(tmp_path)).items()} == {
        "shop": "binlog.000003:200"
    }
    assert committed_positions(str(tmp_path / "never-started")) == {}
