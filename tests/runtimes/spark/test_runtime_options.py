"""`dbus runtime start` options that look given but mean nothing: refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_runtime_cli import ORDERS, _assert_one_line_error, _start

from dbus_fn.errors import ConfigError

# click takes an empty variable for one not set, so only the flag can be given empty.
BAD_TOKENS = [
    (["--api-token", ""], {}, "is empty"),
    (["--api-token", " \n"], {}, "only whitespace"),
    (["--api-token", "s3cret\n"], {}, "line break"),
    ([], {"DBUS_API_TOKEN": "s3cret\n"}, "line break"),
    ([], {"DBUS_API_TOKEN": "  "}, "only whitespace"),
]


@pytest.mark.parametrize(("args", "env", "needle"), BAD_TOKENS)
def test_a_token_no_request_can_carry_is_one_line_with_exit_2(
    args: list[str], env: dict[str, str], needle: str
) -> None:
    result = _start("--functions", ORDERS, *args, env=env)
    assert result.returncode == 2
    _assert_one_line_error(result, "--api-token", "DBUS_API_TOKEN", needle)
    assert "s3cret" not in result.stderr


def test_a_batch_still_running_when_for_ends_blames_no_sink(tmp_path: Path) -> None:
    from test_runtime_preflight import _checkpoint

    from dbus_fn.errors import UndeliveredError
    from dbus_spark.interfaces.cli import _undelivered

    checkpoint = str(_checkpoint(tmp_path / "cp", planned=2, committed=1))
    planned = 1_700_000_000.002
    failure = _undelivered(checkpoint, planned + 40, ran_out=True)
    assert isinstance(failure, UndeliveredError)
    message = str(failure)
    assert "batch 2 (shop up to binlog.000003:300)" in message
    assert "before --for ended (40s after it was planned" in message
    assert "the sink that failed" not in message and "nothing is lost" in message


def _config(checkpoint: Path, *names: str) -> Any:
    from dbus_spark.interfaces.settings import runtime_config

    return runtime_config(
        sources=tuple(f"{name}=mysql://u:p@127.0.0.1:1" for name in names),
        deployments=(ORDERS,), kafka="127.0.0.1:1", elasticsearch="http://127.0.0.1:1",
        checkpoint=str(checkpoint),
    )  # fmt: skip


def test_a_checkpoint_of_one_source_is_not_taken_over_by_another_name(
    services: Any, tmp_path: Path
) -> None:
    from test_runtime_preflight import _checkpoint

    checkpoint = _checkpoint(tmp_path / "cp", planned=2, committed=2)  # source "shop"
    result = _start(
        "--source", f"other={services.mariadb.dsn}", "--functions", ORDERS,
        "--kafka", services.kafka.bootstrap_servers,
        "--elasticsearch", services.elasticsearch.url,
        "--checkpoint", str(checkpoint), "--api", "off", "--master", "local[1]", "--for", "3",
    )  # fmt: skip
    assert result.returncode == 2
    _assert_one_line_error(
        result, "holds the position of source shop", "--source shop=DSN", "--checkpoint"
    )
    assert sorted(p.name for p in (tmp_path / "cp").iterdir()) == ["commits", "offsets"]


@pytest.mark.parametrize("names", [("shop",), ("shop", "more"), ("more",)])
def test_a_checkpoint_goes_on_under_its_names_and_takes_new_ones(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    from test_runtime_preflight import _checkpoint

    from dbus_spark.spark.job import _check_source_names

    checkpoint = _checkpoint(tmp_path / "cp", planned=2, committed=2)
    if names == ("more",):  # a new name, the old one gone: a rename
        with pytest.raises(ConfigError):
            _check_source_names(_config(checkpoint, *names), None)
    else:
        _check_source_names(_config(checkpoint, *names), None)
    _check_source_names(_config(tmp_path / "new", "anything"), None)  # no checkpoint yet


def test_two_runtimes_reading_one_source_name_register_different_server_ids(
    tmp_path: Path,
) -> None:
    # The same name in two runtimes (two teams, each with the default source) on one
    # server: a shared id would make the server drop one reader whenever the other
    # connects. A restart (the same checkpoint) keeps its id.
    ids = {
        checkpoint: _config(tmp_path / checkpoint, "shop").sources[0].replica_id
        for checkpoint in ("team-a", "team-b")
    }
    assert ids["team-a"] != ids["team-b"]
    assert _config(tmp_path / "team-a", "shop").sources[0].replica_id == ids["team-a"]


_NOWHERE = (
    "--source", "shop=mysql://u:p@127.0.0.1:1", "--kafka", "127.0.0.1:1",
    "--elasticsearch", "http://127.0.0.1:1", "--api", "off", "--master", "local[1]",
)  # fmt: skip
"""Nothing answers at these: a start that got past its checks would fail on them."""


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("dbus.toml", (Path(ORDERS) / "dbus.toml").read_text().encode("utf-16"), 1),
        ("requirements.txt", b"six==1.16.0\n\x97\xde\xad\n", 2),
    ],
    ids=["manifest-utf-16", "requirements-bytes"],
)
def test_a_function_file_not_in_utf8_is_one_line_before_spark(
    tmp_path: Path, name: str, data: bytes, code: int
) -> None:
    folder = tmp_path / "orders"
    folder.mkdir()
    for part in ("dbus.toml", "orders.py"):
        (folder / part).write_bytes((Path(ORDERS) / part).read_bytes())
    (folder / name).write_bytes(data)
    checkpoint = tmp_path / "cp"
    result = _start(*_NOWHERE, "--functions", str(folder), "--checkpoint", str(checkpoint))
    assert result.returncode == code, result.stderr
    _assert_one_line_error(result, str(folder / name), "is not UTF-8 text", "as UTF-8")
    assert not checkpoint.exists()


def test_a_checkpoint_no_folder_can_be_made_for_is_one_line_before_spark() -> None:
    # Not even root makes a folder in /proc (a folder made read-only would not stop root).
    result = _start(*_NOWHERE, "--functions", ORDERS, "--checkpoint", "/proc/dbus-test/cp")
    assert result.returncode == 2, result.stderr
    _assert_one_line_error(
        result, "checkpoint /proc/dbus-test/cp: cannot create /proc/dbus-test (",
        "choose a writable folder with --checkpoint",
    )  # fmt: skip
