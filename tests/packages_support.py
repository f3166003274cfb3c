"""Two deployments that bring their own packages, for the tests that run them on each
kind of executor: local, a standalone cluster, a cluster member, a container worker."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from support import kafka_consumer, wait_for


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


OLD = """
    import phonenumbers
    import six
    import dbus_fn as fn

    @fn.projection(tables="*.people")
    def normalized(event: fn.RowChange) -> dict:
        number = phonenumbers.parse(event.row["phone"], "GB")
        e164 = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
        return {"id": event.row["id"], "phone": e164, "six": six.__version__,
                "phonenumbers": phonenumbers.__version__}
"""  # fmt: skip
NEW = """
    import six
    import dbus_fn as fn

    @fn.projection(tables="*.people")
    def stamped(event: fn.RowChange) -> dict:
        return {"id": event.row["id"], "six": six.__version__}
"""


class TwoDeployments:
    """Over a new ``people`` table: ``old`` imports ``phonenumbers`` and pins ``six``
    1.15.0, ``new`` pins ``six`` 1.16.0; each writes to a topic of its own the versions
    its function sees."""

    def __init__(self, database: Any, bootstrap: str, topic: str, folder: Path) -> None:
        """``database``: a fresh database (``connect()``, ``name``); ``topic``: what the
        two topics are named after; ``folder``: where the deployments are written."""
        with database.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE people (id INT PRIMARY KEY, phone VARCHAR(32))")
        self.database, self.bootstrap = database, bootstrap
        table = f"{database.name}.people"
        self.topics = f"{topic}.old", f"{topic}.new"
        functions = folder / "functions"
        self.old = _folder(functions, "old", table, self.topics[0],
                           "six==1.15.0\nphonenumbers==8.13.0\n", OLD)  # fmt: skip
        self.new = _folder(functions, "new", table, self.topics[1], "six==1.16.0\n", NEW)

    @classmethod
    def of(cls, scratch: Any) -> TwoDeployments:
        """In an end-to-end test's scratch (``e2e_support.Scratch``)."""
        return cls(scratch.fresh_database, scratch.services.kafka.bootstrap_servers,
                   scratch.kafka_topic, scratch.tmp_path)  # fmt: skip

    def write(self) -> None:
        with self.database.connect() as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO people VALUES (%s, %s)",
                            [(1, "020 7946 0958"), (2, "+81 3-1234-5678")])  # fmt: skip

    def assert_each_saw_its_own(self) -> None:
        old_rows = _rows(self.bootstrap, self.topics[0], 2)
        new_rows = _rows(self.bootstrap, self.topics[1], 2)
        assert old_rows == [
            {"id": 1, "phone": "+442079460958", "six": "1.15.0", "phonenumbers": "8.13.0"},
            {"id": 2, "phone": "+81312345678", "six": "1.15.0", "phonenumbers": "8.13.0"},
        ]
        assert new_rows == [{"id": 1, "six": "1.16.0"}, {"id": 2, "six": "1.16.0"}]
