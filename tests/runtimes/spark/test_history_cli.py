"""`dbus fn backfill / replay / deadletters / redrive` with no runtime to answer: what
is wrong in the request is said at once, and so is a runtime that is not there;
Ctrl-C withdraws a request the runtime's planner did not take."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import serving_api

from dbus_fn.cli import cli
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.settings import runtime_config
from dbus_spark.state.checkpoint import requests_dir

ROOT = Path(__file__).resolve().parents[3]
ORDERS = str(ROOT / "functions" / "orders")
SOON = (datetime.now(UTC) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    """A checkpoint a runtime ran with (source shop, deployment orders), none up now."""
    config = runtime_config(
        sources=("shop=mysql://dbus@127.0.0.1:1",), deployments=(ORDERS,),
        kafka="127.0.0.1:1", elasticsearch="http://127.0.0.1:1",
        checkpoint=str(tmp_path / "checkpoint"),
    )  # fmt: skip
    folder = Path(config.checkpoint_dir)
    RuntimeConfig.save(config, folder.with_name(f"{folder.name}.config.json"))
    return config.checkpoint_dir


def _run(*args: str) -> tuple[int, str]:
    began = time.monotonic()
    result = CliRunner().invoke(cli, ["fn", *args])
    assert time.monotonic() - began < 10, "it waited for a runtime"
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    return result.exit_code, lines[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["replay", "--from", "0-1-x"], ["--from '0-1-x'", "GTID"]),
        (["replay", "--from", "binlog.000001:4", "--to", "0-1"], ["--to '0-1'"]),
        (["replay", "--from", SOON], ["in the future"]),
        (["replay", "--from", "2026-01-02T00:00:00", "--to", "2026-01-01"], ["comes before"]),
        (["replay", "--from", "binlog.000002:900", "--to", "binlog.000002:4"], ["comes before"]),
        (["replay", "--from", "0-1-5", "--source", "shop2"], ["--source 'shop2'", "shop"]),
        (["replay", "--from", "0-1-5", "--route", "kafka://orders"], ["own destination"]),
        (["replay", "--from", "0-1-5", "--route", "kafka://orders.dead-letter"], ["own"]),
        (["backfill", "--where", ""], ["--where is empty"]),
        (["backfill", "--where", "  "], ["--where is empty"]),
        (["backfill", "--table", "shop.customers"], ["does not subscribe to shop.customers"]),
    ],
)
def test_a_request_wrong_in_itself_is_refused_at_once(
    checkpoint: str, args: list[str], needles: list[str]
) -> None:
    code, line = _run(args[0], "orders", *args[1:], "--checkpoint", checkpoint)
    assert code == 2, line
    for needle in needles:
        assert needle in line
    assert not any(requests_dir(checkpoint).glob("*.json"))  # nothing was asked


@pytest.mark.parametrize("command", ["backfill", "replay", "deadletters", "redrive", "verify"])
def test_an_empty_checkpoint_is_refused_not_taken_for_the_default(command: str) -> None:
    extra = ["--from", "0-1-5"] if command == "replay" else []
    code, line = _run(command, "orders", *extra, "--checkpoint", "")
    assert code == 2
    assert "--checkpoint ''" in line and "names no folder" in line


@pytest.mark.parametrize("command", ["deadletters", "redrive"])
def test_dead_letters_since_a_time_to_come_is_refused(checkpoint: str, command: str) -> None:
    code, line = _run(command, "orders", "--since", SOON, "--checkpoint", checkpoint)
    assert code == 2
    assert f"--since {SOON}" in line and "in the future" in line


def test_ctrl_c_while_waiting_withdraws_the_request(checkpoint: str) -> None:
    """The request must not stay queued for the runtime's planner to run unasked."""
    with serving_api(checkpoint):  # a runtime's API whose planner takes nothing
        process = subprocess.Popen(
            [sys.executable, "-c", "from dbus_fn.cli import main; main()", "fn", "backfill",
             "orders", "--checkpoint", checkpoint],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DBUS_CHECKPOINT": ""},
        )  # fmt: skip
        folder = requests_dir(checkpoint)
        deadline = time.monotonic() + 20
        while not list(folder.glob("*.json")):
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stderr
    assert "withdrawn" in stderr and "Traceback" not in stderr
    assert not list(folder.iterdir()), "the request is still queued"


def test_no_runtime_to_ask_is_one_line_at_once(checkpoint: str) -> None:
    code, line = _run("backfill", "orders", "--checkpoint", checkpoint)
    assert code == 3
    assert "no runtime serves its API at checkpoint" in line and "--api" in line
    assert not requests_dir(checkpoint).exists()  # nothing waits for a runtime to come


def test_ctrl_c_while_following_says_the_runtime_reads_on(tmp_path: Path) -> None:
    import io
    import threading

    from dbus_fn.cli._errors import Interrupted
    from dbus_spark.interfaces.history.follow import follow
    from dbus_spark.state.history import HistoryStore, HistoryTask

    store = HistoryStore(tmp_path / "history.json")
    task = HistoryTask("orders", "shop.orders", ("id",), True, started=time.time())
    store._tasks["shop"] = {task.id: task}
    store.save()
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(Interrupted) as caught:
        follow(store, [("shop", task.id)], out=io.StringIO())
    assert caught.value.exit_code == 130
    assert f"{task.id} on shop and reads on to the end" in caught.value.message
