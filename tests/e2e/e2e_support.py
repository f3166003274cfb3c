"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from support import one_source_config

from dbus_spark.config.runtime import RuntimeConfig


class Scratch(NamedTuple):
    """What a runtime test writes through: the services, and its own database, topic,
    index, function folders and temporary folder."""

    services: Any
    fresh_database: Any
    kafka_topic: str
    es_index: str
    tmp_path: Path
    function_folder: Any

    def runtime_config(self, folder: Path) -> RuntimeConfig:
        """A runtime over the local services, the deployment in ``folder``, starting now;
        its source ``src`` is the server of the scratch's database."""
        return one_source_config(self.services, self.fresh_database, folder,
                                 self.tmp_path / "checkpoint", start="latest")  # fmt: skip


def spawn_cli_runtime(
    scratch: Scratch, folder: Path, checkpoint: str, *options: str
) -> subprocess.Popen[bytes]:
    """``dbus runtime start`` over the scratch's services and ``folder``, serving its API
    on a free port, its output in ``runtime.log`` of the scratch's folder."""
    services = scratch.services
    with (scratch.tmp_path / "runtime.log").open("wb") as out:
        return subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dbus"), "runtime", "start",
                "--source", f"shop={services.mariadb.dsn}", "--functions", str(folder),
                "--kafka", services.kafka.bootstrap_servers,
                "--elasticsearch", services.elasticsearch.url,
                "--checkpoint", checkpoint, "--from", "latest", "--master", "local[2]",
                "--api", "127.0.0.1:0", *options,
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip


def member_env(scratch: Scratch, zk_root: str, cluster: str, dsn_variable: str) -> dict[str, str]:
    """What `dbus` commands and a member of ``cluster`` (under the test's ZooKeeper root
    ``zk_root``) need in their environment: ZooKeeper, the cluster, a bundle cache of
    the test's own and the DSN of the scratch database's server in ``dsn_variable``."""
    services = scratch.services
    return {
        "DBUS_ZOOKEEPER": f"{services.zookeeper.hosts}{zk_root}",
        "DBUS_CLUSTER": cluster,
        "DBUS_BUNDLE_CACHE": str(scratch.tmp_path / "bundles"),
        dsn_variable: scratch.fresh_database.endpoint.dsn,
    }


def spawn_cli_member(
    scratch: Scratch, cluster: str, runtime_id: str, checkpoint: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``dbus runtime start --cluster CLUSTER`` over the scratch's sinks (ZooKeeper and
    the sources' DSN variables in ``env``), serving its API on a free port, its output
    in ``runtime.log`` of the scratch's folder."""
    services = scratch.services
    with (scratch.tmp_path / "runtime.log").open("wb") as out:
        return subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dbus"), "runtime", "start",
                "--cluster", cluster, "--runtime-id", runtime_id,
                "--kafka", services.kafka.bootstrap_servers,
                "--elasticsearch", services.elasticsearch.url,
                "--checkpoint", str(checkpoint), "--master", "local[2]", "--api", "127.0.0.1:0",
            ],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **env, "PYSPARK_PYTHON": sys.executable},
        )  # fmt: skip


@contextlib.contextmanager
def cli_runtime(scratch: Scratch, folder: Path, *options: str) -> Iterator[str]:
    """``spawn_cli_runtime`` with a checkpoint of its own: yields the API's URL; stops
    the runtime (SIGTERM) afterwards and prints the end of its log."""
    from support import runtime_api

    checkpoint = scratch.tmp_path / "cli-checkpoint"
    runtime = spawn_cli_runtime(scratch, folder, str(checkpoint), *options)
    try:
        yield runtime_api(checkpoint)
    finally:
        stop_cli_runtime(scratch, runtime)


def stop_cli_runtime(scratch: Scratch, runtime: subprocess.Popen[bytes]) -> None:
    """Stop a ``spawn_cli_runtime`` (SIGTERM, then SIGKILL after a minute) and print the
    end of its log."""
    runtime.send_signal(signal.SIGTERM)
    try:
        runtime.wait(60)
    except subprocess.TimeoutExpired:
        runtime.kill()
        runtime.wait()
    print((scratch.tmp_path / "runtime.log").read_text(errors="replace")[-3000:])


def tens_refused(scratch: Scratch, name: str) -> tuple[Path, str]:
    """A deployment ``name`` over a new ``orders`` table that routes each row to the
    scratch topic and raises on every tenth id: its folder, and the table."""
    table = f"{scratch.fresh_database.name}.orders"
    folder = scratch.function_folder(
        name,
        f'''
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def there(event: fn.RowChange) -> str:
            if event.after["id"] % 10 == 0:
                raise ValueError("tens are refused")
            return "kafka://{scratch.kafka_topic}"
        ''',
        [table],
    )
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    return folder, table


def insert_orders(scratch: Scratch, first: int, last: int) -> None:
    """Orders ``first`` to ``last``, 50 to a transaction."""
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        for start in range(first, last + 1, 50):
            cur.executemany(
                "INSERT INTO orders VALUES (%s, %s)",
                [(i, i * 3) for i in range(start, min(start + 50, last + 1))],
            )
