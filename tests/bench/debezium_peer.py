"""The peer dbus is measured against: Debezium's MySQL connector in a Kafka Connect
standalone worker, fetched from Maven Central and started the way its users run it.

``fetch`` resolves ``tests/bench/peers/pom.xml`` once into ``.dbus/peers/`` (git
ignores ``.dbus``); ``ConnectWorker`` runs ``ConnectStandalone`` with a worker
configuration rendered here and drives connectors through the worker's REST API.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_deploy.services import MariaDBEndpoint
from dbus_deploy.services._config import ServicesConfig
from dbus_deploy.services._install import Java, find_java, maven_copy_dependencies
from dbus_fn.events import BinlogPosition

POM = Path(__file__).resolve().parent / "peers" / "pom.xml"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
CONNECTOR_CLASS = "io.debezium.connector.mysql.MySqlConnector"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
FILE_HISTORY = "io.debezium.storage.file.history.FileSchemaHistory"
# The heap and collector flags Kafka's connect-standalone.sh and kafka-run-class.sh
# give a standalone worker (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS).
JVM_FLAGS = (
    "-Xms256M",
    "-Xmx2G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)


@dataclass(frozen=True, slots=True)
class PeerVariant:
    """One way of running the peer: settings on top of the worker's and the connector's
    defaults."""

    name: str
    worker: Mapping[str, str] = field(default_factory=dict)
    connector: Mapping[str, str] = field(default_factory=dict)


# Our producer is idempotent with acks=all; the peer's is made to promise the same
# (Kafka's producer settings enable.idempotence and acks, as producer.* in a worker).
SAME_GUARANTEES = {"producer.enable.idempotence": "true", "producer.acks": "all"}

DEFAULT = PeerVariant("default", worker=SAME_GUARANTEES)
"""The JSON converter and every other setting at its default."""

TUNED = PeerVariant(
    "tuned",
    worker={
        **SAME_GUARANTEES,
        # Kafka producer settings, passed by the worker as producer.*: the batching
        # and compression our own Kafka sink uses (dbus_spark/sinks/kafka.py).
        "producer.linger.ms": "5",
        "producer.batch.size": str(512 * 1024),
        "producer.compression.type": "lz4",
        # JsonConverter's schemas.enable: leave the schema out of every message, as
        # our CloudEvents do; the payload stays the same.
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
    },
    # Debezium's documented connector settings max.batch.size (default 2048),
    # max.queue.size (default 8192) and poll.interval.ms (default 500 ms): larger
    # batches and queue for throughput, a short wait for a batch for latency.
    connector={"max.batch.size": "8192", "max.queue.size": "32768", "poll.interval.ms": "10"},
)

VARIANTS = (DEFAULT, TUNED)


class PeerUnavailableError(RuntimeError):
    """The peer cannot be fetched or started here; the message says why, in one line."""


class PeerRequestError(RuntimeError):
    """The worker's REST API refused a request."""


def fetch(config: ServicesConfig, home: Path) -> tuple[Java, Path]:
    """Java and the folder of the peer's jars, resolved once per version of the pom."""
    java = find_java(config, "the Debezium peer")
    pom = POM.read_bytes()
    lib = home / f"lib-{hashlib.sha256(pom).hexdigest()[:12]}"
    if not lib.is_dir():
        # Resolved from a copy beside the jars: Maven leaves nothing in the source tree.
        project = home / "project"
        project.mkdir(parents=True, exist_ok=True)
        (project / "pom.xml").write_bytes(pom)
        maven_copy_dependencies(config, service="debezium-peer", pom_dir=project, output=lib)
    return java, lib


