"""Helpers every kind of test shares: a free port, waiting for a condition, a Kafka reader.

Client libraries are imported inside the helpers that use them, so SDK unit tests
can import this module without them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dbus_deploy.services import Endpoints, MariaDBEndpoint, ServicesConfig
    from dbus_spark.config.runtime import RuntimeConfig


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that nothing listens on right now.

    They come from below the system's ephemeral range, never from it: a port the
    system handed out for ``bind(0)`` is one it hands out again as the source port
    of any outgoing connection, so a server told to listen there seconds later can
    find it taken, and a client sent there as "nobody listens" can connect to
    itself. Each pytest-xdist worker takes its own slice of that range and walks
    it, so two workers never choose the same port.
    """
    chosen: list[int] = []
    while len(chosen) < count:
        port = next(_PORTS)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


def _ephemeral_low() -> int:
    """The lowest port the system hands out on its own (Linux's default is 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_slice() -> Iterator[int]:
    """This process's ports to hand out: its xdist worker's share of the ports from
    20000 up to the ephemeral range, walked round from a point its pid picks."""
    low, high = 20000, max(_ephemeral_low(), 21000)
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), 1)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    size = (high - low) // workers
    first, start = low + worker * size, os.getpid() % size
    while True:
        for step in range(size):
            yield first + (start + step) % size


_PORTS = _port_slice()


FIRST_BATCH = 300.0
"""Seconds a (re)started runtime may take to commit its first batch, or to deliver its
first change, before it counts as stuck. A start is the runtime's, Spark's JVM and then
the chain of Python processes Spark starts one after another to plan and run a batch
(about 20 s on a quiet 2-core machine, most of it CPU: docs/performance.md, "A fast
start"); a restart's first batch is also what the killed run had not committed and what
was written while it was down. Alone on the machine a restart took 24-44 s to its first
commit; in the parallel pass, beside the other workers' Spark runtimes, 68-123 s (CPU,
so it stretches with the load; 2c8a71d's stacks showed a slow start and a large first
batch, no hang), and at the pass's start (three files starting runtimes and servers at
once) a first batch's task ended 24-32 s after its offsets. The wait is for that batch,
not a bound on its speed: 300 s is about 2.5 times the slowest seen under load, and a
run past it is stuck."""


def wait_for(
    check: Callable[[], Any],
    within: float,
    what: str,
    *,
    every: float = 0.05,
    alive: Callable[[], bool] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """The first truthy result of ``check()``; fail after ``within`` seconds, or as soon
    as ``alive()`` says the process being waited on is gone. ``ignoring``: errors of
    ``check`` that count as "not yet" (a service that is away)."""
    deadline = time.monotonic() + within
    while True:
        try:
            result = check()
        except ignoring:
            result = None
        if result:
            return result
        if alive is not None and not alive():
            raise AssertionError(f"the process exited while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g} s: {what}")
        time.sleep(every)


def wait_until(
    check: Callable[[], Any],
    within: float,
    what: str,
    *,
    every: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> float:
    """Seconds until ``check()`` held; fail after ``within`` seconds."""
    began = time.monotonic()
    wait_for(check, within, what, every=every, ignoring=ignoring)
    return time.monotonic() - began


def delete_topics(bootstrap: str, topics: Iterable[str]) -> None:
    """Delete those of ``topics`` that exist (a test's outputs, after it)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    present = [topic for topic in topics if topic in existing]
    for future in admin.delete_topics(present, operation_timeout=30).values() if present else ():
        future.result(timeout=60)


def kafka_consumer(
    bootstrap: str, settings: Mapping[str, Any] | None = None, *, group: str | None = None
) -> Any:
    """A Kafka consumer of its own group (a new one unless ``group`` is given), with
    librdkafka ``settings`` on top."""
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"dbus-test-{uuid.uuid4().hex}",
            **(settings or {}),
        }
    )


