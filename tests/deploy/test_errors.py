"""Every way `dbus services up` can fail says what, where and how to fix it,
and leaves nothing running that the failed call started."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dbus_deploy.services import (
    InstallError,
    PortInUseError,
    ServiceStartError,
    ToolMissingError,
    status,
    up,
)
from dbus_deploy.services._install import APT_TURN, apt_install, maven_copy_dependencies
from dbus_fn.errors import ServiceError

pytestmark = pytest.mark.integration


@pytest.fixture
def occupied_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_port_in_use_names_service_port_and_variable(isolated, occupied_port) -> None:
    config = isolated(DBUS_ZOOKEEPER_PORT=str(occupied_port))
    with pytest.raises(PortInUseError) as caught:
        up(["mariadb", "zookeeper"], config=config)
    error = caught.value
    assert (error.service, error.port, error.env_var) == (
        "zookeeper",
        occupied_port,
        "DBUS_ZOOKEEPER_PORT",
    )
    assert f"port {occupied_port}" in str(error)
    # Ports are checked before anything starts.
    assert not any(entry.running for entry in status(config=config))


def test_cli_prints_one_line_and_exits_non_zero(isolated, occupied_port, dbus_command) -> None:
    config = isolated(DBUS_MARIADB_PORT=str(occupied_port))
    result = subprocess.run(
        [str(dbus_command), "services", "up", "mariadb"],
        env=dict(config.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: mariadb cannot start: port")
    assert "DBUS_MARIADB_PORT" in lines[0]


def test_cli_refuses_an_unknown_service_name(dbus_command) -> None:
    result = subprocess.run(
        [str(dbus_command), "services", "up", "postgres"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "postgres" in result.stderr and "Traceback" not in result.stderr


def test_cli_help_names_the_port_variables(dbus_command) -> None:
    result = subprocess.run(
        [str(dbus_command), "services", "up", "--help"], capture_output=True, text=True, check=True
    )
    for var in (
        "DBUS_HOME",
        "DBUS_MARIADB_PORT",
        "DBUS_KAFKA_CONTROLLER_PORT",
        "DBUS_ELASTICSEARCH_PORT",
        "DBUS_ZOOKEEPER_PORT",
        "DBUS_KAFKA_PORT",
    ):
        assert var in result.stdout


def test_a_service_that_dies_points_at_its_log_and_everything_started_is_stopped(
    isolated,
) -> None:
    # A heap the machine cannot reserve: the JVM exits at once, MariaDB starts fine.
    config = isolated(DBUS_ZOOKEEPER_HEAP="100000g")
    with pytest.raises(ServiceStartError) as caught:
        up(["mariadb", "zookeeper"], config=config)
    error = caught.value
    assert error.service == "zookeeper"
    assert error.log_file == config.service_dir("zookeeper") / "logs" / "zookeeper.log"
    assert "Could not reserve enough space" in (error.last_log_line or "")
    assert str(error.log_file) in str(error)
    assert not any(entry.running for entry in status(config=config))


def test_a_jvm_option_the_jvm_refuses_fails_the_service_quoting_the_jvm(isolated) -> None:
    config = isolated(DBUS_SERVICES_JAVA_OPTIONS="-XX:+DbusNoSuchOption")
    with pytest.raises(ServiceStartError) as caught:
        up(["zookeeper"], config=config)
    assert caught.value.service == "zookeeper"
    assert "DbusNoSuchOption" in (caught.value.last_log_line or "")
    assert not any(entry.running for entry in status(config=config))


def test_a_broken_datadir_fails_with_mariadbs_own_complaint(isolated) -> None:
    config = isolated()
    # System tables "present" but empty: the server cannot open its privilege tables.
    (config.service_dir("mariadb") / "data" / "mysql").mkdir(parents=True)
    with pytest.raises(ServiceStartError) as caught:
        up(["mariadb"], config=config)
    error = caught.value
    assert error.log_file.name == "mariadb.err"
    assert "ERROR" in (error.last_log_line or "")
    assert not status(["mariadb"], config=config)[0].running


def test_java_home_without_java_is_reported(isolated, tmp_path: Path) -> None:
    config = isolated(JAVA_HOME=str(tmp_path / "no-jdk"))
    with pytest.raises(ToolMissingError, match=r"JAVA_HOME=.*no-jdk has no bin/java"):
        up(["zookeeper"], config=config)
    assert not status(config=config)[0].running


def test_no_java_on_path_is_reported(isolated, tmp_path: Path) -> None:
    config = isolated(PATH=str(tmp_path), JAVA_HOME="")
    with pytest.raises(ToolMissingError, match=r"java is needed by zookeeper.*openjdk-17"):
        up(["zookeeper"], config=config)


def test_no_maven_is_reported(isolated, tmp_path: Path) -> None:
    java_home = Path(os.path.realpath("/usr/bin/java")).parents[1]
    config = isolated(PATH=str(tmp_path), JAVA_HOME=str(java_home))
    with pytest.raises(ToolMissingError, match=r"mvn is needed by kafka.*apt-get install maven"):
        up(["kafka"], config=config)


def test_a_maven_failure_names_the_step_and_its_log(isolated, tmp_path: Path) -> None:
    config = isolated()
    pom = tmp_path / "pom"
    pom.mkdir()
    (pom / "pom.xml").write_text(
        """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dbus.test</groupId><artifactId>missing</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies><dependency>
    <groupId>dbus.test.nowhere</groupId><artifactId>absent</artifactId><version>0.0.1</version>
  </dependency></dependencies>
