"""The deployment manifest, ``dbus.toml``, and the destinations it names.

A manifest says what a deployment is (name, version), which module holds its
functions, which tables it subscribes to, where events go by default and where
dead letters go. It is validated as a whole: every problem is collected and
reported at once, so an author fixes the file in one pass.

Example::

    name = "orders"
    version = "1.0.0"
    module = "orders.py"            # a path relative to this file (a .py file or a package folder)
    tables = ["shop.orders"]        # db.table globs
    sources = ["shop"]              # capture sources (empty: every source)
    default_route = "kafka://orders"
    dead_letter_route = "kafka://orders.dead-letter"
    timeout = 1.0                   # seconds each function call may take (0: no budget)
    initial = "snapshot"            # a first run bootstraps the sinks from the tables
    delivery = "at-least-once"      # or "exactly-once" to Kafka (read_committed consumers)

    [sinks.kafka]                   # this deployment's own Kafka cluster
    bootstrap_servers = "kafka.orders:9092"
    security_protocol = "SASL_SSL"  # any producer setting, "_" read as "."
    sasl_username = "orders"
    sasl_password_env = "ORDERS_KAFKA_PASSWORD"   # KEY_env: the runtime's variable
                                                  # (or KEY_file: a file on its hosts)
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from dbus_fn._text import not_utf8, read_utf8
from dbus_fn.errors import DestinationError, ManifestError

MANIFEST_FILE = "dbus.toml"

Scheme = Literal["kafka", "es"]
SCHEMES: tuple[Scheme, ...] = ("kafka", "es")

# Kafka's own rule for topic names; Elasticsearch's for index names.
_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_ES_INDEX = re.compile(r'^[^-_+A-Z\\/*?"<>| ,#:.][^A-Z\\/*?"<>| ,#:]{0,254}$')
NAME_MAX = 63
"""The longest deployment name: it names znodes, topics and metric labels."""
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
# Dot-separated numbers, then optional -pre-release and +build parts (as SemVer).
_VERSION = re.compile(
    r"^\d+(\.\d+)*(-[0-9A-Za-z]+(\.[0-9A-Za-z]+)*)?(\+[0-9A-Za-z]+(\.[0-9A-Za-z]+)*)?$"
)
_TABLE_GLOB = re.compile(r"^[^.\s]+\.[^.\s]+$")
TABLE_GLOBS = '"db.table" globs such as "shop.orders" or "shop.*"'
# host:port, then more of them after commas; a host is a name, IPv4 or [IPv6].
_HOST_PORT = r"(?:[\w.-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}"
_HOST_PORTS = re.compile(rf"^{_HOST_PORT}(?:,\s*{_HOST_PORT})*$")
_HTTP_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")

DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 3600.0
"""The longest time budget: a call that may run longer is better run with none (0)."""


def name_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a deployment name (None: nothing)."""
    if len(value) > NAME_MAX:
        return f"a name of at most {NAME_MAX} characters, got one of {len(value)}"
    if not _NAME.match(value):
        rule = f"[a-z][a-z0-9_-]*, at most {NAME_MAX} characters"
        return f"a lowercase name ({rule}), got {value!r}"
    return None


