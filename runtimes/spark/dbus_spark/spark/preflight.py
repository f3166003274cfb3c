"""What a runtime checks before Spark starts: its sinks and its Spark master answer.

A deployment's own cluster (``dbus_spark.config.routes``) is checked too, but
what is wrong with it is that deployment's alone: ``deployment_sink_problems``
names it for a warning, and the runtime starts; the deployment is detached
until its cluster answers.

A malformed address is a bad value (``ConfigError``, exit 2); a well-formed one
that does not answer within a few seconds is ``ServiceUnreachableError`` (exit 3).
Both are one line naming the option to fix, found in seconds instead of after
Spark's start-up and a flood of client-library retries.
"""

from __future__ import annotations

import base64
import re
import socket
import urllib.error
import urllib.request
from urllib.parse import SplitResult, urlsplit

from dbus_fn.capture import redact_dsn
from dbus_fn.errors import ConfigError, DbusError, ServiceUnreachableError, SourceUnreachableError
from dbus_spark.config.routes import (
    ElasticsearchCluster,
    Routes,
    elasticsearch_cluster,
    kafka_cluster,
)

TIMEOUT = 5.0
"""Seconds each address may take to answer."""

_HOST_PORT = re.compile(
    r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d{1,5})$"
)
_LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")


def host_ports(value: str, *, option: str, example: str) -> list[tuple[str, int]]:
    """``host:port[,host:port…]`` as pairs; anything else is a ``ConfigError`` quoting
    ``value`` without a password."""
    if "@" in value:
        # A login: its password may hold ',' or ':', so no part of it is quoted.
        raise ConfigError(
            f"{option} {redact_dsn(value)!r} holds a user and password, which are not read "
            f"here; write it as {example}",
            setting=option,
        )
    pairs: list[tuple[str, int]] = []
    for part in value.split(","):
        match = _HOST_PORT.match(part.strip())
        port = int(match.group("port")) if match else 0
        if match is None or not 0 < port < 65536:
            raise ConfigError(
                f"{option} {value!r}: {part.strip()!r} is not HOST:PORT; write it as {example}",
                setting=option,
            )
        pairs.append((match.group("v6") or match.group("host"), port))
    return pairs


def _answers(pairs: list[tuple[str, int]], timeout: float) -> str | None:
    """``None`` once one address accepts a connection; else why the last one did not."""
    reason = "no address"
    for host, port in pairs:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
    return reason


def kafka_addresses(bootstrap: str) -> list[tuple[str, int]]:
    return host_ports(bootstrap, option="--kafka", example="HOST:PORT[,HOST:PORT]")


def check_kafka(bootstrap: str, *, timeout: float = TIMEOUT) -> None:
    reason = _answers(kafka_addresses(bootstrap), timeout)
    if reason is not None:
        raise ServiceUnreachableError(
            f"cannot reach Kafka at {bootstrap} ({reason.lower()}); start it "
            "(`dbus services up` for the local one) or fix --kafka / DBUS_KAFKA",
            service="kafka",
        )


def check_kafka_source(name: str, bootstrap: str, *, timeout: float = TIMEOUT) -> None:
    """A Kafka source's brokers answer (``dbus_spark.config.kafka_source``), else one line."""
    pairs = host_ports(bootstrap, option=f"--source {name}", example="kafka://HOST:PORT/TOPIC")
    reason = _answers(pairs, timeout)
    if reason is not None:
        raise SourceUnreachableError(
            f"source {name!r}: Kafka at {bootstrap} does not answer ({reason.lower()}); "
            "check that the brokers run and the URL's hosts and ports",
            source=name,
        )


def elasticsearch_url(url: str) -> SplitResult:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--elasticsearch {redact_dsn(url)!r} is not an http:// or https:// URL; write it as "
            "http://HOST:PORT",
            setting="--elasticsearch",
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ConfigError(
            f"--elasticsearch {redact_dsn(url)!r}: the port is not a number; write it as "
            "http://HOST:PORT",
            setting="--elasticsearch",
        ) from None
    return parts


