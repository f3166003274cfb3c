"""Capture throughput: bare mysql-replication decoding vs dbus capture producing RowChanges.

Writes a binlog of 20-column rows and of 3-column rows (transactions of 10,000
rows), and of one-row transactions of 3 columns (``--single``, where each
transaction's own events cost more than its row), into a fresh database on the
local MariaDB (``dbus services up mariadb``), then reads each range with
(a) mysql-replication, decoding every row (``event.rows``), (b)
``dbus_fn.capture.BinlogReader`` yielding ``RowChange``s with the native code
(``framework/native``: the events split and the rows decoded) and (c) with
mysql-replication's events and Python's row decoder (``DBUS_NATIVE_DECODE=0``);
prints rows/s for each and the ratios to (a). Then decoding alone, the same row
images from memory: mysql-replication's ``event.rows`` (timed apart from its
reading), our Python decoder and the native one. Best of ``--repeat`` runs each,
alternating, in one process.

    .venv/bin/python tests/bench/bench_capture.py [--rows 200000] [--single 20000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from dbus_fn import BinlogPosition, RowChange
from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.capture._decode import TableDecoder
from dbus_fn.capture._native import SWITCH, native_decoding

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
    """Where the binlog ends: ``SHOW MASTER STATUS`` (MariaDB), or ``SHOW BINARY LOG
    STATUS`` on a MySQL that has no other, with its executed GTID set (the bench
    writes nothing while it asks, so the two agree)."""
    try:
        cursor.execute("SHOW MASTER STATUS")
    except pymysql.err.ProgrammingError:
        cursor.execute("SHOW BINARY LOG STATUS")
    row = cursor.fetchone()
    executed = str(row[4]).replace("\n", "") if len(row) > 4 and row[4] else None
    return BinlogPosition(row[0], int(row[1]), executed)


_SEQUENCE = re.compile(r"\bseq_(\d+)_to_(\d+)\b")


def on_server(cursor: Any, statement: str) -> str:
    """``statement`` with MariaDB's sequence tables (``seq_1_to_9``) as a recursive
    CTE of the same numbers where the server has none (MySQL)."""
    if "mariadb" in str(cursor.connection.server_version).lower():
        return statement
    cursor.execute("SET SESSION cte_max_recursion_depth = 1000000")
    return _SEQUENCE.sub(
        r"(WITH RECURSIVE numbers (seq) AS (SELECT \1 UNION ALL SELECT seq + 1 FROM numbers "
        r"WHERE seq < \2) SELECT seq FROM numbers) AS sequence",
        statement,
    )


def write(cursor: Any, create: str, fill: str, rows: int) -> tuple[BinlogPosition, BinlogPosition]:
    cursor.execute(create)
    start = master(cursor)
    fill_rows(cursor, fill, rows)
    return start, master(cursor)


def write_single(cursor: Any, rows: int) -> tuple[BinlogPosition, BinlogPosition]:
    """``rows`` one-row transactions of the 3-column table's shape."""
    cursor.execute(NARROW.replace("narrow", "single"))
    start = master(cursor)
    for i in range(1, rows + 1):
        cursor.execute("INSERT INTO single VALUES (%s, %s, %s)", (i, f"v{i}", i * 7))
    return start, master(cursor)


def fill_rows(cursor: Any, fill: str, rows: int) -> None:
    """Rows 1 to ``rows`` by ``fill``, 10,000 to a transaction."""
    for first in range(1, rows + 1, 10_000):
        cursor.execute(on_server(cursor, fill.format(first=first, last=min(first + 9_999, rows))))


def bare(
    settings: dict[str, Any], database: str, start: BinlogPosition, end: BinlogPosition,
    decoding: list[float] | None = None,
) -> int:
    """mysql-replication alone, decoding every row of every rows event; the seconds
    spent decoding (``event.rows``) are added to ``decoding``."""
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
            began = time.perf_counter()
            count += len(event.rows)
            if decoding is not None:
                decoding.append(time.perf_counter() - began)
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


def python_decoded(spec: SourceSpec, start: BinlogPosition, end: BinlogPosition) -> int:
    os.environ[SWITCH] = "0"
    try:
        return ours(spec, start, end)
    finally:
        del os.environ[SWITCH]


