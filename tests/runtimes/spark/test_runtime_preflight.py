"""A runtime's sinks and Spark master are checked before Spark starts: one line, the
right exit code, within seconds. Malformed addresses need no service; the reachability
checks read a real source first (the local MariaDB) and find nothing at the sink."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from support import free_port

from dbus_fn.cli import cli
from dbus_spark.spark.preflight import check_elasticsearch, check_kafka, check_master
from dbus_spark.state.checkpoint import pending_batch

FUNCTIONS = str(Path(__file__).resolve().parents[3] / "functions" / "orders")


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on."""
    yield free_port()


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port that accepts connections (an address that answers)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def start(tmp_path: Path, *options: str, source: str = "mysql://u:p@127.0.0.1:1") -> Result:
    args = [
        "runtime", "start", "--source", f"shop={source}",
        "--functions", FUNCTIONS, "--checkpoint", str(tmp_path / "checkpoint"),
        "--kafka", "127.0.0.1:9092", "--elasticsearch", "http://127.0.0.1:9200",
        "--for", "1", *options,
    ]  # fmt: skip
    began = time.monotonic()
    result = CliRunner().invoke(cli, args)
    assert time.monotonic() - began < 15, "the checks must not wait for Spark or retries"
    return result


def one_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--kafka", "not a host::"], "--kafka 'not a host::'"),
        (["--kafka", "127.0.0.1:99999"], "is not HOST:PORT"),
        (["--elasticsearch", "ftp://x"], "is not an http:// or https:// URL"),
        (["--elasticsearch", "http://127.0.0.1:port"], "the port is not a number"),
        (["--master", "bogus://x"], "is not a Spark master URL"),
        (["--master", "spark://nohost"], "is not HOST:PORT"),
    ],
)
def test_a_malformed_address_is_a_bad_value(
    tmp_path: Path, options: list[str], says: str
) -> None:
    assert says in one_line(start(tmp_path, *options), 2)
    assert not (tmp_path / "checkpoint").exists()


@pytest.mark.parametrize(
    ("options", "source", "says"),
    [
        ([], "mysql://dbus:12/hunter2@db:3306",
         "--source 'shop=mysql://dbus:***@db:3306': invalid source DSN: the password (or user) "
         "holds an unencoded '/', '?' or '#'; percent-encode"),
        ([], "mysql://dbus:hunter2@db:port",
         "--source 'shop=mysql://dbus:***@db:port': invalid source DSN: the port"),
        (["--elasticsearch", "http://elastic:hunter2@127.0.0.1:port"], "mysql://u:p@127.0.0.1:1",
         "--elasticsearch 'http://elastic:***@127.0.0.1:port': the port is not a number"),
        (["--elasticsearch", "ftp://elastic:hun/ter2@es"], "mysql://u:p@127.0.0.1:1",
         "--elasticsearch 'ftp://elastic:***@es' is not an http:// or https:// URL"),
        (["--kafka", "dbus:hun,ter2@127.0.0.1:9092"], "mysql://u:p@127.0.0.1:1",
         "--kafka 'dbus:***@127.0.0.1:9092' holds a user and password, which are not read"),
    ],
    ids=["dsn-password-slash", "dsn-port", "es-port", "es-scheme", "kafka-login"],
)  # fmt: skip
def test_a_malformed_address_is_quoted_without_its_password(
    tmp_path: Path, options: list[str], source: str, says: str
) -> None:
    result = start(tmp_path, *options, source=source)
    assert says in one_line(result, 2)
    assert "hunter2" not in result.output and "ter2" not in result.output
    assert not (tmp_path / "checkpoint").exists()


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--kafka", "127.0.0.1:{port}", "cannot reach Kafka at 127.0.0.1:{port}"),
        ("--master", "spark://127.0.0.1:{port}",
         "cannot reach the Spark master at spark://127.0.0.1:{port}"),
    ],
)  # fmt: skip
def test_an_unreachable_kafka_or_master_is_cannot_reach(
    tmp_path: Path, closed_port: int, services: Any, option: str, value: str, says: str
) -> None:
    address = value.format(port=closed_port)
    line = one_line(start(tmp_path, option, address, source=services.mariadb.dsn), 3)
    assert says.format(port=closed_port) in line
    assert option in line


@pytest.mark.parametrize("checkpoint", ["hdfs://127.0.0.1:1/dbus/checkpoint", "bogus://x/y"])
def test_a_uri_checkpoint_with_a_master_that_does_not_answer_is_cannot_reach_at_once(
    tmp_path: Path, closed_port: int, checkpoint: str
) -> None:
    master = f"spark://127.0.0.1:{closed_port}"
    result = start(tmp_path, "--master", master, "--checkpoint", checkpoint)
    assert f"cannot reach the Spark master at {master}" in one_line(result, 3)


def test_an_unreachable_elasticsearch_is_cannot_reach_from_the_command(
    tmp_path: Path, closed_port: int, services: Any
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    result = start(
        tmp_path, "--elasticsearch", url, "--kafka", services.kafka.bootstrap_servers,
        source=services.mariadb.dsn,
    )  # fmt: skip
    assert f"cannot reach Elasticsearch at {url}" in one_line(result, 3)


def test_each_check_passes_an_address_that_answers(listening_port: int) -> None:
    check_kafka(f"127.0.0.1:{listening_port},127.0.0.1:1")
    check_master(f"spark://127.0.0.1:{listening_port}")
    check_master("local[*]")
    check_master("local[2,3]")


def test_an_unreachable_elasticsearch_is_cannot_reach(closed_port: int) -> None:
    from dbus_fn.errors import ServiceUnreachableError

    with pytest.raises(ServiceUnreachableError, match="cannot reach Elasticsearch") as raised:
        check_elasticsearch(f"http://user:secret@127.0.0.1:{closed_port}", timeout=2)
    assert raised.value.exit_code == 3
    assert "secret" not in str(raised.value)


def _checkpoint(root: Path, planned: int, committed: int) -> Path:
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for batch in range(planned + 1):
        offset = {"shop": {"file": "binlog.000003", "pos": 100 * (batch + 1), "gtid": None}}
        meta = {"batchTimestampMs": 1_700_000_000_000 + batch}
        lines = ["v1", json.dumps(meta), json.dumps(offset)]
        (root / "offsets" / str(batch)).write_text("\n".join(lines))
    for batch in range(committed + 1):
        (root / "commits" / str(batch)).write_text("v1\n{}")
    return root


def test_a_planned_batch_without_a_commit_is_pending(tmp_path: Path) -> None:
    pending = pending_batch(str(_checkpoint(tmp_path / "a", planned=2, committed=1)))
    assert pending is not None
    assert pending.batch == 2
    assert pending.planned_at == pytest.approx(1_700_000_000.002)
    assert pending.positions == {"shop": "binlog.000003:300"}
    assert pending_batch(str(_checkpoint(tmp_path / "b", planned=2, committed=2))) is None
    assert pending_batch(str(tmp_path / "never-started")) is None
