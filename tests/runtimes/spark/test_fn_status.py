"""`dbus fn status`: where each deployment of a running runtime stands, asked of the
runtime's real JSON API (served in-process here), and every way asking can fail as
one line with its exit code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import free_port

from dbus_fn.cli import cli
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
from dbus_spark.interfaces.pace import status_line
from dbus_spark.observe import RuntimeMetrics
from dbus_spark.state.checkpoint import address_path


def _status(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["fn", "status", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    folder = tmp_path / "checkpoint"
    config = RuntimeConfig(sources=(), deployments=(), kafka_bootstrap="127.0.0.1:9092",
                           elasticsearch_url="http://127.0.0.1:9200",
                           checkpoint_dir=str(folder))  # fmt: skip
    config.save(tmp_path / "checkpoint.config.json")
    return str(folder)


@pytest.fixture
def served(checkpoint: str, tmp_path: Path) -> Iterator[str]:
    """A runtime's API with a token, its address where a runtime writes it."""
    metrics = RuntimeMetrics()
    metrics.attach(tmp_path / "checkpoint.config.json", {}, tmp_path / "reports")
    server = ApiServer(build_app(metrics, token="s3cret"), ApiSettings("127.0.0.1", 0, "s3cret"))
    url = server.start()
    address_path(checkpoint).write_text(url)
    try:
        yield url
    finally:
        server.stop()
        metrics.close()


def test_a_detached_deployment_is_one_line_with_its_source_position_and_reason() -> None:
    line = status_line({
        "name": "to_es", "version": "1.0.0", "state": "detached", "lag_seconds": 12.34,
        "pace": [{"source": "shop", "state": "detached", "position": "binlog.000001:1282",
                  "lag_bytes": 4096, "reason": "Elasticsearch at http://es:9200 did not "
                  "take 3 action(s) within 2s"}],
    })  # fmt: skip
    assert line == (
        "to_es  1.0.0  detached  lag 12.3s  [shop: detached at binlog.000001:1282, 4096 bytes "
        "behind; Elasticsearch at http://es:9200 did not take 3 action(s) within 2s]"
    )
    assert status_line({"name": "a", "version": "1", "state": "with-stream",
                        "lag_seconds": None, "pace": []}) == "a  1  with-stream"  # fmt: skip


def test_no_runtime_at_the_checkpoint_is_exit_2(tmp_path: Path) -> None:
    code, out, err = _status("--checkpoint", str(tmp_path / "none"))
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "no runtime has run with checkpoint" in err


def test_a_runtime_that_serves_no_api_is_exit_3(checkpoint: str) -> None:
    code, _, err = _status("--checkpoint", checkpoint)
    assert code == 3, err
    assert err.strip().count("\n") == 0 and "with its API on (--api)" in err


def test_a_runtime_that_does_not_answer_is_exit_3(checkpoint: str) -> None:
    address_path(checkpoint).write_text(f"http://127.0.0.1:{free_port()}")
    code, _, err = _status("--checkpoint", checkpoint)
    assert code == 3, err
    assert err.strip().count("\n") == 0 and "does not answer at http://127.0.0.1:" in err
    assert "is it running?" in err


def test_an_api_that_wants_a_token_says_so_and_takes_it(checkpoint: str, served: str) -> None:
    code, _, err = _status("--checkpoint", checkpoint)
    assert code == 2, err
    assert err.strip().count("\n") == 0 and "pass --api-token or set DBUS_API_TOKEN" in err
    code, out, err = _status("--checkpoint", checkpoint, "--api-token", "s3cret")
    assert code == 0, err
    assert out == "no deployment runs in this runtime; give it one with --functions\n"
    code, out, err = _status("nobody", "--checkpoint", checkpoint, "--api-token", "s3cret")
    assert code == 2 and "no deployment 'nobody' runs in this runtime; it runs none" in err


def test_a_wrong_token_is_said_to_be_refused_not_missing(checkpoint: str, served: str) -> None:
    code, out, err = _status("--checkpoint", checkpoint, "--api-token", "wrong")
    assert code == 2 and out == "", err
    assert err.strip().count("\n") == 0 and "refused the API token given" in err
    assert "wrong" not in err and "pass --api-token" not in err


@pytest.mark.parametrize("command", [["fn", "status"], ["fn", "pause", "orders"],
                                     ["fn", "preview", "orders"]])  # fmt: skip
@pytest.mark.parametrize("token", ["", " "])
def test_an_empty_token_is_refused_before_any_runtime_is_asked(
    checkpoint: str, command: list[str], token: str
) -> None:
    result = CliRunner().invoke(cli, [*command, "--checkpoint", checkpoint, "--api-token", token])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0
    assert "--api-token (or DBUS_API_TOKEN) is" in result.stderr
    assert "no request could ever carry it" in result.stderr