</project>
"""
    )
    with pytest.raises(InstallError) as caught:
        maven_copy_dependencies(config, service="kafka", pom_dir=pom, output=tmp_path / "out")
    error = caught.value
    assert error.step == "mvn dependency:copy-dependencies"
    assert error.log_file.is_file()
    assert "absent" in str(error)
    assert not (tmp_path / "out").exists()


def test_a_home_elasticsearch_cannot_enter_is_refused_before_any_download(
    isolated, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    config = isolated(DBUS_HOME=str(private / "home"))
    with pytest.raises(ServiceError, match=r"dbus-es, who may not enter .*private; set DBUS_HOME"):
        up(["elasticsearch"], config=config)
    assert not (config.lib_dir / "elasticsearch-8.19.7").exists()


@contextlib.contextmanager
def no_install_under_way() -> Iterator[None]:
    """Holds the turn every dbus install takes (``APT_TURN``): while it is held, no
    dbus process is installing, so ``policy-rc.d`` is as the machine keeps it."""
    with open(APT_TURN, "a") as turn:
        fcntl.flock(turn, fcntl.LOCK_EX)
        yield


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get needs root")
def test_an_apt_failure_names_the_step_and_its_log(isolated, tmp_path: Path) -> None:
    # apt's lists live in a folder of the test's own (APT_CONFIG), whose lock the test
    # holds as a concurrent apt run would hold it: apt-get update must fail. The
    # machine's own lock stays free, so an install meanwhile (the browser tests'
    # chromium) neither fails on it nor makes this test fail; it only takes its turn.
    apt_state = tmp_path / "apt"
    (apt_state / "lists" / "partial").mkdir(parents=True)
    apt_config = apt_state / "apt.conf"
    apt_config.write_text(
        f'Dir::State::Lists "{apt_state / "lists"}";\nDir::Cache "{apt_state / "cache"}";\n'
    )
    config = isolated(APT_CONFIG=str(apt_config))
    policy = Path("/usr/sbin/policy-rc.d")
    with no_install_under_way():
        had_policy = policy.exists()
    with open(apt_state / "lists" / "lock", "w") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InstallError) as caught:
            apt_install(config, {"mariadb-server": "mariadb"})
    error = caught.value
    assert error.step == "apt-get update"
    assert "lock" in (error.last_log_line or "")
    with no_install_under_way():
        assert policy.exists() == had_policy, "the temporary policy-rc.d is removed again"


@pytest.mark.skipif(os.geteuid() != 0, reason="apt-get needs root")
def test_two_installs_at_once_take_turns(isolated, tmp_path: Path) -> None:
    # apt-get itself would fail the second of two concurrent runs on its lock; an
    # apt-get that notes when each run starts and ends shows whether they overlap.
    import threading

    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "start $1" >> {runs}\nsleep 0.3\necho "end $1" >> {runs}\n')
    apt.chmod(0o755)
    config = isolated(PATH=f"{bin_dir}:{os.environ['PATH']}")
    installs = [
        threading.Thread(target=apt_install, args=(config, {package: "browser"}))
        for package in ("chromium", "percona-toolkit")
    ]
    for install in installs:
        install.start()
    for install in installs:
        install.join()
    steps = runs.read_text().split()[::2]
    assert steps == ["start", "end"] * 4, runs.read_text()
