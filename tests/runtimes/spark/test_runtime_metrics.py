"""Per-batch metrics: what the driver logs when a micro-batch commits."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbus_spark.config.logs import LOG_FORMAT_ENV, JsonFormatter, log_formatter
from dbus_spark.config.runtime import RuntimeConfig
from dbus_spark.sinks.batch_commit import SinkWriter, TaskReport
from dbus_spark.stage.counts import StageCounts


@pytest.fixture
def lines() -> Iterator[list[str]]:
    """The runtime log's lines (its logger writes to stderr and does not propagate)."""
    found: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found.append(record.getMessage())

    handler = Collect()
    logger = logging.getLogger("dbus.runtime")
    logger.addHandler(handler)
    try:
        yield found
    finally:
        logger.removeHandler(handler)


@pytest.fixture
def writer(tmp_path: Path) -> SinkWriter:
    """The sink writer of a runtime configured in ``tmp_path``, as the driver makes it."""
    config = RuntimeConfig(sources=(), deployments=(), kafka_bootstrap="127.0.0.1:9092",
                           elasticsearch_url="http://127.0.0.1:9200",
                           checkpoint_dir=str(tmp_path / "checkpoint"))  # fmt: skip
    return SinkWriter(str(config.save(tmp_path / "checkpoint.config.json")))


def _task(source: str, rows: int, *, started: float, committed: float) -> TaskReport:
    counts = StageCounts(
        rows=rows,
        read_seconds=0.25,
        started=started,
        delivered=Counter({"orders": rows}),
        positions={source: "bin.000003:4096 (0-1-9)"},
        last_commit={source: committed},
    )
    # Each task's counts travel to the driver as JSON, as the stats record does.
    return TaskReport(
        records=rows,
        kafka=rows,
        per_source=Counter({source: rows}),
        started=started + 0.5,
        stage=StageCounts.from_bytes(counts.to_bytes()),
    )


def test_a_batch_logs_rows_per_source_and_deployment_duration_positions_and_lag(
    lines: list[str], writer: SinkWriter
) -> None:
    now = time.time()
    reports = [
        _task("shop", 30, started=now - 2.0, committed=now - 5.0),  # two shards of shop
        _task("shop", 12, started=now - 1.5, committed=now - 3.0),
        _task("billing", 5, started=now - 1.0, committed=now - 1.0),
        None,  # a task that failed reports nothing
    ]
    writer.commit(reports, 7)
    (line,) = lines
    assert line.startswith("batch 7: rows=47 ")
    assert "per_source={'shop': 42, 'billing': 5}" in line
    assert "delivered={'orders': 47}" in line
    assert (
        "positions={'shop': 'bin.000003:4096 (0-1-9)', 'billing': 'bin.000003:4096 (0-1-9)'}"
        in line
    )
    batch = float(re.search(r"batch_seconds=([0-9.]+)", line)[1])  # type: ignore[index]
    assert 2.0 <= batch < 10
    lag = re.search(r"lag_seconds=\{'shop': ([0-9.]+), 'billing': ([0-9.]+)\}", line)
    assert lag is not None
    assert 3.0 <= float(lag[1]) < 10  # the newest of the two shards' commits
    assert 1.0 <= float(lag[2]) < 10


def test_a_batch_whose_changes_the_cluster_had_already_says_how_many_were_not_sent_again(
    lines: list[str], writer: SinkWriter
) -> None:
    """Exactly once after a crash: a batch read again sends nothing its lanes' marks
    passed, and its line tells those from changes that never reached Kafka."""
    now = time.time()
    again = _task("shop", 20, started=now - 2.0, committed=now - 5.0)
    again.kafka, again.already = 0, 20
    writer.commit([again], 4)
    (line,) = lines
    assert line.startswith("batch 4: rows=20 ddl=0 records=20 kafka=0 already=20 es=0 ")


def test_an_empty_batch_logs_nothing(lines: list[str], writer: SinkWriter) -> None:
    writer.commit([TaskReport()], 8)
    assert lines == []


def test_as_json_the_batch_line_carries_its_counters_as_fields(
    monkeypatch: pytest.MonkeyPatch, writer: SinkWriter
) -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger = logging.getLogger("dbus.runtime")
    logger.addHandler(handler)
    try:
        now = time.time()
        writer.commit(
            [_task("shop", 30, started=now - 2.0, committed=now - 5.0)], 9
        )
    finally:
        logger.removeHandler(handler)
    (record,) = records
    monkeypatch.setenv(LOG_FORMAT_ENV, "json")
    data = json.loads(log_formatter().format(record))
    assert data["message"] == record.getMessage()  # the text line, whole
    assert (data["level"], data["logger"], data["batch"]) == ("INFO", "dbus.runtime", 9)
    assert data["rows"] == 30 and data["per_source"] == {"shop": 30}
    assert (data["kafka"], data["already"]) == (30, 0)
    assert data["delivered"] == {"orders": 30}
    assert data["positions"] == {"shop": "bin.000003:4096 (0-1-9)"}
    assert 3.0 <= data["lag_seconds"]["shop"] < 10
    assert data["time"].endswith("+00:00")
    monkeypatch.setenv(LOG_FORMAT_ENV, "text")
    text = log_formatter().format(record)
    assert text.endswith(f"dbus.runtime {record.getMessage()}")


def test_a_json_line_carries_the_traceback_of_an_error() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "dbus.runtime", logging.ERROR, __file__, 1, "it failed: %s", ("x",), sys.exc_info()
        )
    data = json.loads(JsonFormatter().format(record))
    assert data["message"] == "it failed: x" and data["level"] == "ERROR"
    assert "ValueError: boom" in data["error"]