def worker_properties(bootstrap: str, port: int, offsets: Path, variant: PeerVariant) -> str:
    """A standalone worker's configuration: the JSON converter, offsets in a file, the
    REST API on ``port`` of the loopback address, then the variant's settings."""
    settings = {
        "bootstrap.servers": bootstrap,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "offset.storage.file.filename": str(offsets),
        "listeners": f"http://127.0.0.1:{port}",
        # Every jar is on the class path; no plugin.path to scan.
        "plugin.discovery": "only_scan",
        **variant.worker,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def log_properties(log_file: Path) -> str:
    """log4j2 settings: INFO and up into ``log_file``, with the connector's context."""
    return (
        "rootLogger.level=INFO\n"
        "rootLogger.appenderRef.file.ref=file\n"
        "appender.file.type=File\n"
        "appender.file.name=file\n"
        f"appender.file.fileName={log_file}\n"
        "appender.file.layout.type=PatternLayout\n"
        "appender.file.layout.pattern=[%d] %p %X{connector.context}%m (%c)%n\n"
    )


def connector_config(
    prefix: str,
    source: MariaDBEndpoint,
    tables: list[str],
    server_id: int,
    history: Path,
    variant: PeerVariant,
) -> dict[str, str]:
    """A MySQL connector that streams ``tables`` (``db.table``) into topics named
    ``prefix.db.table``; it snapshots schemas only (``snapshot.mode`` ``no_data``), so
    it streams from where the worker's offsets say, or from the binlog's end."""
    databases = sorted({table.split(".", 1)[0] for table in tables})
    return {
        "connector.class": CONNECTOR_CLASS,
        "tasks.max": "1",
        "database.hostname": source.host,
        "database.port": str(source.port),
        "database.user": source.user,
        "database.password": source.password,
        "database.server.id": str(server_id),
        "topic.prefix": prefix,
        "database.include.list": ",".join(databases),
        "table.include.list": ",".join(tables),
        "snapshot.mode": "no_data",
        "schema.history.internal": FILE_HISTORY,
        "schema.history.internal.file.filename": str(history),
        **variant.connector,
    }


def offsets_payload(prefix: str, start: BinlogPosition) -> dict[str, Any]:
    """The body of ``PATCH /connectors/NAME/offsets`` (KIP-875) that makes a MySQL
    connector read on from ``start``: its source partition is ``{"server": prefix}``,
    its offset the binlog file and position (no row or event to skip), and on MySQL
    the executed GTID set there, without which it cannot ask for the binlog."""
    offset: dict[str, Any] = {"file": start.file, "pos": start.pos}
    if start.gtid:
        offset["gtids"] = start.gtid
    return {"offsets": [{"partition": {"server": prefix}, "offset": offset}]}


def row_id(key: bytes) -> int:
    """The ``id`` of a row from the key of the connector's message, with the schema
    (``{"schema": ..., "payload": {"id": 7}}``) or without (``{"id": 7}``)."""
    parsed = json.loads(key)
    return int(parsed.get("payload", parsed)["id"])


class ConnectWorker:
    """A Kafka Connect standalone worker process and its REST API."""

    def __init__(
        self,
        java: Java,
        lib: Path,
        folder: Path,
        bootstrap: str,
        port: int,
        variant: PeerVariant,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "worker.properties").write_text(
            worker_properties(bootstrap, port, folder / "offsets.dat", variant)
        )
        (folder / "log4j2.properties").write_text(log_properties(folder / "connect.log"))
        self.variant = variant
        self.folder = folder
        self._url = f"http://127.0.0.1:{port}"
        with (folder / "stdout.log").open("ab") as out:
            self.process = subprocess.Popen(
                [
                    str(java.binary),
                    *JVM_FLAGS,
                    f"-Dlog4j2.configurationFile={folder / 'log4j2.properties'}",
                    "-cp",
                    f"{lib}/*",
                    MAIN_CLASS,
                    str(folder / "worker.properties"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=folder,
            )
        try:
            self._wait_ready()
        except BaseException:  # the caller gets no worker to close: close it here
            self.close()
            raise

    def _wait_ready(self, within: float = 120) -> None:
        deadline = time.monotonic() + within
        while True:
            try:
                # Jetty answers 404 until the worker's resources are in place.
                self.call("GET", "/connectors")
                return
            except (OSError, PeerRequestError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise PeerUnavailableError(
                        f"the Kafka Connect worker did not start; see {self.folder / 'connect.log'}"
                    ) from None
                time.sleep(0.3)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """One REST request; its JSON answer (``None`` when it has no body)."""
        request = urllib.request.Request(
            self._url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise PeerRequestError(
                f"{method} {path}: HTTP {exc.code} {exc.read().decode(errors='replace')}"
            ) from None
        return json.loads(text) if text else None

    def create(self, name: str, config: Mapping[str, str]) -> None:
        self.call("POST", "/connectors", {"name": name, "config": dict(config)})

    def stop(self, name: str) -> None:
        """Stop the connector and its task (``PUT /connectors/NAME/stop``), and wait."""
        self.call("PUT", f"/connectors/{name}/stop")
        self._wait_state(name, "STOPPED")

    def start_at(self, name: str, prefix: str, start: BinlogPosition) -> None:
        """Set a stopped connector's offset to ``start`` and resume it."""
        self.call("PATCH", f"/connectors/{name}/offsets", offsets_payload(prefix, start))
        self.call("PUT", f"/connectors/{name}/resume")

    def delete(self, name: str) -> None:
        self.call("DELETE", f"/connectors/{name}")

    def failure(self, name: str) -> str | None:
        """Why the connector or its task failed (its trace's first line), else None."""
        if self.process.poll() is not None:
            return f"the worker exited ({self.process.returncode}); see {self.folder}"
        status = self.call("GET", f"/connectors/{name}/status")
        for part in (status["connector"], *status["tasks"]):
            if part["state"] == "FAILED":
                return str(part.get("trace", "failed")).splitlines()[0]
        return None

    def _wait_state(self, name: str, state: str, within: float = 60) -> None:
        deadline = time.monotonic() + within
        while (now := self.call("GET", f"/connectors/{name}/status"))["connector"][
            "state"
        ] != state or now["tasks"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"connector {name} is not {state} after {within:g} s: {now}")
            time.sleep(0.1)

    def close(self) -> None:
        """End the worker (SIGTERM: it stops its connectors and flushes), then wait."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
