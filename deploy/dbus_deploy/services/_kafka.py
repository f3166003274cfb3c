"""An Apache Kafka broker in KRaft mode: one node that is broker and controller.

The jars come from Maven Central through ``deploy/services/kafka/pom.xml``
(resolved once into ``<home>/lib/kafka``; again only when the pom changes). The
log directory is formatted once with ``kafka.tools.StorageTool``; the broker
runs as ``java -cp <jars> kafka.Kafka server.properties``. Every internal topic
has replication factor 1, as a single broker requires.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import socket
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from dbus_deploy.services._errors import ServiceStartError
from dbus_deploy.services._install import Java, find_java, maven_copy_dependencies
from dbus_deploy.services._process import Launch, last_log_line, run_logged
from dbus_deploy.services._service import Service
from dbus_fn.local_services import PORT_ENV

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = warn
"""

# The health check's own client must not print connection refusals while the
# broker is still starting.
_QUIET = logging.getLogger("dbus_deploy.services.kafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class Kafka(Service):
    name = "kafka"
    log_name = "kafka.log"
    start_timeout = 120.0

    @property
    def jars(self) -> Path:
        return self.config.lib_dir / "kafka"

    @property
    def controller_port(self) -> int:
        return self.config.ports["kafka_controller"]

    def ports(self) -> list[tuple[int, str]]:
        return [
            (self.port, PORT_ENV["kafka"]),
            (self.controller_port, PORT_ENV["kafka_controller"]),
        ]

    def _pom_digest(self) -> str:
        return hashlib.sha256((self.pom_dir / "pom.xml").read_bytes()).hexdigest()

    def install(self) -> None:
        find_java(self.config, self.name)
        stamp = self.jars / ".pom-sha256"
        digest = self._pom_digest()
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return
        maven_copy_dependencies(
            self.config, service=self.name, pom_dir=self.pom_dir, output=self.jars
        )
        stamp.write_text(digest + "\n")

    def _java_argv(self, java: Java, main: str, *args: str, heap: str) -> list[str]:
        return [
            str(java.binary),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            *self.config.java_options,
            "-Djava.awt.headless=true",
            f"-Djava.io.tmpdir={self.run}",
            f"-Dkafka.logs.dir={self.logs}",
            f"-Dlog4j2.configurationFile={self.conf / 'log4j2.properties'}",
            "-cp",
            str(self.jars / "*"),
            main,
            *args,
        ]

    def _write_config(self) -> Path:
        host, port, controller = self.config.host, self.port, self.controller_port
        settings = {
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@{host}:{controller}",
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data,
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 10,
            # A transaction left open longer than its timeout (a writer paused past
            # its hold) is aborted within a second of it, not ten: the runtime's
            # handoff time is the transaction timeout plus this interval.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
            "group.initial.rebalance.delay.ms": 0,
            "log.retention.hours": 24,
        }
        properties = self.conf / "server.properties"
        properties.write_text(
            "# Written by `dbus services up`; edits are overwritten.\n"
            + "".join(f"{key}={value}\n" for key, value in settings.items())
        )
        (self.conf / "log4j2.properties").write_text(_LOG4J2)
        return properties

    def prepare(self) -> Launch:
        self._make_dirs()
        java = find_java(self.config, self.name)
        properties = self._write_config()
        if not (self.data / "meta.properties").is_file():
            self._format(java, properties)
        return Launch(
            argv=self._java_argv(
                java, "kafka.Kafka", str(properties), heap=self.config.heaps[self.name]
            ),
            log_file=self.log_file,
            cwd=self.root,
            env={"PATH": "/usr/bin:/bin", "JAVA_HOME": str(java.home)},
        )

    def _format(self, java: Java, properties: Path) -> None:
        """Format the KRaft log directory once, with a new cluster id."""
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        format_log = self.logs / "storage-format.log"
        argv = self._java_argv(
            java,
            "kafka.tools.StorageTool",
            "format",
            # One argument: a urlsafe id may start with "-", which the tool
            # would otherwise take for an option.
            f"--cluster-id={cluster_id}",
            "--config",
            str(properties),
            heap="256m",
        )
        failure = run_logged(argv, log_file=format_log, cwd=self.root, timeout=300)
        if failure is not None:
            raise ServiceStartError(
                self.name,
                f"formatting the KRaft log directory failed ({failure})",
                log_file=format_log,
                last_log_line=last_log_line(format_log),
            )

    def check_health(self) -> str | None:
        address = (self.config.host, self.port)
        try:
            socket.create_connection(address, timeout=2).close()
        except OSError as exc:
            return f"cannot connect: {exc}"
        # The stubs type config values as scalars; librdkafka's Python binding
        # also takes a logging.Logger for "logger".
        settings: dict[str, Any] = {
            "bootstrap.servers": f"{address[0]}:{address[1]}",
            "logger": _QUIET,
        }
        admin = AdminClient(settings)
        try:
            metadata = admin.list_topics(timeout=5)
        except KafkaException as exc:
            return f"metadata request failed: {exc}"
        if not metadata.brokers:
            return "no broker in the cluster metadata yet"
        return None
