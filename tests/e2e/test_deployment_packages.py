"""Deployments that bring their own packages (``requirements.txt``), on a local runtime:
one imports ``phonenumbers``, which the runtime does not have, and two pin two
versions of ``six``; each function sees its own, in one runtime. The driver resolves
each set once and Spark serves it to the executors (``dbus_spark.shipment``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Scratch, spawn_cli_runtime, stop_cli_runtime
from support import kafka_consumer, runtime_api, wait_for

pytestmark = pytest.mark.e2e


def _folder(root: Path, name: str, table: str, topic: str, requirements: str, body: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "requirements.txt").write_text(requirements)
    (folder / f"{name}.py").write_text(textwrap.dedent(body))
    (folder / "dbus.toml").write_text(textwrap.dedent(f"""
        name = "{name}"
        version = "1.0.0"
        module = "{name}.py"
        tables = ["{table}"]
        default_route = "kafka://{topic}"
        initial = "none"
    """))  # fmt: skip
    return folder


def _rows(bootstrap: str, topic: str, count: int) -> list[dict[str, Any]]:
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[dict[str, Any]] = []

    def more() -> bool:
        messages = consumer.consume(100, timeout=1)
        found.extend(json.loads(m.value())["after"] for m in messages if m.error() is None)
        return len(found) >= count

    try:
        wait_for(more, 120, f"{count} rows in {topic}")
    finally:
        consumer.close()
    return sorted(found, key=lambda row: row["id"])


def test_each_deployment_runs_with_its_own_packages_in_one_runtime(scratch: Scratch) -> None:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE people (id INT PRIMARY KEY, phone VARCHAR(32))")
    table = f"{scratch.fresh_database.name}.people"
    old_topic, new_topic = f"{scratch.kafka_topic}.old", f"{scratch.kafka_topic}.new"
    functions = scratch.tmp_path / "functions"
    old = _folder(functions, "old", table, old_topic, "six==1.15.0\nphonenumbers==8.13.0\n", '''
        import phonenumbers
        import six
        import dbus_fn as fn

        @fn.projection(tables="*.people")
        def normalized(event: fn.RowChange) -> dict:
            number = phonenumbers.parse(event.row["phone"], "GB")
            e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
            return {"id": event.row["id"], "phone": e164, "six": six.__version__,
                    "phonenumbers": phonenumbers.__version__}
    ''')  # fmt: skip
    new = _folder(functions, "new", table, new_topic, "six==1.16.0\n", '''
        import six
        import dbus_fn as fn

        @fn.projection(tables="*.people")
        def stamped(event: fn.RowChange) -> dict:
            return {"id": event.row["id"], "six": six.__version__}
    ''')  # fmt: skip
    checkpoint = scratch.tmp_path / "checkpoint"
    runtime = spawn_cli_runtime(scratch, old, str(checkpoint), "--functions", str(new))
    try:
        runtime_api(checkpoint)
        with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO people VALUES (%s, %s)",
                            [(1, "020 7946 0958"), (2, "+81 3-1234-5678")])  # fmt: skip
        bootstrap = scratch.services.kafka.bootstrap_servers
        old_rows, new_rows = _rows(bootstrap, old_topic, 2), _rows(bootstrap, new_topic, 2)
    finally:
        stop_cli_runtime(scratch, runtime)
    assert old_rows == [
        {"id": 1, "phone": "+442079460958", "six": "1.15.0", "phonenumbers": "8.13.0"},
        {"id": 2, "phone": "+81312345678", "six": "1.15.0", "phonenumbers": "8.13.0"},
    ]
    assert new_rows == [{"id": 1, "six": "1.16.0"}, {"id": 2, "six": "1.16.0"}]
