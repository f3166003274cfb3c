"""Kafka messages of row changes: the row images' JSON written natively and in Python.

Run with ``python tests/bench/bench_messages.py [--rows N] [--rounds R]``. Over N
snapshot rows of the 20-column table of ``bench_capture.py`` (typed as capture
types them), it prints rows/s of

* ``to_kafka_message`` alone (the CloudEvent's headers, key and JSON value), and
* the function stage of a runtime worker with one deployment that routes the table
  to a topic (its pipeline, counters and the message),

with the images' JSON written by ``dbus_native`` and with ``DBUS_NATIVE_ENCODE=0``,
and the ratio. No service is needed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import best_rate

from dbus_fn.capture._snapshot import describe_table, snapshot_rows
from dbus_fn.events import BinlogPosition, Operation, RowChange
from dbus_fn.kafka_binding import _ROW_MESSAGES, _RowMessages
from dbus_fn.row_json import NATIVE_SWITCH, _native_encoder

# The columns of bench_capture.WIDE, as information_schema types them.
COLUMNS = (
    ("id", "int(11)"), ("a", "int(11)"), ("b", "bigint(20)"), ("c", "smallint(5) unsigned"),
    ("d", "tinyint(4)"), ("e", "varchar(32)"), ("f", "varchar(64)"), ("g", "char(8)"),
    ("h", "text"), ("i", "decimal(12,2)"), ("j", "double"), ("k", "float"), ("l", "datetime(6)"),
    ("m", "date"), ("n", "timestamp(6)"), ("o", "time"), ("p", "enum('x','y','z')"),
    ("q", "varbinary(16)"), ("r", "bigint(20) unsigned"), ("s", "int(11)"),
)  # fmt: skip


def selected(count: int) -> Iterator[tuple[Any, ...]]:
    """The rows bench_capture's WIDE_FILL writes, as the SELECT of a chunk returns them."""
    for seq in range(1, count + 1):
        yield (
            seq, seq * 3, seq * 1000003, seq % 65535, seq % 100, f"name-{seq}",
            f"a somewhat longer value {seq}", "fixed", "text body",
            (Decimal(seq) / 7).quantize(Decimal("0.01")), seq * 1.5, round(seq / 3, 4),
            datetime(2024, 1, 2, 3, 4, 5, 123456), date(2024, 2, 29),
            datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=UTC),
            timedelta(hours=12, minutes=34, seconds=56), "y", b"\xde\xad\xbe\xef", seq * 11, None,
        )  # fmt: skip


def row_changes(count: int) -> list[RowChange]:
    table = describe_table("bench", "wide", COLUMNS, ["id"])
    return list(snapshot_rows(
        table, selected(count), source="bench", position=BinlogPosition("mariadb-bin.000001", 4),
        commit_time=datetime.now(UTC), server_id="1", first_index=0, op=Operation.SNAPSHOT,
    ))  # fmt: skip


def messages(data: list[RowChange]) -> int:
    encode = _RowMessages().encode  # its own shape cache: made with the switch as it is now
    for change in data:
        assert encode(change, "io.dbus") is not None
    return len(data)


def stage(folder: Path) -> Callable[[list[RowChange]], int]:
    from dbus_spark.config.runtime import deployment_folders
    from dbus_spark.stage.counts import StageCounts
    from dbus_spark.stage.functions import FunctionStage

    def run(data: list[RowChange]) -> int:
        _ROW_MESSAGES._shapes.clear()  # a shape's writer is chosen by the switch when first met
        functions = FunctionStage(deployment_folders((str(folder),)), type_prefix="io.dbus")
        counts = StageCounts()
        sent = 0
        for change in data:
            for _ in functions.process_snapshot("bench", change, counts):
                sent += 1
        return sent

    return run


def deployment(work: Path) -> Path:
    folder = work / "bench"
    folder.mkdir()
    (folder / "bench.py").write_text(textwrap.dedent('''
        import dbus_fn as fn

        @fn.route(tables="bench.wide")
        def there(event: fn.RowChange) -> str:
            return "kafka://wide"
        '''))  # fmt: skip
    (folder / "dbus.toml").write_text(
        'name = "bench"\nversion = "1.0.0"\nmodule = "bench.py"\ntables = ["bench.wide"]\n'
    )
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    if _native_encoder({"id": "int"}) is None:
        sys.exit("dbus_native is not built (or DBUS_NATIVE_ENCODE=0): run deploy/dev env first")
    data = row_changes(options.rows)
    with tempfile.TemporaryDirectory() as work:
        runs = {
            "to_kafka_message": messages,
            "function stage, one route": stage(deployment(Path(work))),
        }
        print(f"{options.rows} snapshot rows of {len(COLUMNS)} columns, best of {options.rounds} "
              "rounds, rows/s")  # fmt: skip
        print(f"{'':<28}{'native JSON':>14}{'Python JSON':>14}{'ratio':>8}")
        for name, run in runs.items():
            native = best_rate(run, data, options.rounds)
            os.environ[NATIVE_SWITCH] = "0"
            try:
                python = best_rate(run, data, options.rounds)
            finally:
                del os.environ[NATIVE_SWITCH]
            print(f"{name:<28}{native:>14,.0f}{python:>14,.0f}{native / python:>8.2f}")


if __name__ == "__main__":
    main()
