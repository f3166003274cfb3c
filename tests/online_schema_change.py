"""Online schema changes for tests: the real ``pt-online-schema-change`` and a write load.

``percona-toolkit`` (Debian's package) is installed when missing, as the browser
fixture installs chromium. gh-ost is not packaged anywhere reachable; its tests
issue the statements it issues by hand.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from dbus_fn.errors import DbusError

PT_OSC = "pt-online-schema-change"


def pt_online_schema_change() -> str:
    """The path of ``pt-online-schema-change``, installing ``percona-toolkit`` if missing."""
    found = shutil.which(PT_OSC)
    if found is None:
        from dbus_deploy.services import apt_install, load_config

        try:
            apt_install(
                load_config(),
                {"percona-toolkit": "pt-online-schema-change",
                 "libdbd-mysql-perl": "pt-online-schema-change"},
            )  # fmt: skip
        except DbusError as exc:
            pytest.fail(f"no {PT_OSC}: {exc}", pytrace=False)
        found = shutil.which(PT_OSC)
    assert found is not None, f"{PT_OSC} is not on PATH after installing percona-toolkit"
    return found


def run_pt_online_schema_change(
    tool: str, endpoint: Any, database: str, table: str, alter: str, *, chunk_size: int = 500
) -> str:
    """Run the tool's ``--execute`` on ``database.table``; its output (fails the test on error)."""
    target = (
        f"h={endpoint.host},P={endpoint.port},u={endpoint.user},p={endpoint.password},"
        f"D={database},t={table}"
    )
    argv = [
        tool, "--alter", alter, "--execute",
        # One server, no replicas to find or wait for.
        "--recursion-method=none", "--no-check-replication-filters",
        f"--chunk-size={chunk_size}", "--set-vars", "lock_wait_timeout=10",
        "--print", target,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{PT_OSC} failed ({done.returncode}):\n{output}"
    return output


@dataclass
class WriteLoad:
    """A thread inserting, updating and deleting rows of ``table(id, a)`` until stopped.

    ``changes`` counts the rows its statements changed: every one is a change of
    the table the binlog must show, and nothing else is.
    """

    database: Any
    table: str
    next_id: int
    pause: float = 0.002
    changes: int = 0
    statements: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _error: BaseException | None = None

    def __enter__(self) -> WriteLoad:
        self._thread = threading.Thread(target=self._run, name="write-load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
            self._thread = None
        if self._error is not None:
            raise AssertionError(f"the write load failed: {self._error!r}") from self._error

    def wait_for_statements(self, count: int, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while self.statements < count:
            assert time.monotonic() < deadline, f"the write load made {self.statements} writes"
            time.sleep(0.05)

    def _run(self) -> None:
        pick = random.Random(7)
        connection = self.database.connect()
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    choice = pick.random()
                    if choice < 0.4:
                        cursor.execute(
                            f"INSERT INTO `{self.table}` (id, a) VALUES (%s, %s)",
                            (self.next_id, pick.randrange(1000)),
                        )
                        self.next_id += 1
                    elif choice < 0.85:
                        cursor.execute(
                            f"UPDATE `{self.table}` SET a = a + 1 WHERE id = %s",
                            (pick.randrange(1, self.next_id),),
                        )
                    else:
                        cursor.execute(
                            f"DELETE FROM `{self.table}` WHERE id = %s",
                            (pick.randrange(1, self.next_id),),
                        )
                    self.changes += cursor.rowcount
                    self.statements += 1
                    time.sleep(self.pause)
        except BaseException as exc:  # reported by stop(), in the test's thread
            self._error = exc
        finally:
            connection.close()
