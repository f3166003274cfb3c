"""The local sources file: named sources for the ``dbus source`` commands.

It lives at ``$DBUS_SOURCES_FILE``, else ``$DBUS_HOME/sources.json``, else
``~/.config/dbus/sources.json``; it holds DSNs with passwords, so it is written
with mode 0600. (Coordination moves sources to ZooKeeper later; this file is the
single-machine store.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dbus_fn.capture._dsn import SourceSpec
from dbus_fn.errors import ConfigError
from dbus_fn.files import replace_file
from dbus_fn.home import HOME_ENV, home_from_environment

FILE_ENV = "DBUS_SOURCES_FILE"


def sources_file() -> Path:
    """Where the sources file is, by the precedence documented above; ``ConfigError``
    when that is a folder, naming the variable that chose it."""
    explicit = os.environ.get(FILE_ENV)
    home = home_from_environment()
    if explicit:
        path, chosen_by = Path(explicit).expanduser(), f"{FILE_ENV}={explicit}"
    elif home is not None:
        path, chosen_by = home / "sources.json", f"{HOME_ENV}={home}"
    else:
        path, chosen_by = Path.home() / ".config" / "dbus" / "sources.json", "the default"
    if path.is_dir():
        raise ConfigError(
            f"the sources file {path} (from {chosen_by}) is a folder; point {FILE_ENV} "
            f"at a file, e.g. {FILE_ENV}={path / 'sources.json'}",
            setting=FILE_ENV,
        )
    return path


class SourceStore:
    """Named ``SourceSpec``s kept in one JSON file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or sources_file()

    def _load(self) -> dict[str, dict[str, Any]]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            sources = data["sources"]
            if not isinstance(sources, dict):
                raise TypeError
            return sources
        except OSError as exc:
            raise ConfigError(
                f"cannot read the sources file {self.path}: {exc.strerror}; fix its "
                f"permissions (or point {FILE_ENV} at another file)",
                setting=FILE_ENV,
            ) from None
        except (ValueError, KeyError, TypeError):
            raise ConfigError(
                f"the sources file {self.path} is not valid; fix or remove it "
                f"(or point {FILE_ENV} at another file)",
                setting=FILE_ENV,
            ) from None

    def _save(self, sources: dict[str, dict[str, Any]]) -> None:
        text = json.dumps({"sources": sources}, indent=2, sort_keys=True) + "\n"
        replace_file(self.path, text, mode=0o600, parents=True)

    def add(self, spec: SourceSpec, *, replace: bool = False) -> None:
        sources = self._load()
        if spec.name in sources and not replace:
            raise ConfigError(
                f"source {spec.name!r} already exists in {self.path}; "
                "use --replace to overwrite it",
                setting="name",
            )
        sources[spec.name] = {"dsn": spec.dsn, "tables": list(spec.tables)}
        if spec.keep_helper_tables:
            sources[spec.name]["keep_helper_tables"] = True
        self._save(sources)

    def remove(self, name: str) -> None:
        sources = self._load()
        if name not in sources:
            raise self._unknown(name, sources)
        del sources[name]
        self._save(sources)

    def get(self, name: str) -> SourceSpec:
        sources = self._load()
        if name not in sources:
            raise self._unknown(name, sources)
        entry = sources[name]
        return SourceSpec(
            name,
            entry["dsn"],
            tuple(entry.get("tables") or ("*.*",)),
            keep_helper_tables=entry.get("keep_helper_tables") is True,
        )

    def list(self) -> list[SourceSpec]:
        return [self.get(name) for name in sorted(self._load())]

    def _unknown(self, name: str, sources: dict[str, Any]) -> ConfigError:
        known = ", ".join(sorted(sources)) or "none"
        return ConfigError(
            f"no source named {name!r} in {self.path} (known: {known}); "
            "add it with: dbus source add NAME DSN",
            setting="source",
        )
