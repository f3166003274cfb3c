"""The deployment manifest, ``dbus.toml``, and the destinations it names.

A manifest says what a deployment is (name, version), which module holds its
functions, which tables it subscribes to, where events go by default and where
dead letters go. It is validated as a whole: every problem is collected and
reported at once, so an author fixes the file in one pass.

Example::

    name = "orders"
    version = "1.0.0"
    module = "orders.py"            # a path relative to this file, or a dotted name
    tables = ["shop.orders"]        # db.table globs
    sources = ["shop"]              # capture sources (empty: every source)
    default_route = "kafka://orders"
    dead_letter_route = "kafka://orders.dead-letter"
    timeout = 1.0                   # seconds each function call may take

    [sinks.kafka]                   # options for the runtime's sinks
    bootstrap_servers = "127.0.0.1:9092"
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from dbus_fn.errors import DestinationError, ManifestError

MANIFEST_FILE = "dbus.toml"

Scheme = Literal["kafka", "es"]
SCHEMES: tuple[Scheme, ...] = ("kafka", "es")

# Kafka's own rule for topic names; Elasticsearch's for index names.
_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_ES_INDEX = re.compile(r'^[^-_+A-Z\\/*?"<>| ,#:.][^A-Z\\/*?"<>| ,#:]{0,254}$')
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# Dot-separated numbers, then optional -pre-release and +build parts (as SemVer).
_VERSION = re.compile(
    r"^\d+(\.\d+)*(-[0-9A-Za-z]+(\.[0-9A-Za-z]+)*)?(\+[0-9A-Za-z]+(\.[0-9A-Za-z]+)*)?$"
)
_TABLE_GLOB = re.compile(r"^[^.\s]+\.[^.\s]+$")

DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a routed event goes: a Kafka topic or an Elasticsearch index."""

    scheme: Scheme
    name: str

    @classmethod
    def parse(cls, text: str | Destination) -> Destination:
        """``"kafka://orders"`` → ``Destination("kafka", "orders")``.

        A ``Destination`` is returned as it is.
        """
        if isinstance(text, Destination):
            return text
        if not isinstance(text, str):
            raise DestinationError(
                f"expected a destination such as kafka://topic or es://index, "
                f"got {type(text).__name__} {text!r}",
                destination=repr(text),
            )
        scheme, separator, name = text.partition("://")
        if not separator or scheme not in SCHEMES:
            raise DestinationError(
                f"expected a destination kafka://topic or es://index, got {text!r}"
                + (f" (unknown scheme {scheme!r})" if separator else ""),
                destination=text,
            )
        rule, what = (
            (_KAFKA_TOPIC, "a Kafka topic name ([A-Za-z0-9._-], at most 249)")
            if scheme == "kafka"
            else (_ES_INDEX, 'an Elasticsearch index name (lowercase, no spaces or \\/*?"<>|,#:)')
        )
        if not rule.match(name) or name in (".", ".."):
            raise DestinationError(
                f"expected {what} after {scheme}://, got {name!r} in {text!r}",
                destination=text,
            )
        return cls(scheme, name)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.name}"


