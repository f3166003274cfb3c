"""The runtime's HTTP face: ``/metrics`` for Prometheus, a JSON API and a dashboard,
served on loopback unless told otherwise (then only with a token). See ``server``;
``cluster`` and ``ui`` serve the same for a whole cluster (``dbus ui``).

The server's names are loaded when first asked for: a command that only checks a
token (``token``) or asks a runtime (``client``) does not load the web framework.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiServer", "ApiSettings", "address_path", "build_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from dbus_spark.interfaces.api import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
