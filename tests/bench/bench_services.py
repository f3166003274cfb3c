"""The CPU the JVM services take to start, idle and carry a load, with and without JVM
options.

Each run starts one service (``zookeeper``, ``kafka`` or ``elasticsearch``) the way
``dbus services up`` does, in a home of its own on free ports, and counts the CPU
seconds of every process it started (``measures.TreeCpu``: Kafka's storage tool, the
Elasticsearch launcher and its server included): from ``up`` to healthy, then over
``--idle`` seconds of doing nothing, then over a load of ``--messages`` small documents
(produced and read back, or bulk-indexed and searched), then it stops it. The installs
(Kafka's jars, the Elasticsearch distribution) are the current home's, linked in, so a
run measures no download. Runs alternate between Java's defaults and ``--options`` (by default the
test suite's ``DBUS_SERVICES_JAVA_OPTIONS``, ``-XX:TieredStopAtLevel=1``); the figures
are printed per run, then their medians.

    .venv/bin/python tests/bench/bench_services.py [--runs 3] [--idle 30]
        [--services zookeeper,kafka,elasticsearch] [--options "-XX:TieredStopAtLevel=1"]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from measures import TreeCpu, adopt_orphans, cpu_so_far
from support import free_ports, kafka_count

from dbus_deploy.services import (
    PORT_VARIABLES,
    ServicesConfig,
    down,
    endpoints,
    load_config,
    up,
)
from dbus_deploy.services._config import JAVA_OPTIONS_ENV


def _load(service: str, config: ServicesConfig, messages: int) -> None:
    """``messages`` small JSON documents through ``service``: into Kafka and read back,
    or bulk-indexed into Elasticsearch (500 a request, refreshed) and searched 100 times.
    ZooKeeper gets none."""
    documents = [json.dumps({"id": i, "name": f"customer {i}", "note": "a row change " * 5})
                 for i in range(messages)]  # fmt: skip
    if service == "kafka":
        from confluent_kafka import Producer

        bootstrap = endpoints(config).kafka.bootstrap_servers
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i, document in enumerate(documents):
            producer.produce("bench", key=str(i), value=document)
            producer.poll(0)
        producer.flush(60)
        read = kafka_count(bootstrap, "bench", expected=messages, within=120)
        if read < messages:
            raise SystemExit(f"kafka: read back {read} of {messages} messages in 120 s")
    elif service == "elasticsearch":
        url = endpoints(config).elasticsearch.url
        for start in range(0, messages, 500):
            body = "".join(f'{{"index": {{"_index": "bench", "_id": "{start + i}"}}}}\n{doc}\n'
                           for i, doc in enumerate(documents[start:start + 500]))  # fmt: skip
            request = urllib.request.Request(url + "/_bulk?refresh=true", data=body.encode(),
                                             headers={"Content-Type": "application/x-ndjson"})
            with urllib.request.urlopen(request, timeout=60) as response:
                if json.load(response)["errors"]:
                    raise SystemExit("elasticsearch: a bulk request indexed only a part")
        for i in range(100):
            urllib.request.urlopen(f"{url}/bench/_search?q=id:{i * 7}", timeout=60).read()


def one_run(
    service: str, options: str, idle: float, messages: int
) -> tuple[float, float, float, float]:
    """(CPU s to healthy, wall s to healthy, CPU s over ``idle`` seconds, CPU s of the
    load) of one start."""
    shared = load_config({k: v for k, v in load_config().environ.items()
                          if k != JAVA_OPTIONS_ENV})  # fmt: skip
    # /var/tmp: Elasticsearch runs as its own user, who must be able to enter the home.
    with tempfile.TemporaryDirectory(prefix="dbus-bench-", dir="/var/tmp") as folder:
        Path(folder).chmod(0o755)
        home = Path(folder) / "home"
        home.mkdir()
        (home / "lib").symlink_to(shared.lib_dir)
        env = {**shared.environ, "DBUS_HOME": str(home), JAVA_OPTIONS_ENV: options}
        ports = free_ports(len(PORT_VARIABLES))
        env.update({var: str(port) for var, port in zip(PORT_VARIABLES, ports, strict=True)})
        config = load_config(env)
        try:
            began = time.monotonic()
            with TreeCpu() as starting:
                up([service], config=config)
            wall = time.monotonic() - began
            marks = [cpu_so_far(psutil.Process())]
            time.sleep(idle)
            marks.append(cpu_so_far(psutil.Process()))
            _load(service, config, messages)
            marks.append(cpu_so_far(psutil.Process()))
            idling, loaded = (sum(cpu - before.get(key, 0.0) for key, cpu in after.items())
                              for before, after in itertools.pairwise(marks))  # fmt: skip
            return starting.seconds, wall, idling, loaded
        finally:
            down([service], config=config)


def _text(row: tuple[float, ...], args: argparse.Namespace) -> str:
    cpu, wall, idle, loaded = row
    return (f"healthy after {wall:.1f} s on {cpu:.2f} CPU s; {args.idle:g} s idle "
            f"{idle:.2f} CPU s; {args.messages} messages {loaded:.2f} CPU s")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--services", default="zookeeper,kafka,elasticsearch")
    parser.add_argument("--options", default="-XX:TieredStopAtLevel=1")
    parser.add_argument("--messages", type=int, default=30000,
                        help="the load after the idle time (Kafka and Elasticsearch)")
    args = parser.parse_args()
    # The services' processes detach from `up`: adopted here, they stay in TreeCpu's tree.
    adopt_orphans()
    variants = {"Java's defaults": "", args.options: args.options}
    for service in args.services.split(","):
        figures: dict[str, list[tuple[float, ...]]] = {name: [] for name in variants}
        for run in range(1, args.runs + 1):
            for name, options in variants.items():
                row = one_run(service, options, args.idle, args.messages)
                figures[name].append(row)
                print(f"{service} run {run} [{name}]: {_text(row, args)}", flush=True)
        for name, rows in figures.items():
            medians = tuple(statistics.median(column) for column in zip(*rows, strict=True))
            print(f"{service} median [{name}]: {_text(medians, args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
