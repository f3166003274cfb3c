"""A source whose server stops answering stops neither the runtime nor its other sources.

A runtime reads two sources: the shared MariaDB and a MySQL of the test's own, each
with a deployment of its own. The MySQL server is stopped: the MariaDB source's
changes still reach Kafka and the runtime keeps running; the server is started
again: a change written to it reaches Kafka, and the runtime's other source goes
on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from scratch import scratch_database
from support import kafka_ids, route_code, runtime_api

from dbus_deploy.services import down, up

pytestmark = [pytest.mark.e2e]


def _deployment(scratch: Scratch, name: str, table: str, topic: str, source: str) -> Path:
    folder = Path(scratch.function_folder(name, route_code(table, f"kafka://{topic}"), [table]))
    manifest = folder / "dbus.toml"
    manifest.write_text(manifest.read_text() + f'sources = ["{source}"]\n')
    return folder


def _insert(database: Any, *ids: int) -> None:
    with database.connect() as conn, conn.cursor() as cur:
        for i in ids:
            cur.execute("INSERT INTO t VALUES (%s)", (i,))


def test_a_stopped_source_server_leaves_the_runtime_and_its_other_sources_running(
    scratch: Scratch, private_services: Any
) -> None:
    bootstrap = scratch.services.kafka.bootstrap_servers
    other = private_services("mysql")
    topics = {"shop": scratch.kafka_topic, "other": f"{scratch.kafka_topic}.other"}
    with scratch_database(other.endpoints.mysql) as theirs:
        databases = {"shop": scratch.fresh_database, "other": theirs}
        folders = []
        for source, database in databases.items():
            with database.connect() as conn, conn.cursor() as cur:
                cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
            table = f"{database.name}.t"
            folders.append(_deployment(scratch, f"to_{source}", table, topics[source], source))
        checkpoint = str(scratch.tmp_path / "checkpoint")
        runtime = spawn_cli_runtime(
            scratch, folders[0], checkpoint, "--functions", str(folders[1]),
            "--source", f"other={theirs.endpoint.dsn}",
        )  # fmt: skip
        try:
            runtime_api(Path(checkpoint))
            for database in databases.values():
                _insert(database, 1)
            for source, topic in topics.items():
                assert kafka_ids(bootstrap, topic, 1) == [1], f"{source}'s first change"

            down(["mysql"], config=other.config)
            _insert(scratch.fresh_database, 2, 3)
            assert kafka_ids(bootstrap, topics["shop"], 3) == [1, 2, 3], (
                "the other source's changes go on while one server is stopped"
            )
            assert runtime.poll() is None, "the runtime keeps running"

            up(["mysql"], config=other.config)
            _insert(theirs, 2)
            _insert(scratch.fresh_database, 4)
            back = kafka_ids(bootstrap, topics["other"], 2, within=60)
            assert back == [1, 2], "the server is back: the change written then arrives"
            assert kafka_ids(bootstrap, topics["shop"], 4) == [1, 2, 3, 4]
            log = (scratch.tmp_path / "runtime.log").read_text(errors="replace")
            assert "'other'" in log and "its changes wait, the other sources go on" in log
            assert runtime.poll() is None
        finally:
            stop_cli_runtime(scratch, runtime)
