"""Elasticsearch 8, the minimal distribution from Maven Central, single node.

``deploy/services/elasticsearch/pom.xml`` fetches the zip (``~/.m2`` caches
it); it is unpacked once into ``<home>/lib``. Elasticsearch refuses to run as
root, so it runs as the unprivileged system user ``dbus-es`` (created if
missing), which owns its config, data, log and temp directories. Disk
watermarks are off so a nearly full development disk never turns indices
read-only under the tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import urllib.request
import zipfile
from pathlib import Path

from dbus_deploy.services._errors import ToolMissingError
from dbus_deploy.services._install import (
    Java,
    extract_zip,
    find_java,
    maven_copy_dependencies,
    run_install_step,
)
from dbus_deploy.services._process import Launch
from dbus_deploy.services._service import Service
from dbus_fn.errors import ServiceError

VERSION = "8.19.7"
RUN_AS = "dbus-es"
CLUSTER = "dbus-dev"


class Elasticsearch(Service):
    name = "elasticsearch"
    log_name = "elasticsearch.out"
    other_logs = (f"{CLUSTER}.log",)
    start_timeout = 180.0
    stop_grace = 60.0

    @property
    def distribution(self) -> Path:
        return self.config.lib_dir / f"elasticsearch-{VERSION}"

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def root_endpoint_source(self) -> Path:
        return self.pom_dir / "root-endpoint"

    def _digest(self) -> str:
        """What the installed distribution is made from: the pom and the plugin source."""
        digest = hashlib.sha256((self.pom_dir / "pom.xml").read_bytes())
        for source in sorted(self.root_endpoint_source.rglob("*")):
            if source.is_file():
                digest.update(source.relative_to(self.pom_dir).as_posix().encode())
                digest.update(source.read_bytes())
        return digest.hexdigest()

    def install(self) -> None:
        java = find_java(self.config, self.name)
        self._ensure_user()
        self._check_reachable()
        stamp = self.distribution / ".dbus-sha256"
        digest = self._digest()
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return
        download = self.config.lib_dir / "elasticsearch-download"
        maven_copy_dependencies(
            self.config, service=self.name, pom_dir=self.pom_dir, output=download
        )
        (archive,) = download.glob("elasticsearch-*.zip")
        unpacked = self.distribution.with_name(self.distribution.name + ".unpacked")
        extract_zip(archive, unpacked)
        # The zip holds one top-level folder, elasticsearch-<version>/.
        (inner,) = unpacked.iterdir()
        shutil.rmtree(self.distribution, ignore_errors=True)
        inner.rename(self.distribution)
        shutil.rmtree(unpacked)
        shutil.rmtree(download)
        self._install_root_endpoint(java)
        stamp.write_text(digest + "\n")

    def _install_root_endpoint(self, java: Java) -> None:
        """Compile the ``GET /`` plugin against this distribution and put it in ``plugins/``.

        The minimal distribution has no handler for the root URL, so the 8.x
        client's ``info()`` and ``ping()`` would fail without it.
        """
        build = self.config.home / "build" / "elasticsearch-root-endpoint"
        shutil.rmtree(build, ignore_errors=True)
        classes = build / "classes"
        classes.mkdir(parents=True)
        self._compile(java, classes)
        plugin = self.distribution / "plugins" / "dbus-root-endpoint"
        plugin.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(plugin / "dbus-root-endpoint.jar", "w") as jar:
            for compiled in sorted(classes.rglob("*.class")):
                jar.write(compiled, compiled.relative_to(classes).as_posix())
        shutil.copyfile(
            self.root_endpoint_source / "plugin-descriptor.properties",
            plugin / "plugin-descriptor.properties",
        )
        shutil.rmtree(build)

    def _compile(self, java: Java, classes: Path) -> None:
        """javac when the Java is a JDK, else the Eclipse compiler from Maven Central."""
        javac = java.home / "bin" / "javac"
        if os.access(javac, os.X_OK):
            compiler = [str(javac)]
        else:
            ecj = self.config.lib_dir / "ecj"
            if not any(ecj.glob("ecj-*.jar")):
                maven_copy_dependencies(
                    self.config, service=self.name, pom_dir=self.pom_dir / "compiler", output=ecj
                )
            (jar,) = ecj.glob("ecj-*.jar")
            compiler = [str(java.binary), "-jar", str(jar)]
        # An explicit list: the Eclipse compiler does not expand "lib/*".
        classpath = ":".join(str(jar) for jar in sorted((self.distribution / "lib").glob("*.jar")))
        sources = sorted(str(path) for path in self.root_endpoint_source.rglob("*.java"))
        run_install_step(
            [
                *compiler,
                "--release",
                "17",
                "-nowarn",
                "-d",
                str(classes),
                "-cp",
                classpath,
                *sources,
            ],
            log_file=self.config.home / "logs" / "elasticsearch-plugin-build.log",
            service=self.name,
            step=f"compile root-endpoint ({Path(compiler[-1]).name})",
            env=self.config.environ,
        )

    def _ensure_user(self) -> None:
        try:
            pwd.getpwnam(RUN_AS)
            return
        except KeyError:
            pass
        options = ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                   "--shell", "/usr/sbin/nologin", RUN_AS]  # fmt: skip
        useradd = shutil.which("useradd", path="/usr/sbin:/usr/bin:/sbin:/bin")
        if useradd is None or os.geteuid() != 0:
            raise ToolMissingError(
                f"the system user {RUN_AS}",
                self.name,
                f"Elasticsearch will not run as root; as root run: useradd {' '.join(options)}",
            )
        run_install_step(
            [useradd, *options],
            log_file=self.config.home / "logs" / "useradd.log",
            service=self.name,
            step=f"useradd {RUN_AS}",
            env=self.config.environ,
        )

    def _check_reachable(self) -> None:
        """Fail early and clearly when ``dbus-es`` could not enter the state directory.

        Everything below the home is created world-traversable; the home's
        ancestors (a private temp dir, /root) may not be.
        """
        runner = pwd.getpwnam(RUN_AS).pw_uid
        home = self.config.home
        for directory in [home, *home.parents]:
            if not directory.exists():
                continue
            info = directory.stat()
            if not info.st_mode & stat.S_IXOTH and info.st_uid != runner:
                raise ServiceError(
                    f"{self.name} runs as user {RUN_AS}, who may not enter {directory}; "
                    f"set DBUS_HOME to a directory every user can traverse, "
                    f"or run: chmod o+x {directory}",
                    service=self.name,
                )

    def _write_config(self) -> None:
        shipped = self.distribution / "config"
        for name in ("jvm.options", "log4j2.properties"):
            shutil.copyfile(shipped / name, self.conf / name)
        (self.conf / "jvm.options.d").mkdir(exist_ok=True)
        settings = {
            "cluster.name": CLUSTER,
            "node.name": f"{CLUSTER}-1",
            "network.host": self.config.host,
            "http.port": self.port,
            "discovery.type": "single-node",
            "path.data": str(self.data),
            "path.logs": str(self.logs),
            "xpack.security.enabled": False,
            "cluster.routing.allocation.disk.threshold_enabled": False,
            "action.destructive_requires_name": False,
        }
        (self.conf / "elasticsearch.yml").write_text(
            "# Written by `dbus services up`; edits are overwritten.\n"
            + "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())
        )

    def _chown_to_runner(self) -> None:
        account = pwd.getpwnam(RUN_AS)
        for top in (self.conf, self.data, self.logs, self.run):
            for directory, dirnames, filenames in os.walk(top):
                for entry in [
                    directory,
                    *(os.path.join(directory, n) for n in dirnames + filenames),
                ]:
                    if os.lstat(entry).st_uid != account.pw_uid:
                        os.lchown(entry, account.pw_uid, account.pw_gid)

    def java_opts(self) -> str:
        """``ES_JAVA_OPTS``: the heap, then the user's options. Elasticsearch splits it
        at white space and honours no quotes."""
        heap = self.config.heaps[self.name]
        return " ".join([f"-Xms{heap}", f"-Xmx{heap}", *self.config.java_options])

    def prepare(self) -> Launch:
        self._make_dirs()
        java = find_java(self.config, self.name)
        self._check_reachable()
        self._write_config()
        self._chown_to_runner()
        return Launch(
            argv=[str(self.distribution / "bin" / "elasticsearch")],
            log_file=self.log_file,
            cwd=self.run,
            env={
                "PATH": "/usr/bin:/bin",
                "HOME": str(self.run),
                "ES_JAVA_HOME": str(java.home),
                "ES_PATH_CONF": str(self.conf),
                "ES_TMPDIR": str(self.run),
                "ES_JAVA_OPTS": self.java_opts(),
            },
            user=RUN_AS,
        )

    def check_health(self) -> str | None:
        try:
            with urllib.request.urlopen(self.url + "/", timeout=5) as response:
                product = response.headers.get("X-elastic-product")
                info = json.load(response)
            with urllib.request.urlopen(
                self.url + "/_cluster/health?wait_for_status=yellow&timeout=2s", timeout=10
            ) as response:
                health = json.load(response)
        except (OSError, ValueError) as exc:
            return f"no answer on {self.url}: {exc}"
        if product != "Elasticsearch" or info.get("version", {}).get("number") != VERSION:
            return f"{self.url} is not Elasticsearch {VERSION}: {info}"
        if health.get("status") not in ("yellow", "green"):
            return f"cluster health is {health.get('status')}"
        return None
