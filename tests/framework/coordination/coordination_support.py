"""Helpers shared by the coordination tests: deployment folders, znode walks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from dbus_fn.coordination import SourceReference, SourceRegistry, ZooKeeperSettings

SESSION = 4.0
"""The session timeout of the test runtimes (the server's minimum is two 2 s ticks)."""


def make_function(folder: Path, name: str = "cfn_demo", *, version: str = "1.0.0") -> Path:
    """A deployment folder: a one-filter module and its dbus.toml."""
    folder.mkdir(parents=True, exist_ok=True)
    module = name.replace("-", "_")
    (folder / f"{module}.py").write_text(
        '"""A test deployment."""\n'
        "import dbus_fn as fn\n\n\n"
        '@fn.filter(tables="shop.orders")\n'
        "def keep(event) -> bool:\n"
        "    return True\n"
    )
    (folder / "dbus.toml").write_text(
        f'name = "{name}"\nversion = "{version}"\nmodule = "{module}.py"\n'
        'tables = ["shop.orders"]\ndefault_route = "kafka://orders"\n'
    )
    (folder / "notes.txt").write_text("not part of the bundle\n")
    return folder


def set_version(folder: Path, version: str) -> None:
    manifest = folder / "dbus.toml"
    lines = [
        f'version = "{version}"' if line.startswith("version") else line
        for line in manifest.read_text().splitlines()
    ]
    manifest.write_text("\n".join(lines) + "\n")


def change_code(folder: Path, marker: str) -> None:
    module = next(folder.glob("*.py"))
    module.write_text(module.read_text() + f"\n# {marker}\n")


def walk(client: KazooClient, path: str = "/") -> Iterator[tuple[str, bytes]]:
    """Every znode under ``path`` with its data."""
    data, _ = client.get(path)
    yield path, data
    for child in client.get_children(path):
        yield from walk(client, f"{path.rstrip('/')}/{child}")


def register_sources(client: KazooClient, settings: ZooKeeperSettings, count: int) -> list[str]:
    registry = SourceRegistry(client, settings)
    names = [f"src-{i:02d}" for i in range(count)]
    for name in names:
        registry.add(SourceReference(name, dsn_env="DBUS_TEST_DSN", tables=("shop.*",)))
    return names


def assignments(client: KazooClient, settings: ZooKeeperSettings) -> dict[str, str]:
    """Each assigned source and the runtime that holds it, as of one listing. An
    assignment removed between the listing and its read (a rebalance under way) is
    not there, as it would be a moment later."""
    layout = settings.layout
    found = {}
    for source in client.get_children(layout.assignments):
        try:
            data, _ = client.get(layout.assignment(source))
        except NoNodeError:
            continue
        found[source] = json.loads(data)["runtime"]
    return found


def expire_session(client: KazooClient, hosts: str) -> None:
    """End ``client``'s session on the server, as an expiry would: a second client
    joins the same session and closes it. ``client`` sees LOST when it next talks."""
    session_id, password = client.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()
