"""`dbus services` on the command line: the table it prints and its exit codes."""

from __future__ import annotations

from click.testing import CliRunner

from dbus_deploy.cli import services


def test_status_lists_every_service_with_state_pid_and_ports(isolated) -> None:
    config = isolated()
    result = CliRunner().invoke(services, ["status"], env=dict(config.environ))
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split() == ["SERVICE", "STATE", "PID", "PORT"]
    assert [row.split()[:3] for row in rows] == [
        ["mariadb", "stopped", "-"],
        ["mariadb-replica", "stopped", "-"],
        ["mysql", "stopped", "-"],
        ["mysql-replica", "stopped", "-"],
        ["zookeeper", "stopped", "-"],
        ["kafka", "stopped", "-"],
        ["elasticsearch", "stopped", "-"],
        ["prometheus", "stopped", "-"],
    ]
    kafka = rows[5].split()[3]
    assert kafka == f"{config.ports['kafka']},{config.ports['kafka_controller']}"


def test_down_of_nothing_running_says_so(isolated) -> None:
    config = isolated()
    result = CliRunner().invoke(services, ["down", "zookeeper"], env=dict(config.environ))
    assert result.exit_code == 0, result.output
    assert "(not running)" in result.output


def test_an_unknown_name_is_a_usage_error(isolated) -> None:
    config = isolated()
    result = CliRunner().invoke(services, ["status", "redis"], env=dict(config.environ))
    assert result.exit_code == 2
    assert "redis" in result.output


def test_help_names_the_home_a_private_checkout_gets() -> None:
    from dbus_deploy.services._config import _repo_root
    from dbus_fn.home import checkout_home

    result = CliRunner().invoke(services, ["--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    assert "default <repo>/.dbus, or /var/tmp/dbus-<id> for a checkout in a folder" in (
        result.output
    )
    assert f"for this checkout {checkout_home(_repo_root())})" in result.output
