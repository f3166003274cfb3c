"""Installing what the services run: Debian packages, Java, Maven artefacts.

MariaDB and ZooKeeper come from Debian packages (MySQL from the mirror the host's apt
uses, ``debian_mirror``); Kafka and Elasticsearch from Maven Central through the small
poms in ``deploy/services/`` (``~/.m2`` caches them). Missing tools are reported with
the command that installs them.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dbus_deploy.services._config import ServicesConfig
from dbus_deploy.services._errors import InstallError, ToolMissingError
from dbus_deploy.services._process import last_log_line, run_logged
from dbus_fn.errors import ConfigError

_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')
MIN_JAVA = 17
# Pinned, so a bare machine gets the same plugin as a warm one (unpinned, Maven
# would pick whatever its super-POM or the repository metadata says).
_COPY_DEPENDENCIES = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"


@dataclass(frozen=True, slots=True)
class Java:
    """A Java runtime: its ``java`` binary, its home and its major version."""

    binary: Path
    home: Path
    major: int


def find_java(config: ServicesConfig, needed_by: str) -> Java:
    """The Java 17+ to run ``needed_by`` with: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    java_home = config.environ.get("JAVA_HOME", "").strip()
    if java_home:
        binary = Path(java_home) / "bin" / "java"
        if not os.access(binary, os.X_OK):
            raise ToolMissingError(
                "java",
                needed_by,
                f"JAVA_HOME={java_home} has no bin/java; point JAVA_HOME at a Java {MIN_JAVA}+ "
                "installation or unset it",
            )
    else:
        found = shutil.which("java", path=config.environ.get("PATH", os.defpath))
        if found is None:
            raise ToolMissingError(
                "java",
                needed_by,
                f"install Java {MIN_JAVA}+ (apt-get install openjdk-17-jre-headless) "
                "or set JAVA_HOME",
            )
        binary = Path(found)
    result = subprocess.run(
        [str(binary), "-version"], capture_output=True, text=True, timeout=60, check=False
    )
    match = _JAVA_VERSION.search(result.stderr + result.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise ToolMissingError(
            f"Java {MIN_JAVA}+",
            needed_by,
            f"{binary} is Java {major or 'of unknown version'}; install openjdk-17-jre-headless "
            "and set JAVA_HOME to it",
        )
    # JAVA_HOME as given (it may be a JRE beside a JDK); else where java really lives.
    home = Path(java_home) if java_home else binary.resolve().parent.parent
    return Java(binary=binary, home=home, major=major)


def find_mvn(config: ServicesConfig, needed_by: str) -> Path:
    found = shutil.which("mvn", path=config.environ.get("PATH", os.defpath))
    if found is None:
        raise ToolMissingError("mvn", needed_by, "install Maven (apt-get install maven)")
    return Path(found)


def run_install_step(
    argv: Sequence[str],
    *,
    log_file: Path,
    service: str,
    step: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 1800,
) -> None:
    """Run an install step with its output in ``log_file``; fail with its last line."""
    failure = run_logged(argv, log_file=log_file, cwd=cwd, env=env, timeout=timeout)
    if failure is not None:
        raise InstallError(
            service, step, log_file=log_file, last_log_line=last_log_line(log_file) or failure
        )


def apt_install(config: ServicesConfig, packages: Mapping[str, str]) -> None:
    """Install missing Debian packages (``{package: service}``): one update, one install.

    Package scripts must not start the distribution's own daemons (they would take
    our ports), so a ``policy-rc.d`` that denies service starts is in place for the
    duration of the install, the way Debian's own build and image tools do it.
    """
    if not packages:
        return
    service = ", ".join(sorted(set(packages.values())))
    apt = shutil.which("apt-get", path=config.environ.get("PATH", os.defpath))
    if apt is None:
        raise ToolMissingError(
            "apt-get", service, f"install the packages {' '.join(packages)} by hand"
        )
    if os.geteuid() != 0:
        raise ToolMissingError(
            "root", service, f"run as root, or install first: apt-get install {' '.join(packages)}"
        )
    log_file = config.home / "logs" / "apt.log"
    env = {**config.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Two dbus processes installing at once (two `services up`, two test workers)
    # take turns: apt itself would fail the second on its lock, and the first to
    # finish would remove the policy the other still needs.
    with open(APT_TURN, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        _apt_steps(apt, packages, service, log_file, env)


APT_TURN = Path("/run/lock" if Path("/run/lock").is_dir() else "/tmp") / "dbus-apt-install.lock"
"""Held by whichever dbus process is installing Debian packages."""


def _apt_steps(
    apt: str, packages: Mapping[str, str], service: str, log_file: Path, env: dict[str, str]
) -> None:
    policy = Path("/usr/sbin/policy-rc.d")
    placed_policy = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\n# placed by dbus services during apt-get install\nexit 101\n")
        policy.chmod(0o755)
        placed_policy = True
    try:
        run_install_step(
            [apt, "update"], log_file=log_file, service=service, step="apt-get update", env=env
        )
        run_install_step(
            [apt, "install", "-y", "--no-install-recommends", *packages],
            log_file=log_file,
            service=service,
            step=f"apt-get install {' '.join(packages)}",
            env=env,
        )
    finally:
        if placed_policy:
            policy.unlink(missing_ok=True)


def maven_copy_dependencies(
    config: ServicesConfig, *, service: str, pom_dir: Path, output: Path
) -> None:
    """Resolve the dependencies of ``pom_dir/pom.xml`` from Maven Central into ``output``.

    Resolves into a fresh directory and renames it, so an interrupted download never
    looks like a complete one.
    """
    mvn = find_mvn(config, service)
    # Maven itself needs a Java; fail with our message, not Maven's.
    java = find_java(config, service)
    partial = output.with_name(output.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    run_install_step(
        [
            str(mvn),
            "-q",
            "-B",
            "-Dstyle.color=never",
            _COPY_DEPENDENCIES,
            f"-DoutputDirectory={partial}",
        ],
        log_file=config.home / "logs" / f"{service}-maven.log",
        service=service,
        step="mvn dependency:copy-dependencies",
        env={**config.environ, "JAVA_HOME": str(java.home)},
        cwd=pom_dir,
    )
    shutil.rmtree(output, ignore_errors=True)
    partial.rename(output)


def extract_zip(archive: Path, destination: Path) -> None:
    """Unpack ``archive`` keeping the executable bits that ``zipfile`` would drop."""
    partial = destination.with_name(destination.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.infolist():
            target = Path(zipped.extract(member, partial))
            mode = (member.external_attr >> 16) & 0o777
            if mode:
                target.chmod(mode)
    shutil.rmtree(destination, ignore_errors=True)
    partial.rename(destination)


_ONE_LINE = re.compile(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)")


def debian_mirror(suite: str, apt_dir: Path = Path("/etc/apt")) -> str:
    """The mirror the host's apt fetches ``suite`` from (one-line or deb822 sources)."""
    files = [apt_dir / "sources.list"]
    folder = apt_dir / "sources.list.d"
    if folder.is_dir():
        files += sorted(folder.glob("*.list")) + sorted(folder.glob("*.sources"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        found = _deb822_mirror(text, suite) if path.suffix == ".sources" else None
        for line in [] if path.suffix == ".sources" else text.splitlines():
            match = _ONE_LINE.match(line)
            if match and match.group(2) == suite:
                found = match.group(1)
                break
        if found:
            return found.rstrip("/")
    raise ConfigError(
        f"no Debian mirror for {suite} in {apt_dir}/sources.list or sources.list.d; "
        "pass one with --mirror URL",
        setting="--mirror",
    )


def _deb822_mirror(text: str, suite: str) -> str | None:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
            uris = fields.get("uris", "").split()
            if uris:
                return uris[0]
    return None
