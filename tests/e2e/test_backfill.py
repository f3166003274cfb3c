"""`dbus fn backfill` against a running runtime: one deployment's sinks get the table
again; every other deployment's output is unchanged; bad requests are one line."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch
from history_support import TopicState, catalog_and_other, create_products, expected, index_contents
from support import serving_api, wait_for

from dbus_fn.errors import HistoryError, ServiceUnreachableError
from dbus_spark.config.runtime import RuntimeConfig, deployment_folders
from dbus_spark.interfaces.history.follow import backfill
from dbus_spark.spark.job import start, stop
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history import HistoryStore

pytestmark = pytest.mark.e2e

ROWS = 1500
CHUNK_ROWS = 100

class Running:
    def __init__(self, config: RuntimeConfig, catalog: str, other: str, table: str) -> None:
        self.config = config
        self.catalog_topic = catalog
        self.other_topic = other
        self.table = table


@pytest.fixture
def running(spark: Any, scratch: Scratch, fresh_database: Any) -> Iterator[Running]:
    _services, database, topic, _index, _tmp, _ff = scratch
    connection = database.connect()
    create_products(connection, ROWS)
    table = f"{database.name}.products"
    config = catalog_and_other(scratch, table, chunk_rows=CHUNK_ROWS)
    query = start(config, spark=spark)
    try:
        assert query.exception() is None
        with serving_api(config.checkpoint_dir):  # what the commands ask
            yield Running(config, topic, f"{topic}.other", table)
    finally:
        stop(query, spark)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    dbus = Path(sys.executable).parent / "dbus"
    return subprocess.run(
        [str(dbus), "fn", "backfill", *args], capture_output=True, text=True, timeout=120
    )


def test_a_backfill_reaches_its_deployment_only(
    running: Running, scratch: Scratch, fresh_database: Any
) -> None:
    services, _db, _topic, index, _tmp, _ff = scratch
    connection = fresh_database.connect()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE products SET price = price + 1 WHERE id <= 10")
    catalog = TopicState(services.kafka.bootstrap_servers, running.catalog_topic)
    other = TopicState(services.kafka.bootstrap_servers, running.other_topic)
    try:

        def both_have_the_updates() -> bool:
            catalog.poll(0.5)
            other.poll(0.5)
            return len(other.last) == 10 and len(catalog.last) == 9  # id 7 is filtered

        wait_for(both_have_the_updates, 120, "the ten updates", every=0.5)
        out = io.StringIO()
        tasks = backfill("catalog", [running.table], None,
                         checkpoint=running.config.checkpoint_dir, out=out)  # fmt: skip
        assert [t.finished > 0 for t in tasks] == [True]
        chunks = ROWS // CHUNK_ROWS + 1  # the last, unbounded, is empty
        assert f"catalog:{running.table}: done, {ROWS} rows in {chunks} chunks" in out.getvalue()
        want = expected(connection)
        wait_for(
            lambda: catalog.poll(0.5) or (
                catalog.contents() == want
                and index_contents(services.elasticsearch.url, index) == want
            ),
            120, "the catalog's topic and index to hold the whole table", every=0.5,
        )  # fmt: skip
        other.poll(3)
    finally:
        catalog.close()
        other.close()
    # The catalog got every row again as a snapshot row; the other deployment, which
    # subscribes to the same table, got its ten updates and nothing else.
    assert catalog.types == {"updated": 9, "snapshot": len(want)}
    assert other.types == {"updated": 10}


def test_bad_backfills_are_one_line_with_exit_2_and_start_nothing(
    running: Running, scratch: Scratch
) -> None:
    checkpoint = ["--checkpoint", running.config.checkpoint_dir]
    table = running.table
    database = table.split(".")[0]
    cases = [
        (["nope", *checkpoint], "no deployment 'nope' runs at checkpoint"),
        (["catalog", "--table", "products", *checkpoint], "--table 'products' is not db.table"),
        (["catalog", "--table", f"{database}.missing", *checkpoint],
         f"does not subscribe to {database}.missing"),
        (["catalog", "--table", table, "--where", "id IN (SELECT 1)", *checkpoint],
         "is not a condition on"),
        (["catalog", "--table", table, "--where", "nosuchcolumn > 1", *checkpoint],
         "does not work on"),
        (["catalog", "--table", table, "--where", "id > 1; DROP TABLE products", *checkpoint],
         "is not a condition on"),
    ]  # fmt: skip
    for args, message in cases:
        result = _cli(*args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
    # Two backfills of one table at once: the second is refused while the first runs.
    # Asked in-process at once: the first reads 16 chunks over several micro-batches,
    # while a second `dbus` process took seconds to start on a loaded machine, by
    # which time the first could be done (the exit code of a refusal is the cases').
    first = backfill("catalog", [table], None, checkpoint=running.config.checkpoint_dir,
                     wait=False, out=io.StringIO())  # fmt: skip
    assert [t.finished for t in first] == [0]
    with pytest.raises(HistoryError) as refused:
        backfill("catalog", [table], None, checkpoint=running.config.checkpoint_dir,
                 wait=False, out=io.StringIO())  # fmt: skip
    assert refused.value.exit_code == 2
    assert f"the backfill of {table} for 'catalog' is running" in str(refused.value)
    store = HistoryStore(progress_path(running.config.checkpoint_dir))
    wait_for(lambda: store.reload() or store.tasks("src")[f"catalog:{table}"].finished, 120,
             "the first backfill to end", every=0.5)  # fmt: skip
    task = store.tasks("src")[f"catalog:{table}"]
    assert (task.run, task.rows) == (1, ROWS)  # the refused request started nothing


def test_a_backfill_with_no_runtime_running_says_how_to_start_one(tmp_path: Path) -> None:
    result = _cli("catalog", "--checkpoint", str(tmp_path / "checkpoint"))
    assert result.returncode == 2
    assert "no runtime has run with checkpoint" in result.stderr
    config = RuntimeConfig((), (), "127.0.0.1:1", "http://127.0.0.1:1", str(tmp_path / "cp"))
    config.save(tmp_path / "cp.config.json")
    with pytest.raises(HistoryError, match="no deployment 'catalog' runs"):
        backfill("catalog", [], None, checkpoint=str(tmp_path / "cp"), out=io.StringIO())


def test_a_request_nobody_takes_is_withdrawn(tmp_path: Path, function_folder: Any) -> None:
    folder = function_folder("catalog", "import dbus_fn as fn\n", ["a.b"])
    config = RuntimeConfig((), deployment_folders((str(folder),)), "127.0.0.1:1", "http://127.0.0.1:1",
                           str(tmp_path / "cp"))  # fmt: skip
    config.save(tmp_path / "cp.config.json")
    with pytest.raises(ServiceUnreachableError, match="no runtime serves its API at checkpoint"):
        backfill("catalog", [], None, checkpoint=str(tmp_path / "cp"), out=io.StringIO())
    assert not (tmp_path / "cp.requests").exists()  # nothing waits for a runtime to come
    # Its API up, its planner taking nothing (the query not running): withdrawn in time.
    with serving_api(tmp_path / "cp"), pytest.raises(
        ServiceUnreachableError, match="no runtime took the request within 1s"
    ):
        backfill("catalog", [], None, checkpoint=str(tmp_path / "cp"), out=io.StringIO(),
                 answer_timeout=1)  # fmt: skip
    assert list((tmp_path / "cp.requests").glob("*.json")) == []