def topic_exists(bootstrap: str, topic: str) -> bool:
    """Whether the broker at ``bootstrap`` has ``topic``."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return topic in admin.list_topics(timeout=30).topics


def es_count(url: str, index: str) -> int:
    """How many documents ``index`` holds now (refreshed first; 0 when it does not exist)."""
    from elasticsearch import Elasticsearch

    with Elasticsearch(url) as client:
        if not client.indices.exists(index=index):
            return 0
        client.indices.refresh(index=index)
        return int(client.count(index=index)["count"])


def es_documents(es: Any, index: str) -> dict[str, Any] | None:
    """Every document ``index`` holds now, by id (refreshed first; None when it does not
    exist yet); ``es``: an Elasticsearch client."""
    if not es.indices.exists(index=index):
        return None
    es.indices.refresh(index=index)
    hits = es.search(index=index, query={"match_all": {}}, size=10000)["hits"]["hits"]
    return {hit["_id"]: hit["_source"] for hit in hits}


def wait_index_holds(url: str, index: str, rows: dict[Any, dict[str, Any]], what: str) -> None:
    """Wait until ``index`` holds exactly ``rows`` (by their ``id``), each document equal
    to its row; ``what`` names the wait in its failure."""
    from elasticsearch import Elasticsearch

    with Elasticsearch(url, request_timeout=60) as es:

        def settled() -> bool:
            found = es_documents(es, index) or {}
            return {document["id"]: document for document in found.values()} == rows

        wait_for(settled, 120, what)


def kafka_messages(bootstrap: str, topic: str, count: int, within: float = 30.0) -> list[Any]:
    """Up to ``count`` messages of ``topic`` from its start (errors skipped), read until
    that many came or ``within`` seconds passed."""
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    found: list[Any] = []
    deadline = time.monotonic() + within
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    return found


def kafka_ids(bootstrap: str, topic: str, expected: int, within: float = 30.0) -> list[int]:
    """The ``after.id`` of each message of ``topic`` (a table relayed as CloudEvents),
    sorted (its partitions keep no order between keys), once it holds ``expected``
    messages (or ``within`` seconds passed: ``kafka_messages``)."""
    import json

    messages = kafka_messages(bootstrap, topic, expected, within)
    return sorted(json.loads(message.value())["after"]["id"] for message in messages)


def kafka_count(
    bootstrap: str, topic: str, *, expected: int | None = None, within: float = 120.0
) -> int:
    """How many messages ``topic`` gives from its start: read until ``expected`` came
    (every one, when None) or ``within`` seconds passed."""
    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + within
    try:
        while (expected is None or seen < expected) and (left := deadline - time.monotonic()) > 0:
            seen += sum(not msg.error() for msg in consumer.consume(1000, min(left, 0.5)))
    finally:
        consumer.close()
    return seen


def kafka_events(bootstrap: str, topic: str, count: int, within: float) -> list[tuple[Any, Any]]:
    """Up to ``count`` messages of ``topic`` as (key, CloudEvent), read within ``within``
    seconds by the consumer group named after the topic: a second call goes on from
    where the first one stopped."""
    from dbus_fn.kafka_binding import from_kafka_message

    consumer = kafka_consumer(bootstrap, {"auto.offset.reset": "earliest"}, group=topic)
    consumer.subscribe([topic])
    events: list[tuple[Any, Any]] = []
    deadline = time.monotonic() + within
    try:
        while len(events) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            events.append((msg.key(), from_kafka_message(msg.key(), msg.value(), msg.headers())))
    finally:
        consumer.close()
    return events


def process_running(process: Any) -> bool:
    """Whether a ``psutil.Process`` still runs: not gone, and not a zombie (one that
    ended and waits for its parent)."""
    import psutil

    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def process_command(process: Any) -> list[str]:
    """A ``psutil.Process``'s command line; ``["?"]`` once it is gone or a zombie."""
    import psutil

    try:
        return list(process.cmdline())
    except psutil.Error:
        return ["?"]