@dataclass(frozen=True, slots=True)
class Manifest:
    """A validated deployment manifest."""

    name: str
    version: str
    module: str
    tables: tuple[str, ...]
    sources: tuple[str, ...] = ()
    default_route: Destination | None = None
    dead_letter_route: Destination = Destination("kafka", "dbus.dead-letter")
    """Where dead letters go; ``kafka://dbus.dead-letter.<name>`` unless the file says."""
    timeout: float | None = DEFAULT_TIMEOUT
    """Seconds each function call may take; ``None`` for no budget."""
    sinks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    initial: str = "snapshot"
    """What a first run sends for rows that exist already: ``"snapshot"`` bootstraps
    the sinks from the tables (see docs/history.md), ``"none"`` sends changes only."""
    root: Path | None = None
    """The folder the manifest was read from; ``module`` paths are relative to it."""

    def subscribes(self, qualified_table: str) -> bool:
        """Whether the deployment wants changes of ``db.table``."""
        return any(fnmatchcase(qualified_table, pattern) for pattern in self.tables)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, root: Path | None = None, origin: str = "manifest"
    ) -> Manifest:
        """Validate ``data`` (a parsed ``dbus.toml``), reporting every problem at once."""
        problems: list[str] = []

        def text(key: str, pattern: re.Pattern[str] | None, expected: str) -> str:
            value = data.get(key)
            if value is None:
                problems.append(f"{key}: missing; expected {expected}")
                return ""
            if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
                problems.append(f"{key}: expected {expected}, got {value!r}")
                return ""
            return value

        def strings(
            key: str, pattern: re.Pattern[str] | None, expected: str, *, required: bool
        ) -> tuple[str, ...]:
            value = data.get(key)
            if value is None:
                if required:
                    problems.append(f"{key}: missing; expected a list of {expected}")
                return ()
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or (required and not items):
                problems.append(f"{key}: expected a non-empty list of {expected}, got {value!r}")
                return ()
            bad = [
                i
                for i in items
                if not isinstance(i, str) or (pattern is not None and not pattern.match(i))
            ]
            if bad:
                problems.append(
                    f"{key}: expected {expected}, got {', '.join(repr(b) for b in bad)}"
                )
                return ()
            return tuple(items)

        def destination(key: str) -> Destination | None:
            value = data.get(key)
            if value is None:
                return None
            try:
                return Destination.parse(value)
            except DestinationError as exc:
                problems.append(f"{key}: {exc}")
                return None

        unknown = sorted(set(data) - _KEYS)
        if unknown:
            problems.append(
                f"unknown key(s) {', '.join(unknown)}; expected only {', '.join(sorted(_KEYS))}"
            )
        name = text("name", _NAME, "a lowercase name ([a-z][a-z0-9_-]*)")
        version = text(
            "version", _VERSION, 'a version such as "1.0.0" or "2.1.0-rc.1" (numbers and dots)'
        )
        module = text("module", None, 'a module path ("orders.py") or dotted name')
        tables = strings("tables", _TABLE_GLOB, '"db.table" globs such as "shop.*"', required=True)
        sources = strings("sources", None, "capture source names", required=False)
        default_route = destination("default_route")
        dead_letter_route = destination("dead_letter_route")
        timeout: float | None = DEFAULT_TIMEOUT
        raw_timeout = data.get("timeout", DEFAULT_TIMEOUT)
        if raw_timeout is False or raw_timeout == 0:
            timeout = None
        elif (
            isinstance(raw_timeout, bool)
            or not isinstance(raw_timeout, int | float)
            or not math.isfinite(raw_timeout)
            or raw_timeout < 0
        ):
            problems.append(
                f"timeout: expected seconds (a positive number, 0 for none), got {raw_timeout!r}"
            )
        else:
            timeout = float(raw_timeout)
        initial = data.get("initial", "snapshot")
        if initial not in INITIAL_CHOICES:
            problems.append(
                f"initial: expected {' or '.join(repr(c) for c in INITIAL_CHOICES)}, "
                f"got {initial!r}"
            )
        sinks: dict[str, Mapping[str, Any]] = {}
        raw_sinks = data.get("sinks", {})
        if not isinstance(raw_sinks, Mapping):
            problems.append(
                f"sinks: expected a table of sink options, got {type(raw_sinks).__name__}"
            )
        else:
            for scheme, options in raw_sinks.items():
                if scheme not in SCHEMES:
                    problems.append(
                        f"sinks.{scheme}: unknown sink; expected one of {', '.join(SCHEMES)}"
                    )
                elif not isinstance(options, Mapping):
                    problems.append(f"sinks.{scheme}: expected a table of options")
                else:
                    sinks[scheme] = MappingProxyType(dict(options))
            for key, route in (
                ("default_route", default_route),
                ("dead_letter_route", dead_letter_route),
            ):
                if sinks and route is not None and route.scheme not in sinks:
                    problems.append(
                        f"{key}: {route} needs a [sinks.{route.scheme}] table; "
                        f"the manifest declares only {', '.join(sorted(sinks))}"
                    )
        if problems:
            raise ManifestError(
                f"{origin} is invalid: " + "; ".join(problems),
                path=origin,
                problems=tuple(problems),
            )
        return cls(
            name=name,
            version=version,
            module=module,
            tables=tables,
            sources=sources,
            default_route=default_route,
            dead_letter_route=dead_letter_route or Destination("kafka", f"dbus.dead-letter.{name}"),
            timeout=timeout,
            sinks=MappingProxyType(sinks),
            initial=str(initial),
            root=root,
        )


_KEYS = frozenset(
    {
        "name",
        "version",
        "module",
        "tables",
        "sources",
        "default_route",
        "dead_letter_route",
        "timeout",
        "sinks",
        "initial",
    }
)
INITIAL_CHOICES: tuple[str, ...] = ("snapshot", "none")


def manifest_path(path: str | Path) -> Path:
    """The ``dbus.toml`` meant by ``path``: the file itself or the one in a folder."""
    candidate = Path(path)
    return candidate / MANIFEST_FILE if candidate.is_dir() else candidate


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a ``dbus.toml`` (or the one in the folder ``path``)."""
    file = manifest_path(path)
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ManifestError(
            f"{file}: no such file; expected a deployment manifest ({MANIFEST_FILE}); "
            "create one with `dbus fn init NAME`",
            path=str(file),
        ) from None
    except IsADirectoryError:
        raise ManifestError(
            f"{file}: is a folder, expected a {MANIFEST_FILE} file", path=str(file)
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{file}: not valid TOML: {exc}", path=str(file)) from None
    return Manifest.from_mapping(data, root=file.parent.resolve(), origin=str(file))