def table_glob_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a ``db.table`` glob (None: nothing).

    An unclosed ``[`` is refused: fnmatch would read it as a literal character,
    so the glob would silently match no real table.
    """
    if not isinstance(value, str) or not _TABLE_GLOB.match(value):
        return f"expected {TABLE_GLOBS}, got {value!r}"
    if re.search(r"\[(?![^\]]*\])", value.replace("[[]", "")):
        return (
            f"{value!r} has an unclosed '[' (a set of characters is written [abc], "
            "a literal [ as [[])"
        )
    return None


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""An environment variable's name, as a ``KEY_env`` sink option holds it."""
ES_OPTIONS = (
    "hosts", "url", "username", "password_env", "password_file", "api_key_env",
    "api_key_file", "verify_certs", "ca_certs", "request_timeout",
)  # fmt: skip
"""The ``[sinks.es]`` options: where the cluster is, and how the client reaches it."""
# Settings dbus's Kafka delivery depends on (per-key order, at-least-once, fencing).
_KAFKA_FIXED = ("acks", "enable.idempotence", "transactional.id")


def _not_a_producer_setting(key: str) -> str | None:
    """The Kafka producer setting a ``[sinks.kafka]`` key names (``linger_ms`` and
    ``sasl.password_env`` name ``linger.ms`` and ``sasl.password``), when the Kafka
    client does not know it; None when it does, or when the client is not installed
    here (the runtime, which has it, asks again when it loads the manifest)."""
    setting = key.removesuffix("_env").removesuffix("_file").replace("_", ".")
    return None if _producer_knows(setting) else setting


@functools.cache
def _producer_knows(setting: str) -> bool:
    """Whether the Kafka client takes ``setting`` (True when it is not installed here);
    asked once per name and process, as every load of a manifest would ask again."""
    try:
        from confluent_kafka import KafkaException, Producer
    except ImportError:
        return True
    try:
        # The client checks names as it is made; it connects to nothing without
        # bootstrap.servers, and a value it refuses is not what is asked here.
        Producer({setting: "1", "logger": _QUIET})
    except KafkaException as exc:
        return "No such configuration property" not in str(exc)
    return True


_QUIET = logging.getLogger("dbus_fn.manifest.kafka_check")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _sink_option_problem(scheme: str, key: str, value: object) -> str | None:
    """What is wrong with one ``[sinks.*]`` option (None: nothing)."""
    where = f"sinks.{scheme}.{key}"
    if scheme == "kafka" and (unknown := _not_a_producer_setting(key)) is not None:
        return (
            f"{where}: {unknown!r} is no Kafka producer setting (the client's settings are "
            "librdkafka's, see its CONFIGURATION.md); fix the name or remove the option"
        )
    if key.endswith("_env"):
        if not isinstance(value, str) or not ENV_NAME.match(value):
            return (
                f'{where}: expected the name of an environment variable of the runtime '
                f'such as "ORDERS_KAFKA_PASSWORD", got {_shown(value)}'
            )
        if scheme == "es" and key not in ES_OPTIONS:
            return f"{where}: unknown option; expected one of {', '.join(ES_OPTIONS)}"
        return None
    if key.endswith("_file"):
        if not isinstance(value, str) or not value.startswith("/"):
            return (
                f'{where}: expected the absolute path of a file on the runtime\'s hosts '
                f'such as "/run/secrets/orders-kafka-password", got {_shown(value)}'
            )
        if scheme == "es" and key not in ES_OPTIONS:
            return f"{where}: unknown option; expected one of {', '.join(ES_OPTIONS)}"
        return None
    if scheme == "es" and key not in ES_OPTIONS:
        return f"{where}: unknown option; expected one of {', '.join(ES_OPTIONS)}"
    if key in ("bootstrap_servers", "bootstrap.servers"):
        if not isinstance(value, str) or not _HOST_PORTS.match(value):
            return (
                f'{where}: expected a string of host:port pairs such as "127.0.0.1:9092" or '
                f'"k1:9092,k2:9092", got {_shown(value)}'
            )
        return None
    if key in ("hosts", "url"):
        urls = value if isinstance(value, list) else [value]
        if not urls or not all(isinstance(u, str) and _HTTP_URL.match(u) for u in urls):
            return (
                f'{where}: expected an http(s) URL such as "http://127.0.0.1:9200" or a list '
                f"of them, got {_shown(value)}"
            )
        return None
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(i, str | int | float | bool) for i in items):
        return (
            f"{where}: expected a string, number or boolean (or a list of them), "
            f"got {_shown(value)}"
        )
    if scheme == "kafka" and key.replace("_", ".") in _KAFKA_FIXED:
        return (
            f"{where}: dbus sets {key.replace('_', '.')} itself (its delivery keeps each "
            "key's order and loses nothing only with it); remove the option"
        )
    return None