def under_a_subreaper_that_does_not_reap(script: str, timeout: float = 90.0) -> Any:
    """Run the Python ``script`` in a process whose parent is a subreaper that waits for
    it alone, as a bench adopting its orphans or a container's first process does: what
    the script orphans is handed to that parent, and stays a zombie once it ends. The
    script's last line of output, read as JSON."""
    import json
    import sys
    import textwrap

    parent = textwrap.dedent(
        """
        import ctypes, subprocess, sys
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        done = subprocess.run([sys.executable, "-c", sys.argv[1]], capture_output=True, text=True)
        sys.stderr.write(done.stderr)
        print(done.stdout)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", parent, textwrap.dedent(script)],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_source_config(
    services: Any, database: Any, folder: Path, checkpoint: Path, **options: Any
) -> RuntimeConfig:
    """A runtime over the local services' sinks and the deployment in ``folder``: its one
    source ``src`` the server of ``database``, its checkpoint ``checkpoint``; ``options``
    the rest of ``runtime_config``'s."""
    from dbus_spark.interfaces.settings import runtime_config

    return runtime_config(
        sources=(f"src={database.endpoint.dsn}",), deployments=(str(folder),),
        kafka=services.kafka.bootstrap_servers, elasticsearch=services.elasticsearch.url,
        checkpoint=str(checkpoint), **options,
    )  # fmt: skip


def relay_table(
    database: Any,
    function_folder: Any,
    route: str,
    columns: str = "id INT PRIMARY KEY",
    initial: str | None = None,
) -> tuple[Path, str]:
    """A new table ``t`` of ``columns`` in ``database`` and a deployment ``relay``
    whose one function routes each of its changes to ``route`` (its manifest's
    ``initial``, when given): the deployment's folder and the table."""
    with database.connect().cursor() as cur:
        cur.execute(f"CREATE TABLE t ({columns})")
    table = f"{database.name}.t"
    code = route_code(table, route, "relay")
    return Path(function_folder("relay", code, [table], initial=initial)), table


def route_code(table: str, route: str, name: str = "there") -> str:
    """A function module whose one function, ``name``, routes each change of ``table``
    to ``route`` (a ``function_folder``'s code)."""
    return f"""
        import dbus_fn as fn

        @fn.route(tables="{table}")
        def {name}(event: fn.RowChange) -> str:
            return "{route}"
        """


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """A runtime's ``/metrics`` (``url`` is its API's), per (sample name, sorted labels)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        return parse_metrics(answer.read().decode())


def parse_metrics(text: str) -> Samples:
    """The exposition format's samples, per (sample name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample_sum(samples: Mapping[tuple[str, Any], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, pairs), value in samples.items()
        if sample == name and set(labels.items()) <= set(pairs)
    )


def runtime_api(checkpoint: Any, within: float = 180.0) -> str:
    """The API URL a runtime started with ``checkpoint`` serves (``dbus_spark.interfaces.api``)."""
    from pathlib import Path

    from dbus_spark.state.checkpoint import address_path

    path = address_path(str(checkpoint))
    wait_for(lambda: Path(path).exists(), within, f"the runtime writes {path}")
    return Path(path).read_text().strip()


@contextlib.contextmanager
def serving_api(checkpoint: Any, token: str | None = None) -> Iterator[str]:
    """The API a runtime serves (``dbus_spark.interfaces.api.runtime``), here, for the runtime at
    ``checkpoint``: one a test runs in its own process, or none (then nothing takes
    the requests posted to it). Yields its URL."""
    from dbus_spark.interfaces.api.runtime import RuntimeApi

    api = RuntimeApi.serve("127.0.0.1:0", token, "test")
    assert api is not None
    try:
        yield api.start(str(checkpoint))
    finally:
        api.stop()


@contextlib.contextmanager
def answering_planner(checkpoint: Any) -> Iterator[list[Any]]:
    """Answers every request posted for the runtime at ``checkpoint`` as its planner
    would, from the same mailbox (``dbus_spark.planning.requests``): a deployment named
    ``nope`` is refused, the others accepted with one task. Yields what it was asked."""
    import threading

    from dbus_spark.planning.mailbox import answer, pending
    from dbus_spark.planning.request_models import Answer

    asked: list[Any] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.05):
            for request, _ in pending(str(checkpoint)):
                asked.append(request)
                if request.deployment == "nope":
                    reply = Answer(False, "no deployment 'nope' runs here")
                else:
                    reply = Answer(True, f"started 1 table read(s) for {request.deployment}",
                                   (("shop", f"{request.deployment}:shop.orders"),))  # fmt: skip
                answer(str(checkpoint), request, reply)

    thread = threading.Thread(target=run, name="test-planner", daemon=True)
    thread.start()
    try:
        yield asked
    finally:
        stop.set()
        thread.join()


def page_texts(browser: Any, selector: str, attribute: str | None = None) -> list[str]:
    """The text (or ``attribute``) of every element ``selector`` finds, read in one go:
    a page that redraws itself never hands back an element it has just replaced."""
    return list(
        browser.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".map(e => arguments[1] ? e.getAttribute(arguments[1]) : e.textContent);",
            selector,
            attribute,
        )
    )


