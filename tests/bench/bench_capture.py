"""Capture throughput: bare mysql-replication decoding vs dbus capture producing RowChanges.

Writes a binlog of 20-column rows and of 3-column rows into a fresh database on
the local MariaDB (``dbus services up mariadb``), then reads each range with
(a) mysql-replication, decoding every row (``event.rows``), and (b)
``dbus_fn.capture.BinlogReader`` yielding ``RowChange``s; prints rows/s for both
and the ratio b/a. Best of ``--repeat`` runs each, alternating, in one process.

    .venv/bin/python tests/bench/bench_capture.py [--rows 200000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
import uuid
from collections.abc import Callable
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from dbus_fn import BinlogPosition, RowChange
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for

WIDE = """CREATE TABLE wide (
  id INT PRIMARY KEY, a INT, b BIGINT, c SMALLINT UNSIGNED, d TINYINT,
  e VARCHAR(32), f VARCHAR(64), g CHAR(8), h TEXT, i DECIMAL(12,2),
  j DOUBLE, k FLOAT, l DATETIME(6), m DATE, n TIMESTAMP(6) NULL, o TIME,
  p ENUM('x','y','z'), q VARBINARY(16), r BIGINT UNSIGNED, s INT NULL
)"""
WIDE_FILL = """INSERT INTO wide SELECT seq, seq * 3, seq * 1000003, seq % 65535, seq % 100,
  CONCAT('name-', seq), CONCAT('a somewhat longer value ', seq), 'fixed', 'text body',
  seq / 7, seq * 1.5, seq / 3, '2024-01-02 03:04:05.123456', '2024-02-29',
  '2024-06-01 12:00:00.5', '12:34:56', 'y', UNHEX('DEADBEEF'), seq * 11, NULL
  FROM seq_{first}_to_{last}"""
NARROW = "CREATE TABLE narrow (id INT PRIMARY KEY, v VARCHAR(20), n BIGINT)"
NARROW_FILL = "INSERT INTO narrow SELECT seq, CONCAT('v', seq), seq * 7 FROM seq_{first}_to_{last}"


def master(cursor: Any) -> BinlogPosition:
    cursor.execute("SHOW MASTER STATUS")
    file, pos = cursor.fetchone()[:2]
    return BinlogPosition(file, int(pos))


def write(cursor: Any, create: str, fill: str, rows: int) -> tuple[BinlogPosition, BinlogPosition]:
    cursor.execute(create)
    start = master(cursor)
    fill_rows(cursor, fill, rows)
    return start, master(cursor)


def fill_rows(cursor: Any, fill: str, rows: int) -> None:
    """Rows 1 to ``rows`` by ``fill``, 10,000 to a transaction."""
    for first in range(1, rows + 1, 10_000):
        cursor.execute(fill.format(first=first, last=min(first + 9_999, rows)))


def bare(
    settings: dict[str, Any], database: str, start: BinlogPosition, end: BinlogPosition
) -> int:
    """mysql-replication alone, decoding every row of every rows event."""
    stream = BinLogStreamReader(
        dict(settings), server_id=replica_id_for(f"bench/bare/{uuid.uuid4()}"),
        resume_stream=True, log_file=start.file, log_pos=start.pos, blocking=False,
        only_events=[WriteRowsEvent], only_schemas=[database], enable_logging=False,
        pymysql_wrapper=lambda **kw: pymysql.connect(
            **{("database" if k == "db" else k): v for k, v in kw.items()}
        ),
    )  # fmt: skip
    count = 0
    try:
        for event in stream:
            if (stream.log_file, stream.log_pos) > (end.file, end.pos):
                break
            count += len(event.rows)
    finally:
        stream.close()
    return count


def ours(spec: SourceSpec, start: BinlogPosition, end: BinlogPosition) -> int:
    reader = BinlogReader(spec, replica_id_for(f"bench/ours/{uuid.uuid4()}"))
    count = 0
    try:
        for item in reader.read(start, stop=end, idle_timeout=30):
            if type(item) is RowChange:
                count += 1
    finally:
        reader.close()
    return count


def timed(run: Callable[[], int]) -> tuple[int, float]:
    began = time.perf_counter()
    count = run()
    return count, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="mysql://dbus:dbus@127.0.0.1:3306")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per table")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", action="store_true", help="cProfile our capture once")
    args = parser.parse_args()

    database = f"bench_{uuid.uuid4().hex[:12]}"
    spec = SourceSpec("bench", args.dsn, (f"{database}.*",))
    settings = spec.connection.pymysql_kwargs()
    connection = pymysql.connect(**settings, autocommit=True)
    cursor = connection.cursor()
    cursor.execute(f"CREATE DATABASE {database}")
    try:
        cursor.execute(f"USE {database}")
        ranges = {
            "20 columns": write(cursor, WIDE, WIDE_FILL, args.rows),
            "3 columns": write(cursor, NARROW, NARROW_FILL, args.rows),
        }
        print(f"{args.rows} rows per table; best of {args.repeat} runs each; rows/s")
        print(f"{'table':<12}{'(a) library':>14}{'(b) capture':>14}{'b/a':>8}")
        for name, (start, end) in ranges.items():
            best_a = best_b = 0.0
            for _ in range(args.repeat):
                count_a, seconds_a = timed(lambda s=start, e=end: bare(settings, database, s, e))
                count_b, seconds_b = timed(lambda s=start, e=end: ours(spec, s, e))
                assert count_a == count_b == args.rows, (count_a, count_b)
                best_a = max(best_a, count_a / seconds_a)
                best_b = max(best_b, count_b / seconds_b)
            print(f"{name:<12}{best_a:>14,.0f}{best_b:>14,.0f}{best_b / best_a:>8.2f}")
        if args.profile:
            start, end = ranges["3 columns"]
            profile = cProfile.Profile()
            profile.runcall(ours, spec, start, end)
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    finally:
        cursor.execute(f"DROP DATABASE {database}")
        connection.close()


if __name__ == "__main__":
    main()
