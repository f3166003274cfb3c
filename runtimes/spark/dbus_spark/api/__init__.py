"""The runtime's HTTP face: ``/metrics`` for Prometheus, a JSON API and a dashboard,
served on loopback unless told otherwise (then only with a token). See ``server``;
``cluster`` and ``ui`` serve the same for a whole cluster (``dbus ui``)."""

from __future__ import annotations

from dbus_spark.api.server import (
    ApiServer,
    ApiSettings,
    address_path,
    build_app,
)

__all__ = ["ApiServer", "ApiSettings", "address_path", "build_app"]