def keeps_to_its_document(app: Any, examples: int) -> set[str]:
    """Call every operation of an ASGI ``app`` with requests schemathesis makes from its
    own OpenAPI document (``examples`` each) and check every answer against it; the
    operations, as ``METHOD /path``."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        def keeps_to_it(case: Any) -> None:
            case.call_and_validate()

        keeps_to_it()
    return {f"{op.method.upper()} {op.path}" for op in operations}


class Proxy:
    """A TCP forwarder (socat) to a real service that can be cut off and brought back
    on the same port: cut, its clients find nothing listening."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.restore()

    def restore(self) -> None:
        self._process = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{self.port},bind=127.0.0.1,fork,reuseaddr",
             f"TCP:{self._upstream}"],
            start_new_session=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip

        def listening() -> bool:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return True
            return False

        wait_for(listening, 10, f"socat listening on {self.port}")

    def cut(self) -> None:
        """Stop the forwarder and every connection it holds."""
        assert self._process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def close(self) -> None:
        if self._process is not None:
            self.cut()


@dataclass
class PrivateServices:
    """Services a test started for itself (the ``private_services`` fixture)."""

    config: ServicesConfig
    endpoints: Endpoints

    def database(self, server: str) -> MariaDBEndpoint:
        """The database server ``server`` of these services."""
        return database_endpoint(self.endpoints, server)


DATABASE_SERVERS = ("mariadb", "mysql", "mariadb_replica", "mysql_replica")


def database_endpoint(endpoints: Endpoints, server: str) -> MariaDBEndpoint:
    """The endpoint of database server ``server``: one of ``DATABASE_SERVERS``."""
    if server not in DATABASE_SERVERS:
        raise ValueError(f"no database server {server!r}: one of {', '.join(DATABASE_SERVERS)}")
    found: MariaDBEndpoint = getattr(endpoints, server)
    return found


class PrivateHomes:
    """Services started privately: each ``start`` in a temp home of its own on free
    ports; ``close`` stops them all and removes their homes. Installed artefacts
    (Kafka jars, the Elasticsearch distribution) are shared. The ``private_services``
    fixture (one test's) and ``module_services`` (one test module's) hand out ``start``.
    """

    def __init__(self) -> None:
        self._made: list[ServicesConfig] = []

    def start(self, *names: str) -> PrivateServices:
        """The named services, running in a new home: ``start("mariadb", "kafka")``."""
        import tempfile

        import pytest

        from dbus_deploy.services import PORT_VARIABLES, endpoints, load_config, up
        from dbus_fn.errors import DbusError

        # Elasticsearch runs as its own user, who must traverse the home: not tmp_path.
        home = Path(tempfile.mkdtemp(prefix="dbus-private-"))
        home.chmod(0o755)
        (home / "lib").symlink_to(load_config().lib_dir, target_is_directory=True)
        env = {**os.environ, "DBUS_HOME": str(home)}
        ports = free_ports(len(PORT_VARIABLES))
        env.update({var: str(port) for var, port in zip(PORT_VARIABLES, ports, strict=True)})
        config = load_config(env)
        self._made.append(config)
        try:
            up(list(names), config=config)
        except DbusError as exc:
            pytest.fail(f"private services unavailable: {exc}", pytrace=False)
        return PrivateServices(config, endpoints(config))

    def close(self) -> None:
        import shutil

        from dbus_deploy.services import down

        for config in self._made:
            down(config=config)
            shutil.rmtree(config.home, ignore_errors=True)


def own_events(listed: Sequence[tuple[Any, ...]], database: str) -> list[str]:
    """The kinds of the events of ``database``'s transactions in a listing of SHOW BINLOG
    EVENTS (other tests write the same binlog): a transaction runs from its Gtid event to
    the next, a compressed one's events listed after its payload event."""
    transactions: list[list[tuple[Any, ...]]] = []
    for row in listed:
        if row[2] == "Gtid" or not transactions:
            transactions.append([])
        transactions[-1].append(row)
    mapped = f"({database}."
    return [row[2] for events in transactions
            if any(row[2] == "Table_map" and mapped in row[5] for row in events)
            for row in events]  # fmt: skip


def table_map_ids(listed: Sequence[tuple[Any, ...]], database: str) -> dict[str, list[int]]:
    """The table map ids each table of ``database`` has in a listing of SHOW BINLOG
    EVENTS, in binlog order."""
    import re

    ids: dict[str, list[int]] = {}
    for row in listed:
        found = re.fullmatch(rf"table_id: (\d+) \({re.escape(database)}\.(\w+)\)", str(row[5]))
        if row[2] == "Table_map" and found:
            ids.setdefault(found[2], []).append(int(found[1]))
    return ids