def _shown(value: object) -> str:
    """A sink option's value for an error: a number as it is, anything else by its type
    only (an option may hold a secret)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value!r}"
    return f"a {type(value).__name__}"


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
    delivery: str = "at-least-once"
    """What its Kafka consumers get from a standalone runtime: ``"exactly-once"`` (its
    writes in Kafka transactions, for ``read_committed`` consumers) or
    ``"at-least-once"``; in a cluster, always exactly once (docs/runtime.md)."""
    root: Path | None = None
    """The folder the manifest was read from; ``module`` paths are relative to it."""

    def subscribes(self, qualified_table: str) -> bool:
        """Whether the deployment wants changes of ``db.table``."""
        return any(fnmatchcase(qualified_table, pattern) for pattern in self.tables)

    def captures(self, source: str) -> bool:
        """Whether the deployment reads the capture source named ``source``: every
        source when ``sources`` names none."""
        return not self.sources or source in self.sources

    def deployed_as(self, name: str) -> Manifest:
        """This manifest as the deployment named ``name`` runs it: a folder deployed
        under a name of its own (``dbus fn deploy --name``) is that name everywhere,
        its dead letters' default topic included, so two deployments of one folder
        never merge."""
        if name == self.name:
            return self
        dead_letters = self.dead_letter_route
        if dead_letters == Destination("kafka", f"dbus.dead-letter.{self.name}"):
            dead_letters = Destination("kafka", f"dbus.dead-letter.{name}")
        return replace(self, name=name, dead_letter_route=dead_letters)

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
            key: str, check: Callable[[object], str | None], expected: str, *, required: bool
        ) -> tuple[str, ...]:
            value = data.get(key)
            if value is None:
                if required:
                    problems.append(f"{key}: missing; expected a list of {expected}")
                return ()
            if isinstance(value, str):
                problems.append(
                    f"{key}: expected a list of {expected}, got the string {value!r}; "
                    f"write {key} = [{json.dumps(value)}]"
                )
                return ()
            if not isinstance(value, list) or (required and not value):
                problems.append(f"{key}: expected a non-empty list of {expected}, got {value!r}")
                return ()
            bad = [problem for problem in map(check, value) if problem is not None]
            problems.extend(f"{key}: {problem}" for problem in bad)
            return () if bad else tuple(value)

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
        name = text("name", None, "a lowercase name ([a-z][a-z0-9_-]*)")
        if name and (problem := name_problem(name)) is not None:
            problems.append(f"name: expected {problem}")
            name = ""
        version = text(
            "version", _VERSION, 'a version such as "1.0.0" or "2.1.0-rc.1" (numbers and dots)'
        )
        module = text("module", None, 'a module path ("orders.py" or a package folder "./orders")')
        tables = strings("tables", table_glob_problem, TABLE_GLOBS, required=True)
        sources = strings("sources", _source_name_problem, "capture source names", required=False)
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
            or not 0 < raw_timeout <= MAX_TIMEOUT
        ):
            problems.append(
                f"timeout: expected seconds (a positive number up to {MAX_TIMEOUT:g}, 0 for "
                f"none), got {raw_timeout!r}"
            )
        else:
            timeout = float(raw_timeout)
        initial = data.get("initial", "snapshot")
        if initial not in INITIAL_CHOICES:
            problems.append(
                f"initial: expected {' or '.join(repr(c) for c in INITIAL_CHOICES)}, "
                f"got {initial!r}"
            )
        delivery = data.get("delivery", "at-least-once")
        if delivery not in DELIVERY_CHOICES:
            problems.append(
                f"delivery: expected {' or '.join(repr(c) for c in DELIVERY_CHOICES)}, "
                f"got {delivery!r}"
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
                    bad = [
                        problem
                        for key, value in options.items()
                        if (problem := _sink_option_problem(scheme, str(key), value)) is not None
                    ]
                    problems.extend(bad)
                    if not bad:
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
            delivery=str(delivery),
            root=root,
        )


def _source_name_problem(value: object) -> str | None:
    if isinstance(value, str) and value.strip():
        return None
    return f"expected capture source names, got {value!r}"


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
        "delivery",
    }
)
INITIAL_CHOICES: tuple[str, ...] = ("snapshot", "none")
DELIVERY_CHOICES: tuple[str, ...] = ("at-least-once", "exactly-once")


def manifest_path(path: str | Path) -> Path:
    """The ``dbus.toml`` meant by ``path``: the file itself or the one in a folder."""
    candidate = Path(path)
    return candidate / MANIFEST_FILE if candidate.is_dir() else candidate


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a ``dbus.toml`` (or the one in the folder ``path``)."""
    file = manifest_path(path)
    return Manifest.from_mapping(manifest_table(file), root=file.parent.resolve(), origin=str(file))


def manifest_table(path: str | Path) -> dict[str, Any]:
    """The TOML table of a ``dbus.toml`` (or of the one in the folder ``path``), not yet
    validated; ``ManifestError`` naming the file when it cannot be read as TOML."""
    file = manifest_path(path)
    if file.suffix == ".py":
        raise ManifestError(
            f"{file}: is a Python module, expected a deployment folder or its {MANIFEST_FILE}; "
            f"pass the folder whose {MANIFEST_FILE} names it in module =",
            path=str(file),
        )
    try:
        return tomllib.loads(read_utf8(file))
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
    except OSError as exc:
        raise ManifestError(
            f"{file}: cannot be read ({exc.strerror}); expected a deployment manifest "
            f"({MANIFEST_FILE}) that this user can read",
            path=str(file),
        ) from None
    except UnicodeDecodeError as exc:
        raise ManifestError(
            f"{file}: {not_utf8(exc)}; TOML is UTF-8: save the file as UTF-8", path=str(file)
        ) from None
    except tomllib.TOMLDecodeError as exc:
        hint = f"; expected a deployment folder or its {MANIFEST_FILE}"
        expected = "" if file.suffix == ".toml" else hint
        raise ManifestError(f"{file}: not valid TOML: {exc}{expected}", path=str(file)) from None
