"""Configuration of `dbus services`: defaults, environment overrides, bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbus_deploy.services import Endpoints, load_config
from dbus_fn.errors import ConfigError


def test_defaults_use_the_usual_ports_and_a_home_for_this_checkout() -> None:
    config = load_config({})
    repo = Path(__file__).resolve().parents[2]
    # <repo>/.dbus, or for a checkout under a private folder one fixed place outside it.
    private = config.home.parent == Path("/var/tmp") and config.home.name.startswith("dbus-")
    assert config.home == repo / ".dbus" or private
    assert load_config({}).home == config.home
    assert dict(config.ports) == {
        "mariadb": 3306,
        "mariadb_replica": 3406,
        "mysql": 3316,
        "mysql_replica": 3416,
        "zookeeper": 2181,
        "kafka": 9092,
        "kafka_controller": 9093,
        "elasticsearch": 9200,
        "prometheus": 9090,
    }
    assert config.heaps["kafka"] == "1g"


def test_environment_overrides_home_and_ports(tmp_path: Path) -> None:
    config = load_config(
        {"DBUS_HOME": str(tmp_path), "DBUS_MARIADB_PORT": "3307", "DBUS_KAFKA_HEAP": "512m"}
    )
    assert config.home == tmp_path
    assert config.ports["mariadb"] == 3307
    assert dict(config.heaps) == {"zookeeper": "256m", "kafka": "512m", "elasticsearch": "1g"}
    assert config.service_dir("mariadb") == tmp_path / "services" / "mariadb"


@pytest.mark.parametrize("value", ["abc", "0", "70000", "-1"])
def test_a_bad_port_names_the_variable_and_the_fix(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"DBUS_KAFKA_PORT": value})
    assert caught.value.setting == "DBUS_KAFKA_PORT"
    assert f"DBUS_KAFKA_PORT={value!r}" in str(caught.value)
    assert "1 to 65535" in str(caught.value)


def test_two_services_on_one_port_are_refused() -> None:
    with pytest.raises(ConfigError, match="DBUS_KAFKA_CONTROLLER_PORT and DBUS_KAFKA_PORT"):
        load_config({"DBUS_KAFKA_CONTROLLER_PORT": "9092"})


def test_a_bad_heap_size_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"DBUS_ELASTICSEARCH_HEAP='lots'.*512m or 1g"):
        load_config({"DBUS_ELASTICSEARCH_HEAP": "lots"})


def test_endpoints_follow_the_configured_ports(tmp_path: Path) -> None:
    config = load_config(
        {
            "DBUS_HOME": str(tmp_path),
            "DBUS_MARIADB_PORT": "3310",
            "DBUS_ZOOKEEPER_PORT": "2182",
            "DBUS_KAFKA_PORT": "9094",
            "DBUS_ELASTICSEARCH_PORT": "9201",
        }
    )
    found = Endpoints.from_config(config)
    assert found.mariadb.dsn == "mysql://dbus:dbus@127.0.0.1:3310"
    assert found.zookeeper.hosts == "127.0.0.1:2182"
    assert found.kafka.bootstrap_servers == "127.0.0.1:9094"
    assert found.elasticsearch.url == "http://127.0.0.1:9201"
    assert Endpoints.from_json(found.to_json()) == found


def test_services_java_options_are_split_as_a_shell_would_and_default_to_none() -> None:
    assert load_config({}).java_options == ()
    config = load_config(
        {"DBUS_SERVICES_JAVA_OPTIONS": " -XX:TieredStopAtLevel=1  '-Dnote=a b' "}
    )
    assert config.java_options == ("-XX:TieredStopAtLevel=1", "-Dnote=a b")


def test_each_jvm_the_services_start_carries_the_options_after_dbus_own(tmp_path: Path) -> None:
    from dbus_deploy.services._elasticsearch import Elasticsearch
    from dbus_deploy.services._install import Java
    from dbus_deploy.services._kafka import Kafka

    options = "-XX:TieredStopAtLevel=1 -Dx=1"
    config = load_config({"DBUS_HOME": str(tmp_path), "DBUS_KAFKA_HEAP": "512m",
                          "DBUS_SERVICES_JAVA_OPTIONS": options})  # fmt: skip
    java = Java(binary=Path("/usr/bin/java"), home=Path("/usr"), major=17)
    argv = Kafka(config)._java_argv(java, "kafka.Kafka", "server.properties", heap="512m")
    at = argv.index("-XX:TieredStopAtLevel=1")
    assert argv[at + 1] == "-Dx=1" and argv.index("-Xmx512m") < at < argv.index("kafka.Kafka")
    assert Elasticsearch(config).java_opts() == "-Xms1g -Xmx1g -XX:TieredStopAtLevel=1 -Dx=1"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("-XX:TieredStopAtLevel=1 '-Dnote=a", "cannot be split into options"),
        ("-Xss4m TieredStopAtLevel=1", "holds 'TieredStopAtLevel=1', which is no JVM option"),
    ],
)
def test_services_java_options_that_are_no_options_are_refused(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"DBUS_SERVICES_JAVA_OPTIONS": value})
    assert caught.value.setting == "DBUS_SERVICES_JAVA_OPTIONS"
    message = str(caught.value)
    assert message.startswith(f"DBUS_SERVICES_JAVA_OPTIONS={value!r}") and problem in message
    assert message.endswith("or unset it") and "\n" not in message
