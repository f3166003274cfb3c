"""`up`, `status`, `down`, `restart` on a private state directory and free ports."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import psutil
import pytest

from dbus_deploy.services import down, endpoints, restart, status, stopped, up

pytestmark = pytest.mark.integration


def test_up_is_idempotent_and_down_stops_exactly_what_it_started(isolated) -> None:
    config = isolated()
    (started,) = up(["mariadb"], config=config)
    assert started.action == "started" and started.running and started.pid is not None
    assert started.ports == (config.ports["mariadb"],)

    (again,) = up(["mariadb"], config=config)
    assert again.action == "already running"
    assert again.pid == started.pid

    (seen,) = status(["mariadb"], config=config)
    assert seen.running and seen.pid == started.pid

    recorded = json.loads(config.endpoints_file.read_text())
    assert recorded["mariadb"]["port"] == config.ports["mariadb"]
    assert endpoints(config).mariadb.dsn == f"mysql://dbus:dbus@127.0.0.1:{config.ports['mariadb']}"

    (stopped,) = down(["mariadb"], config=config)
    assert stopped.action == "stopped" and not stopped.running
    assert not psutil.pid_exists(started.pid) or (
        psutil.Process(started.pid).status() == psutil.STATUS_ZOMBIE
    )
    (after,) = down(["mariadb"], config=config)
    assert after.action == "not running"


def test_stopped_names_a_service_that_died_and_its_log(isolated) -> None:
    config = isolated()
    (started,) = up(["mariadb"], config=config)
    assert stopped(["mariadb"], config=config) == []

    victim = psutil.Process(started.pid)
    victim.kill()
    victim.wait(timeout=30)
    (line,) = stopped(["mariadb"], config=config)
    assert line.startswith("mariadb is not running: ")
    assert line.endswith(f"(log: {started.log_file})")


def test_restart_gives_a_new_process_with_the_same_data(isolated) -> None:
    import pymysql

    config = isolated()
    (first,) = up(["mariadb"], config=config)
    mariadb = endpoints(config).mariadb

    def connect() -> pymysql.Connection:
        return pymysql.connect(
            host=mariadb.host,
            port=mariadb.port,
            user=mariadb.user,
            password=mariadb.password,
            autocommit=True,
        )

    with connect() as connection, connection.cursor() as cursor:
        cursor.execute("CREATE DATABASE kept")
    (second,) = restart(["mariadb"], config=config)
    assert second.running and second.pid != first.pid
    with connect() as connection, connection.cursor() as cursor:
        cursor.execute("SHOW DATABASES LIKE 'kept'")
        assert cursor.fetchone() == ("kept",)


def test_a_pid_file_naming_someone_elses_process_is_ignored(isolated) -> None:
    config = isolated()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pid_file = config.service_dir("zookeeper") / "zookeeper.pid"
        pid_file.parent.mkdir(parents=True)
        pid_file.write_text(f"{bystander.pid}\n")
        (seen,) = status(["zookeeper"], config=config)
        assert not seen.running
        (stopped,) = down(["zookeeper"], config=config)
        assert stopped.action == "not running"
        assert bystander.poll() is None, "down must not signal a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_zookeeper_up_and_down(isolated) -> None:
    config = isolated()
    (started,) = up(["zookeeper"], config=config)
    assert started.running
    children = psutil.Process(started.pid)
    assert str(config.service_dir("zookeeper")) in " ".join(children.cmdline())
    down(["zookeeper"], config=config)
    assert not status(["zookeeper"], config=config)[0].running


def test_terminating_up_midway_stops_what_it_started(isolated, dbus_command) -> None:
    config = isolated()
    command = subprocess.Popen(
        [str(dbus_command), "services", "up", "mariadb", "kafka"],
        env=dict(config.environ),
        stderr=subprocess.PIPE,
        text=True,
    )
    assert command.stderr is not None
    for line in command.stderr:
        if line.startswith("kafka: starting"):
            break
    command.send_signal(signal.SIGTERM)
    command.communicate(timeout=120)
    assert command.returncode == 128 + signal.SIGTERM
    assert not any(entry.running for entry in status(config=config))


def test_two_concurrent_ups_start_one_server(isolated, dbus_command) -> None:
    config = isolated()
    commands = [
        subprocess.Popen(
            [str(dbus_command), "services", "up", "mariadb"],
            env=dict(config.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [command.communicate(timeout=120)[0] for command in commands]
    assert [command.returncode for command in commands] == [0, 0]
    actions = sorted(
        "already running" if "already running" in out else "started" for out in outputs
    )
    assert actions == ["already running", "started"]
    servers = [
        process
        for process in psutil.process_iter(["name", "cmdline"])
        if process.info["name"] == "mariadbd"
        and str(config.service_dir("mariadb")) in " ".join(process.info["cmdline"] or [])
    ]
    assert len(servers) == 1
