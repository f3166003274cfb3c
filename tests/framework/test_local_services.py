"""Where the local services listen: what `dbus services up` recorded under the home,
else the ports the environment names; a malformed port is named, never ignored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dbus_fn.errors import ConfigError
from dbus_fn.local_services import Endpoints, endpoints_file, local_endpoints, service_ports


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DBUS_HOME", str(tmp_path))
    for name in ("DBUS_MARIADB_PORT", "DBUS_KAFKA_PORT", "DBUS_ELASTICSEARCH_PORT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_without_a_record_the_endpoints_are_the_configured_ports(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DBUS_KAFKA_PORT", "9095")
    found = local_endpoints()
    assert found.mariadb.dsn == "mysql://dbus:dbus@127.0.0.1:3306"
    assert found.kafka.bootstrap_servers == "127.0.0.1:9095"
    assert found.elasticsearch.url == "http://127.0.0.1:9200"
    assert found.prometheus.targets_dir == str(
        home / "services" / "prometheus" / "config" / "targets"
    )


def test_what_up_recorded_wins_over_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = local_endpoints().to_json()
    recorded["kafka"] = {"bootstrap_servers": "127.0.0.1:19092"}
    del recorded["prometheus"]  # a file from before Prometheus was a service
    endpoints_file(home).write_text(json.dumps(recorded))
    monkeypatch.setenv("DBUS_KAFKA_PORT", "9095")
    found = local_endpoints()
    assert found.kafka.bootstrap_servers == "127.0.0.1:19092"
    assert found.prometheus.url == "http://127.0.0.1:9090"  # where it would listen now
    assert Endpoints.from_json(found.to_json()) == found


def test_a_malformed_port_is_named_even_with_a_record(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints_file(home).write_text(json.dumps(local_endpoints().to_json()))
    monkeypatch.setenv("DBUS_MARIADB_PORT", "banana")
    with pytest.raises(ConfigError) as caught:
        local_endpoints()
    assert caught.value.setting == "DBUS_MARIADB_PORT"
    assert "DBUS_MARIADB_PORT='banana' is not a TCP port" in str(caught.value)
    with pytest.raises(ConfigError, match="DBUS_KAFKA_CONTROLLER_PORT and DBUS_KAFKA_PORT"):
        service_ports({"DBUS_KAFKA_CONTROLLER_PORT": "9092"})
