"""Helpers shared by the end-to-end tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from dbus_spark.config import RuntimeConfig
from dbus_spark.settings import runtime_config


class Scratch(NamedTuple):
    """What a runtime test writes through: the services, and its own database, topic,
    index, function folders and temporary folder."""

    services: Any
    fresh_database: Any
    kafka_topic: str
    es_index: str
    tmp_path: Path
    function_folder: Any

    def runtime_config(self, folder: Path) -> RuntimeConfig:
        """A runtime over the local services, the deployment in ``folder``, starting now."""
        return runtime_config(
            sources=(f"src={self.services.mariadb.dsn}",),
            deployments=(str(folder),),
            kafka=self.services.kafka.bootstrap_servers,
            elasticsearch=self.services.elasticsearch.url,
            checkpoint=str(self.tmp_path / "checkpoint"),
            start="latest",
        )
