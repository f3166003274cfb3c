"""A sink that goes away mid-load: the runtime waits and retries, loses nothing, does not spin.

Kafka, then (separately) Elasticsearch, private to this test, are stopped for 30
seconds while a writer keeps changing three tables, then started again. The
runtime must stay up, hold back its positions while a sink is down, retry at a
calm pace (its log during the outage stays short), show the outage in its
metrics and on its dashboard (open in a headless Chromium) within 10 seconds (the
sink's retries and what it has in flight), and
after the outages every committed change is in Kafka, in order per key, each
index equals its table, and the source's lag is back at 0.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from convergence import (
    RuntimeProcess,
    Workload,
    check_convergence,
    new_routes,
    wait_converged,
    write_function_folder,
)
from elasticsearch import Elasticsearch
from scratch import FreshDatabase
from support import page_texts, runtime_api, sample_sum, scrape, wait_for

from dbus_deploy.services import down, up

# Exclusive (run apart from the parallel integration pass): bounds how fast an outage shows; three
# private services, Spark and a browser.
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.exclusive]

OUTAGE = 30.0
# What the runtime logs while a sink is away: the sinks' own retry warnings, the
# Kafka client's connection errors, the Elasticsearch client's node failures.
SINK_RETRY = re.compile(r"not yet acknowledged|elasticsearch .* unreachable|elasticsearch busy")
CLIENT_NOISE = re.compile(r"^%\d\|\d|elastic_transport|Connection refused", re.MULTILINE)
# The sinks retry with backoff (Kafka: a warning per 5 s of waiting; Elasticsearch:
# 0.5 s doubling to 10 s): a handful of warnings per 30 s outage. A tight retry loop
# would write thousands of lines.
MAX_SINK_RETRIES = 30
MAX_LINES_PER_OUTAGE = 600
# Quiet, each Python worker passes at most one Kafka client line per 30 s
# (logs.CLIENT_LINE_INTERVAL); a few workers over a 30 s outage, with margin.
MAX_CLIENT_LINES = 10
METRICS_WITHIN = 10.0
"""Seconds an outage may take to show in the runtime's metrics."""
DRAWN = 30.0
"""Guards against a hang: the dashboard lists the sinks at its first refresh."""
BATCHES_AFTER = 2
"""Batches committed after a sink came back: the first may be the one that waited
through the outage, the second was read and delivered after it."""
RECOVERED = 120.0
"""Guards against a hang: a sink that came back takes the backlog of its outage (30 s
of load) in a few batches."""


def _log_lines(runtime: RuntimeProcess) -> list[str]:
    return runtime.log_text().splitlines()


def _on_page(browser: Any, sink: str) -> dict[str, float]:
    """The dashboard's counts of ``sink`` (retries, in flight, errors)."""
    cells = f'#sinks tr[data-sink="{sink}"] td[data-field]'
    found = {}
    for field, text in zip(page_texts(browser, cells, "data-field"), page_texts(browser, cells),
                           strict=False):  # fmt: skip
        scale = {"k": 1e3, "M": 1e6}.get(text.strip()[-1:], 1)
        found[field] = float(text.strip().rstrip("kM") or 0) * scale
    return found


def _wait_delivering(api: str, sink: str, runtime: RuntimeProcess) -> None:
    """Wait until the runtime delivers again after ``sink`` came back: batches committed
    since (a batch commits once every sink took it), so the next outage, or the load's
    end, starts from a runtime that works, not one still clearing the last."""
    batches = sample_sum(scrape(api), "dbus_batches_total")

    def delivering() -> bool:
        return sample_sum(scrape(api), "dbus_batches_total") >= batches + BATCHES_AFTER

    wait_for(delivering, RECOVERED, f"the runtime delivering again after {sink} came back",
             every=0.5, alive=runtime.alive)  # fmt: skip


def _outage(
    name: str,
    services: Any,
    runtime: RuntimeProcess,
    workload: Workload,
    api: str,
    browser: Any,
) -> dict[str, Any]:
    """Stop ``name`` for OUTAGE seconds under load; what the runtime logged meanwhile,
    and how soon its metrics and its dashboard (open in ``browser``) showed the sink
    retrying with messages in flight."""
    sink = "elasticsearch" if name == "elasticsearch" else "kafka"
    committed_before = len(workload.committed)
    lines_before = len(_log_lines(runtime))
    retries_before = sample_sum(scrape(api), "dbus_sink_retries_total", sink=sink)
    page_before = _on_page(browser, sink).get("retries", 0)
    stopped_at = time.monotonic()
    down([name], config=services.config)
    deadline = stopped_at + OUTAGE
    shown_after = page_after = None
    while time.monotonic() < deadline:
        assert runtime.alive(), f"the runtime exited while {name} was down:\n{runtime.tail()}"
        if shown_after is None:
            samples = scrape(api)
            if (
                sample_sum(samples, "dbus_sink_retries_total", sink=sink) > retries_before
                and sample_sum(samples, "dbus_sink_in_flight", sink=sink) > 0
            ):
                shown_after = time.monotonic() - stopped_at
        page = _on_page(browser, sink)
        if page_after is None and page.get("retries", 0) > page_before and page.get("in_flight"):
            page_after = time.monotonic() - stopped_at
        time.sleep(0.5)
    window = _log_lines(runtime)[lines_before:]
    restarted = time.monotonic()
    up([name], config=services.config)
    return {
        "sink": name,
        "down_for": restarted - stopped_at,
        "back_after": time.monotonic() - restarted,
        "changes_meanwhile": len(workload.committed) - committed_before,
        "log_lines": len(window),
        "sink_retries": sum(1 for line in window if SINK_RETRY.search(line)),
        "metrics_after": shown_after,
        "page_after": page_after,
        "client_errors": sum(
            1 for line in window if CLIENT_NOISE.search(line) and not SINK_RETRY.search(line)
        ),
    }


