"""The runtime's HTTP face: ``/metrics`` for Prometheus and a JSON API, served on
loopback unless told otherwise (then only with a token). See ``server``."""

from __future__ import annotations

from dbus_spark.api.server import (
    ApiServer,
    ApiSettings,
    address_path,
    build_app,
)

__all__ = ["ApiServer", "ApiSettings", "address_path", "build_app"]
