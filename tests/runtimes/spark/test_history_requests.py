"""History requests against a real source, no Spark: what a runtime's driver answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for
from dbus_fn.errors import HistoryError
from dbus_fn.manifest import Manifest
from dbus_spark.state.history import HistoryStore


def test_a_backfill_during_the_bootstrap_names_the_bootstrap(
    fresh_database: Any, tmp_path: Path
) -> None:
    with fresh_database.connect() as connection, connection.cursor() as cursor:
        cursor.execute("CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(8))")
        cursor.execute("INSERT INTO products VALUES (1, 'a'), (2, 'b')")
        connection.commit()
    table = f"{fresh_database.name}.products"
    manifest = Manifest.from_mapping(
        {"name": "catalog", "version": "1", "module": "m.py", "tables": [table]}
    )
    spec = SourceSpec("src", fresh_database.endpoint.dsn, tables=(table,))
    reader = BinlogReader(spec, replica_id=replica_id_for(f"{fresh_database.name}/t"))
    try:
        store = HistoryStore(tmp_path / "history.json")
        assert [t.kind for t in store.consider(reader, [manifest])] == ["bootstrap"]
        with pytest.raises(HistoryError) as caught:
            store.backfill(reader, [manifest], "catalog", [table])
    finally:
        reader.close()
    assert f"the bootstrap of {table} for 'catalog' is running" in str(caught.value)


CATALOG = """
import dbus_fn as fn

@fn.route(tables="{table}")
def both(event: fn.RowChange) -> list[str]:
    return ["kafka://{topic}", "es://{index}"]
"""

SAVE = """
import sys
from pathlib import Path
from dbus_spark.interfaces.settings import runtime_config
folder, dsn, kafka, es, checkpoint = sys.argv[1:]
config = runtime_config(sources=(f"shop={dsn}",), deployments=(folder,), kafka=kafka,
                        elasticsearch=es, checkpoint=checkpoint)
path = Path(config.checkpoint_dir)
config.save(path.with_name(path.name + ".config.json"))
"""


@pytest.fixture
def stopped_runtime(
    fresh_database: Any, kafka_topic: str, es_index: str, services: Any, tmp_path: Path
) -> tuple[str, str]:
    """The checkpoint of a runtime that ran a catalog deployment (two rows in its
    table, none in its sinks) and stopped, and its source's DSN: the password is
    nowhere on disk (the process that saved the configuration has exited)."""
    import subprocess
    import sys

    with fresh_database.connect() as connection, connection.cursor() as cursor:
        cursor.execute("CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(8))")
        cursor.execute("INSERT INTO products VALUES (1, 'a'), (2, 'b')")
    table = f"{fresh_database.name}.products"
    folder = tmp_path / "catalog"
    folder.mkdir()
    (folder / "dbus.toml").write_text(
        f'name = "catalog"\nversion = "1"\nmodule = "catalog.py"\ntables = ["{table}"]\n'
    )
    (folder / "catalog.py").write_text(
        CATALOG.format(table=table, topic=kafka_topic, index=es_index)
    )
    checkpoint = str(tmp_path / "checkpoint")
    dsn = fresh_database.endpoint.dsn
    subprocess.run(
        [sys.executable, "-c", SAVE, str(folder), dsn, services.kafka.bootstrap_servers,
         services.elasticsearch.url, checkpoint],
        check=True,
    )  # fmt: skip
    assert ":dbus@" not in (tmp_path / "checkpoint.config.json").read_text()  # no password
    return checkpoint, dsn


def test_verify_runs_with_no_runtime_up_given_the_source_dsn(
    stopped_runtime: tuple[str, str], kafka_topic: str, es_index: str
) -> None:
    from click.testing import CliRunner

    from dbus_fn.cli import cli

    checkpoint, dsn = stopped_runtime
    alone = CliRunner().invoke(cli, ["fn", "verify", "catalog", "--checkpoint", checkpoint])
    assert alone.exit_code == 3, alone.output  # no runtime answered, as the others say
    assert "--source" in alone.output and len(alone.output.strip().splitlines()) == 1

    given = CliRunner().invoke(
        cli, ["fn", "verify", "catalog", "--checkpoint", checkpoint, "--source", f"shop={dsn}"]
    )
    assert given.exit_code == 6, given.output  # it read both rows, and the sinks hold none
    assert f"kafka://{kafka_topic}: 2 expected, 2 missing" in given.output
    assert f"es://{es_index}: 2 expected, 2 missing" in given.output

    unknown = CliRunner().invoke(
        cli, ["fn", "verify", "catalog", "--checkpoint", checkpoint, "--source", f"other={dsn}"]
    )
    assert unknown.exit_code == 2 and "--source other" in unknown.output, unknown.output


def test_verify_runs_where_no_runtime_ever_ran_given_the_functions(
    stopped_runtime: tuple[str, str], kafka_topic: str, es_index: str, services: Any,
    tmp_path: Path,
) -> None:
    from click.testing import CliRunner

    from dbus_fn.cli import cli

    _, dsn = stopped_runtime
    result = CliRunner().invoke(
        cli, ["fn", "verify", "catalog", "--functions", str(tmp_path / "catalog"),
              "--source", f"shop={dsn}", "--kafka", services.kafka.bootstrap_servers,
              "--elasticsearch", services.elasticsearch.url,
              "--checkpoint", str(tmp_path / "never-used")],
    )  # fmt: skip
    assert result.exit_code == 6, result.output
    assert f"kafka://{kafka_topic}: 2 expected, 2 missing" in result.output
    assert f"es://{es_index}: 2 expected, 2 missing" in result.output
    assert not (tmp_path / "never-used").exists()


def test_ctrl_c_of_verify_repair_withdraws_the_repair(stopped_runtime: tuple[str, str]) -> None:
    """Exit 130 and nothing left for a runtime started later to repair unasked."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from support import serving_api

    from dbus_spark.state.checkpoint import requests_dir

    checkpoint, dsn = stopped_runtime
    with serving_api(checkpoint):  # its API up, its planner taking nothing
        process = subprocess.Popen(
            [sys.executable, "-c", "from dbus_fn.cli import main; main()", "fn", "verify",
             "catalog", "--repair", "--checkpoint", checkpoint, "--source", f"shop={dsn}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "DBUS_CHECKPOINT": ""},
        )  # fmt: skip
        folder = requests_dir(checkpoint)
        deadline = time.monotonic() + 60
        while not list(folder.glob("*.json")):  # drift found, the repair asked for
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=20)
    assert process.returncode == 130, stdout + stderr
    assert "repair of catalog is withdrawn" in stderr and "Traceback" not in stderr
    assert not list(folder.iterdir()), "the repair is still queued"
