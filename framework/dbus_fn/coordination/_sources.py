"""Sources in ZooKeeper: a name, which tables, and where the runtime finds the DSN.

The DSN itself (it holds the password) never enters ZooKeeper. A source names
an environment variable (``dsn_env``) or a file (``dsn_file``) that each runtime
resolves from its own environment, so secrets stay with the machines that need
them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from dbus_fn.bundle import check_no_secrets
from dbus_fn.coordination._client import ZooKeeperSettings, dump, load, utc_timestamp
from dbus_fn.coordination._layout import check_name
from dbus_fn.errors import ConfigError, CoordinationError, SecretLeakError
from dbus_fn.manifest import table_glob_problem

if TYPE_CHECKING:
    from dbus_fn.capture import SourceSpec

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


@dataclass(frozen=True, slots=True)
class SourceReference:
    """A registered source: its name, tables and where its DSN comes from.

    ``keep_helper_tables``: as ``SourceSpec``'s (online schema change tools' tables)."""

    name: str
    dsn_env: str | None = None
    dsn_file: str | None = None
    tables: tuple[str, ...] = ()
    keep_helper_tables: bool = False

    def __post_init__(self) -> None:
        check_name(self.name, "source name")
        if (self.dsn_env is None) == (self.dsn_file is None):
            raise ConfigError(
                f"source {self.name}: expected exactly one of --dsn-env VAR or --dsn-file PATH",
                setting="dsn",
            )
        if self.dsn_env is not None and not _ENV_NAME.match(self.dsn_env):
            # Never echo it: a DSN given here by mistake holds a password.
            raise SecretLeakError(
                f"source {self.name}: --dsn-env expects the NAME of an environment variable "
                "(letters, digits, _), not the DSN itself; e.g. --dsn-env SHOP_DSN",
                where="dsn-env",
            )
        bad = [t for t in self.tables if table_glob_problem(t) is not None]
        if bad:
            raise ConfigError(
                f"source {self.name}: invalid table pattern(s) {bad}: write each as db.table, "
                "globs allowed (shop.*, *.orders, a set of characters closed: shop.order_[ab]*)",
                setting="tables",
            )
        if self.dsn_file is not None:
            check_no_secrets(self.dsn_file, "dsn-file")
            if not Path(self.dsn_file).is_absolute():
                raise ConfigError(
                    f"source {self.name}: --dsn-file expects an absolute path, as each "
                    "runtime resolves it on its own machine",
                    setting="dsn-file",
                )

    def spec(self, env: Mapping[str, str] | None = None) -> SourceSpec:
        """The capture ``SourceSpec``, with the DSN resolved on this machine."""
        from dbus_fn.capture import SourceSpec

        return SourceSpec(
            self.name, self.resolve_dsn(env), self.tables or ("*.*",), self.keep_helper_tables
        )

    @property
    def reference(self) -> str:
        return f"env:{self.dsn_env}" if self.dsn_env else f"file:{self.dsn_file}"

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"tables": list(self.tables)}
        if self.keep_helper_tables:
            data["keep_helper_tables"] = True
        if self.dsn_env:
            data["dsn_env"] = self.dsn_env
        if self.dsn_file:
            data["dsn_file"] = self.dsn_file
        return data

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, object]) -> SourceReference:
        env, file, tables = data.get("dsn_env"), data.get("dsn_file"), data.get("tables", [])
        return cls(
            name=name,
            dsn_env=env if isinstance(env, str) else None,
            dsn_file=file if isinstance(file, str) else None,
            tables=tuple(str(t) for t in tables) if isinstance(tables, list) else (),
            keep_helper_tables=data.get("keep_helper_tables") is True,
        )

    def resolve_dsn(self, env: Mapping[str, str] | None = None) -> str:
        """The DSN, from this machine's environment or file. Errors never show it."""
        environ = os.environ if env is None else env
        if self.dsn_env:
            value = environ.get(self.dsn_env, "").strip()
            if not value:
                raise ConfigError(
                    f"source {self.name}: environment variable {self.dsn_env} is not set in "
                    "this runtime's environment; set it to the source's DSN",
                    setting=self.dsn_env,
                )
            return value
        assert self.dsn_file is not None
        try:
            value = Path(self.dsn_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"source {self.name}: cannot read the DSN file {self.dsn_file} "
                f"({exc.strerror}); put the source's DSN in it on this machine",
                setting="dsn-file",
            ) from None
        if not value:
            raise ConfigError(
                f"source {self.name}: the DSN file {self.dsn_file} is empty", setting="dsn-file"
            )
        return value


class SourceRegistry:
    """The sources of one cluster (the leader assigns them to runtimes)."""

    def __init__(self, client: KazooClient, settings: ZooKeeperSettings) -> None:
        self.client = client
        self.settings = settings
        self.layout = settings.layout

    def add(self, source: SourceReference, *, replace: bool = False) -> bool:
        """Register ``source``; True if new. An existing one is refused unless ``replace``."""
        data = dump({**source.to_json(), "added": utc_timestamp()})
        path = self.layout.source(source.name)
        try:
            self.client.create(path, data, acl=self.settings.acl)
            return True
        except NodeExistsError:
            if not replace:
                raise CoordinationError(
                    f"source {source.name!r} is already registered in {self.settings.where()}; "
                    "give --replace to change it",
                    cluster=self.settings.cluster,
                ) from None
        self.client.set(path, data)
        return False

    def owner(self, name: str) -> str | None:
        """The runtime that reads source ``name`` now (None: none, or it is handed off)."""
        try:
            raw, _ = self.client.get(self.layout.assignment(name))
        except NoNodeError:
            return None
        return str(load(raw).get("runtime") or "") or None

    def remove(self, name: str) -> None:
        check_name(name, "source name")
        try:
            self.client.delete(self.layout.source(name))
        except NoNodeError:
            raise CoordinationError(
                f"no source {name!r} in {self.settings.where()}; see `dbus cluster source list`",
                cluster=self.settings.cluster,
            ) from None

    def names(self) -> list[str]:
        try:
            return sorted(self.client.get_children(self.layout.sources))
        except NoNodeError:
            return []

    def get(self, name: str) -> SourceReference:
        try:
            raw, _ = self.client.get(self.layout.source(name))
        except NoNodeError:
            raise CoordinationError(
                f"no source {name!r} in {self.settings.where()}; see `dbus cluster source list`",
                cluster=self.settings.cluster,
            ) from None
        return SourceReference.from_json(name, load(raw))

    def all(self) -> list[SourceReference]:
        found = []
        for name in self.names():
            try:
                found.append(self.get(name))
            except CoordinationError:
                continue
        return found
