"""The interfaces layer: what users and other programs call.

``cli`` is `dbus runtime`; ``settings`` builds a runtime's configuration from flags,
environment and defaults; ``api`` is the HTTP API and dashboard of a runtime and of a
cluster; ``history``, ``pace`` and ``preview`` are the `dbus fn` commands that ask a
running runtime. The top layer: nothing of the runtime imports it.
"""