Body = tuple[TableDecoder, bytes, bytes, bytes | None]


def row_images(spec: SourceSpec, start: BinlogPosition, end: BinlogPosition) -> list[Body]:
    """Every rows event's body our capture decodes in the range, with its decoder."""
    recorded: list[Body] = []
    original = TableDecoder.images

    def recording(decoder: TableDecoder, data: bytes, present: bytes,
                  present_after: bytes | None, owns: Any = None) -> Any:  # fmt: skip
        recorded.append((decoder, bytes(data), bytes(present), present_after))
        return original(decoder, data, present, present_after, owns)

    TableDecoder.images = recording  # type: ignore[method-assign]
    try:
        ours(spec, start, end)
    finally:
        TableDecoder.images = original  # type: ignore[method-assign]
    return recorded


def decode_only(bodies: list[Body], native: bool) -> tuple[int, float]:
    jobs = [(d if native else replace(d, native=None), *rest) for d, *rest in bodies]
    began = time.perf_counter()
    count = sum(1 for d, data, bits, after in jobs for _ in d.images(data, bits, after))
    return count, time.perf_counter() - began


def timed(run: Callable[[], int]) -> tuple[int, float]:
    began = time.perf_counter()
    count = run()
    return count, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="mysql://dbus:dbus@127.0.0.1:3306")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per table")
    parser.add_argument("--single", type=int, default=20_000, help="one-row transactions")
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
            "20 columns": (*write(cursor, WIDE, WIDE_FILL, args.rows), args.rows),
            "3 columns": (*write(cursor, NARROW, NARROW_FILL, args.rows), args.rows),
            "1-row txns": (*write_single(cursor, args.single), args.single),
        }
        native = native_decoding()
        print(f"{args.rows} rows per table, {args.single} one-row transactions; best of "
              f"{args.repeat} runs each; rows/s; native code "
              f"{'built' if native else 'NOT built: (b) reads as (c) does'}")
        print(f"{'table':<12}{'(a) library':>14}{'(b) capture':>14}{'(c) Python':>14}"
              f"{'b/a':>8}{'c/a':>8}")  # fmt: skip
        decoding: dict[str, tuple[float, ...]] = {}
        for name, (start, end, rows) in ranges.items():
            best = [0.0, 0.0, 0.0]
            decode = [0.0, 0.0, 0.0]
            bodies = row_images(spec, start, end)
            for _ in range(args.repeat):
                spent: list[float] = []
                runs = (
                    timed(lambda s=start, e=end, t=spent: bare(settings, database, s, e, t)),
                    timed(lambda s=start, e=end: ours(spec, s, e)),
                    timed(lambda s=start, e=end: python_decoded(spec, s, e)),
                )
                for i, (count, seconds) in enumerate(runs):
                    assert count == rows, (i, count)
                    best[i] = max(best[i], count / seconds)
                decode[0] = max(decode[0], rows / sum(spent))
                for i, on in ((1, False), (2, True)):
                    count, seconds = decode_only(bodies, native=on)
                    assert count == rows, (on, count)
                    decode[i] = max(decode[i], count / seconds)
            a, b, c = best
            print(f"{name:<12}{a:>14,.0f}{b:>14,.0f}{c:>14,.0f}{b / a:>8.2f}{c / a:>8.2f}")
            decoding[name] = tuple(decode)
        print("decoding alone, the same row images from memory; rows/s")
        print(f"{'table':<12}{'library':>12}{'Python':>12}{'native':>12}"
              f"{'native/library':>16}{'native/Python':>15}")  # fmt: skip
        for name, (library, python, native_rate) in decoding.items():
            print(f"{name:<12}{library:>12,.0f}{python:>12,.0f}{native_rate:>12,.0f}"
                  f"{native_rate / library:>16.1f}{native_rate / python:>15.1f}")  # fmt: skip
        if args.profile:
            start, end, _ = ranges["1-row txns"]
            profile = cProfile.Profile()
            profile.runcall(ours, spec, start, end)
            pstats.Stats(profile).sort_stats("tottime").print_stats(15)
    finally:
        cursor.execute(f"DROP DATABASE {database}")
        connection.close()


if __name__ == "__main__":
    main()