def test_kafka_and_elasticsearch_outages_lose_nothing_without_a_tight_retry_loop(
    private_services: Any, chaos_seed: int, tmp_path: Path, browser: Any
) -> None:
    began = time.monotonic()
    services = private_services("mariadb", "kafka", "elasticsearch")
    endpoints = services.endpoints
    database = FreshDatabase("chaos", endpoints.mariadb)
    with database.connect(use_database=False).cursor() as cur:
        cur.execute("CREATE DATABASE chaos")
    bootstrap = endpoints.kafka.bootstrap_servers
    workload = Workload(database.connect, seed=chaos_seed)
    workload.create_tables()
    routes = new_routes(database.name, workload.tables)
    runtime = RuntimeProcess.for_runtime(
        source_dsn=endpoints.mariadb.dsn,
        functions=write_function_folder(tmp_path / "fn", routes),
        kafka=bootstrap,
        elasticsearch=endpoints.elasticsearch.url,
        checkpoint=tmp_path / "checkpoint",
        logs=tmp_path / "logs",
    )
    es = Elasticsearch(endpoints.elasticsearch.url, request_timeout=60)
    conn = database.connect()
    outages: list[dict[str, Any]] = []
    writing = False
    try:
        runtime.start()
        workload.start()
        writing = True
        runtime.wait_first_commit(180)
        api = runtime_api(runtime.checkpoint)
        browser.get(f"{api}/")
        wait_for(lambda: _on_page(browser, "kafka") and _on_page(browser, "elasticsearch"),
                 DRAWN, "the dashboard to list both sinks", every=0.5)  # fmt: skip
        outages.append(_outage("kafka", services, runtime, workload, api, browser))
        _wait_delivering(api, "kafka", runtime)
        outages.append(_outage("elasticsearch", services, runtime, workload, api, browser))
        _wait_delivering(api, "elasticsearch", runtime)
        workload.stop()
        writing = False
        verdict, caught_up = wait_converged(
            lambda: check_convergence(workload, routes, conn, bootstrap, es),
            timeout=300,
            alive=runtime.alive,
            on_timeout=runtime.tail,
            seed=workload.seed,
        )
        wait_for(
            lambda: sample_sum(scrape(api), "dbus_source_lag_bytes") == 0
            and sample_sum(scrape(api), "dbus_source_lag_seconds") == 0,
            60, "the source's lag back at 0 after the outages",
        )  # fmt: skip
        assert runtime.alive()
        code = runtime.stop()
        assert code == 0, f"the runtime stopped with {code}:\n{runtime.tail()}"
        runtime.wait_gone(30)
    finally:
        if writing:
            workload.stop()
        runtime.stop()
        es.close()
        database.close()

    for outage in outages:
        print(
            "{sink} down {down_for:.0f}s (back in {back_after:.0f}s), "
            "{changes_meanwhile} changes written meanwhile: {log_lines} runtime log lines, "
            "{sink_retries} sink retry warnings, {client_errors} client errors; "
            "in the metrics after {metrics_after}s, on the dashboard after {page_after}s"
            .format(**outage)
        )
    print(
        f"changes committed: {len(workload.committed)}; "
        f"replayed messages: {sum(v.replayed for v in verdict.kafka.values())}; "
        f"caught up {caught_up:.1f}s after the load stopped; "
        f"total {time.monotonic() - began:.0f}s"
    )
    for outage in outages:
        assert outage["changes_meanwhile"] > 100, f"no load during the {outage['sink']} outage"
        for where, key in (("metrics", "metrics_after"), ("dashboard", "page_after")):
            shown = outage[key]
            assert shown is not None and shown <= METRICS_WITHIN, (
                f"the {outage['sink']} outage showed on the {where} (retries up, messages "
                f"in flight) after {shown}s, not within {METRICS_WITHIN:.0f}s"
            )
        assert outage["sink_retries"] >= 1, f"the runtime never noticed {outage['sink']} was down"
        assert outage["sink_retries"] <= MAX_SINK_RETRIES, (
            f"{outage['sink_retries']} retry warnings in {OUTAGE:.0f}s without "
            f"{outage['sink']}: the sink does not back off"
        )
        assert outage["client_errors"] <= MAX_CLIENT_LINES, (
            f"{outage['client_errors']} client library lines in {OUTAGE:.0f}s without "
            f"{outage['sink']}: one dbus line per retry is what a user should see"
        )
        assert outage["log_lines"] <= MAX_LINES_PER_OUTAGE, (
            f"{outage['log_lines']} log lines in {OUTAGE:.0f}s without {outage['sink']}: "
            "a tight retry loop"
        )