def check_elasticsearch(url: str, *, timeout: float = TIMEOUT) -> None:
    parts = elasticsearch_url(url)
    assert parts.hostname is not None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown = f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
    request = urllib.request.Request(shown + "/", method="GET")
    if parts.username is not None:
        login = f"{parts.username}:{parts.password or ''}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(login).decode())
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise ServiceUnreachableError(
                f"Elasticsearch at {shown} refuses the login ({exc.code}); put the "
                "user and password in the URL (http://USER:PASSWORD@HOST:PORT)",
                service="elasticsearch",
            ) from None
        return  # it answered: what a path or status means is the sink's business
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServiceUnreachableError(
            f"cannot reach Elasticsearch at {shown} ({reason}); start it "
            "(`dbus services up` for the local one) or fix --elasticsearch / DBUS_ELASTICSEARCH",
            service="elasticsearch",
        ) from None


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The addresses a ``spark://`` master must answer at; none for ``local[…]``,
    ``yarn`` and ``k8s://`` (left to Spark); anything else is not a master URL."""
    if _LOCAL_MASTER.match(master) or master == "yarn" or master.startswith("k8s://"):
        return []
    if not master.startswith("spark://"):
        raise ConfigError(
            f"--master {redact_dsn(master)!r} is not a Spark master URL; use local[*], local[N], "
            "spark://HOST:PORT, yarn or k8s://URL",
            setting="--master",
        )
    return host_ports(
        master.removeprefix("spark://"), option="--master", example="spark://HOST:PORT"
    )


def check_master(master: str, *, timeout: float = TIMEOUT) -> None:
    pairs = master_addresses(master)
    if not pairs:
        return
    reason = _answers(pairs, timeout)
    if reason is not None:
        raise ServiceUnreachableError(
            f"cannot reach the Spark master at {master} ({reason.lower()}); start it or fix "
            "--master / DBUS_SPARK_MASTER",
            service="spark",
        )


def check_addresses(*, kafka: str, elasticsearch: str, master: str) -> None:
    """Every address is well-formed: checked first, so a typo never waits on a network."""
    master_addresses(master)
    kafka_addresses(kafka)
    elasticsearch_url(elasticsearch)


def check_reachable(*, kafka: str, elasticsearch: str, master: str) -> None:
    """Each address answers."""
    check_master(master)
    check_kafka(kafka)
    check_elasticsearch(elasticsearch)


def check_runtime(*, kafka: str, elasticsearch: str, master: str) -> None:
    """Every address well-formed, then each answers."""
    check_addresses(kafka=kafka, elasticsearch=elasticsearch, master=master)
    check_reachable(kafka=kafka, elasticsearch=elasticsearch, master=master)


def deployment_sink_problems(routes: Routes, *, timeout: float = TIMEOUT) -> list[str]:
    """One line per deployment's own cluster that cannot be reached or refuses its
    login, or whose settings name a variable not set (a file not readable) here."""
    problems: list[str] = []
    for name in sorted(routes):
        try:
            kafka = kafka_cluster(name, routes)
            if kafka is not None and kafka.bootstrap:
                option = f"deployment {name}: sinks.kafka.bootstrap_servers"
                pairs = host_ports(kafka.bootstrap, option=option, example="HOST:PORT")
                reason = _answers(pairs, timeout)
                if reason is not None:
                    problems.append(
                        f"deployment {name}: cannot reach its Kafka at {kafka.bootstrap} "
                        f"({reason.lower()}); it is detached until that cluster answers"
                    )
            es = elasticsearch_cluster(name, routes)
            if es is not None and es.hosts:
                problem = _elasticsearch_problem(es, timeout)
                if problem is not None:
                    problems.append(f"deployment {name}: {problem}")
        except DbusError as exc:
            problems.append(str(exc))
    return problems


def _elasticsearch_problem(es: ElasticsearchCluster, timeout: float) -> str | None:
    """Why a deployment's own Elasticsearch will not take its writes (None: it
    answers and takes its login), asked with the client and options its sink uses."""
    from elasticsearch import (
        ApiError,
        AuthenticationException,
        AuthorizationException,
        Elasticsearch,
        TransportError,
    )

    hosts = [es.hosts] if isinstance(es.hosts, str) else list(es.hosts)
    options = {**es.options, "request_timeout": timeout, "max_retries": 0}
    try:
        with Elasticsearch(hosts, **options) as client:
            client.info()
    except (AuthenticationException, AuthorizationException) as exc:
        return (
            f"its Elasticsearch at {hosts[0]} refuses its login ({exc.status_code}); fix "
            "sinks.es username and password_env/password_file, or api_key_env/api_key_file, "
            "or what they name; it is detached meanwhile"
        )
    except ApiError:
        return None  # it answered: what a status means is the sink's business
    except (TransportError, ValueError):
        away = f"cannot reach its Elasticsearch at {hosts[0]}"
        return f"{away}; it is detached until that cluster answers"
    return None
