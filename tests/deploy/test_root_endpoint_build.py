"""The root-endpoint plugin builds with javac, and with the Eclipse compiler when
the Java is a runtime without javac."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from dbus_deploy.services import load_config
from dbus_deploy.services._elasticsearch import Elasticsearch
from dbus_deploy.services._install import find_java

pytestmark = pytest.mark.integration


@pytest.fixture
def private_distribution(isolated, elasticsearch_service) -> Elasticsearch:
    """An Elasticsearch service whose distribution borrows the shared install's jars."""
    shared = Elasticsearch(load_config()).distribution
    config = isolated()
    service = Elasticsearch(config)
    service.distribution.mkdir(parents=True)
    (service.distribution / "lib").symlink_to(shared / "lib")
    return service


def _built_classes(service: Elasticsearch) -> set[str]:
    jar = service.distribution / "plugins" / "dbus-root-endpoint" / "dbus-root-endpoint.jar"
    with zipfile.ZipFile(jar) as plugin:
        return set(plugin.namelist())


def test_builds_with_javac(private_distribution: Elasticsearch) -> None:
    java = find_java(private_distribution.config, "elasticsearch")
    assert (java.home / "bin" / "javac").exists()
    private_distribution._install_root_endpoint(java)
    assert "dbus/es/RootEndpointPlugin.class" in _built_classes(private_distribution)
    descriptor = private_distribution.distribution / "plugins" / "dbus-root-endpoint"
    assert (descriptor / "plugin-descriptor.properties").is_file()


def test_builds_with_the_eclipse_compiler_on_a_runtime_without_javac(
    private_distribution: Elasticsearch, isolated, tmp_path: Path
) -> None:
    runtime = tmp_path / "jre"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "bin" / "java").symlink_to(os.path.realpath("/usr/bin/java"))
    service = Elasticsearch(
        isolated(DBUS_HOME=str(private_distribution.config.home), JAVA_HOME=str(runtime))
    )
    java = find_java(service.config, "elasticsearch")
    assert not (java.home / "bin" / "javac").exists()
    service._install_root_endpoint(java)
    assert "dbus/es/RootEndpointPlugin.class" in _built_classes(service)
    assert any((service.config.lib_dir / "ecj").glob("ecj-*.jar"))
