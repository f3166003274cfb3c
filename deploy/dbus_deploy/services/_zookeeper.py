"""ZooKeeper, standalone, from Debian's ``zookeeper`` package.

Debian's start scripts assume /etc and /var paths, so the server is started
with ``java -cp`` on the packaged jars (their manifests name the rest of the
classpath) plus an slf4j binding and log4j 1.2 for its log. The admin server
is off (it would take port 8080) and the four-letter words used for the health
check (``srvr``) and for people (``ruok``, ``stat``, ``mntr``, ``conf``) are allowed.
"""

from __future__ import annotations

import socket
from pathlib import Path

from dbus_deploy.services._install import find_java
from dbus_deploy.services._process import Launch
from dbus_deploy.services._service import Service

_JARS = (
    Path("/usr/share/java/zookeeper.jar"),
    Path("/usr/share/java/slf4j-log4j12.jar"),
    Path("/usr/share/java/log4j-1.2.jar"),
)
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

_LOG4J = """\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
"""


class ZooKeeper(Service):
    name = "zookeeper"
    log_name = "zookeeper.log"
    start_timeout = 60.0

    def apt_packages(self) -> dict[str, str]:
        if all(jar.exists() for jar in _JARS):
            return {}
        return {"zookeeper": self.name}

    def install(self) -> None:
        find_java(self.config, self.name)

    def prepare(self) -> Launch:
        self._make_dirs()
        java = find_java(self.config, self.name)
        cfg = self.conf / "zoo.cfg"
        settings = {
            "tickTime": 2000,
            "initLimit": 10,
            "syncLimit": 5,
            "dataDir": self.data,
            "clientPort": self.port,
            "clientPortAddress": self.config.host,
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr,conf",
            "autopurge.snapRetainCount": 3,
            "autopurge.purgeInterval": 1,
        }
        cfg.write_text(
            "# Written by `dbus services up`; edits are overwritten.\n"
            + "".join(f"{key}={value}\n" for key, value in settings.items())
        )
        (self.conf / "log4j.properties").write_text(_LOG4J)
        heap = self.config.heaps[self.name]
        classpath = ":".join([str(self.conf), *map(str, _JARS)])
        return Launch(
            argv=[
                str(java.binary),
                f"-Xms{heap}",
                f"-Xmx{heap}",
                *self.config.java_options,
                f"-Dzookeeper.log.dir={self.logs}",
                f"-Dlog4j.configuration=file:{self.conf / 'log4j.properties'}",
                f"-Djava.io.tmpdir={self.run}",
                "-cp",
                classpath,
                _MAIN,
                str(cfg),
            ],
            log_file=self.log_file,
            cwd=self.root,
            env={"PATH": "/usr/bin:/bin", "JAVA_HOME": str(java.home)},
        )

    def check_health(self) -> str | None:
        # `ruok` only says the process runs; `srvr` names a mode once it serves.
        try:
            with socket.create_connection((self.config.host, self.port), timeout=2) as conn:
                conn.sendall(b"srvr")
                answer = b""
                while chunk := conn.recv(4096):
                    answer += chunk
        except OSError as exc:
            return f"cannot connect: {exc}"
        if b"Mode: standalone" not in answer:
            first = answer.decode(errors="replace").strip().splitlines()[:1]
            return f"not serving yet ({first[0] if first else 'no answer'})"
        return None
