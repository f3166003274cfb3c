"""``dbus services up`` records where the services it started listen: ``<home>/endpoints.json``.

The endpoint values, the file's format and its reading are the SDK's
(``dbus_fn.local_services``), so a runtime finds the local services without this
package; writing the file is the services' own job, here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace

from dbus_deploy.services._config import ServicesConfig
from dbus_fn.local_services import Endpoints, local_endpoints


def write_endpoints(config: ServicesConfig, names: Iterable[str]) -> Endpoints:
    """Record the endpoints of ``names``; other services keep what the file said."""
    current = Endpoints.from_config(config)
    previous = local_endpoints(config)
    fields = [name.replace("-", "_") for name in names]  # mariadb-replica: mariadb_replica
    found = replace(previous, **{name: getattr(current, name) for name in fields})
    config.home.mkdir(parents=True, exist_ok=True)
    partial = config.endpoints_file.with_suffix(".json.partial")
    partial.write_text(json.dumps(found.to_json(), indent=2) + "\n")
    partial.replace(config.endpoints_file)
    return found
