"""`dbus demo`: the main job on local defaults, end to end, in about a minute.

It starts the local services, creates ``shop.orders`` in the local MariaDB, runs
the runtime with ``functions/orders`` from the current binlog position, writes a
few orders (inserts, an update, a delete, and a test account the function filters
out), and prints what arrived in Kafka and in Elasticsearch.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import click

ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS shop.orders (
    id BIGINT PRIMARY KEY,
    status VARCHAR(32) NOT NULL,
    total DECIMAL(12, 2) NOT NULL,
    customer_email VARCHAR(255),
    is_test BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
)
"""

INDEX = "orders"
TOPICS = r"^orders\..*"


@click.command()
@click.option(
    "--functions",
    "deployment",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Function folder to run (default: functions/orders of this checkout).",
)
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for results.")
@click.option(
    "--start-services/--running-services",
    default=True,
    show_default=True,
    help="Start the local services first, or use the ones `dbus services up` already started.",
)
@click.option(
    "--verbose",
    is_flag=True,
    envvar="DBUS_VERBOSE",
    help="Also show the runtime's log, Spark's warnings and the Kafka and Elasticsearch "
    "clients' warnings and notices. Env: DBUS_VERBOSE.",
)
def demo(deployment: str | None, timeout: float, start_services: bool, verbose: bool) -> None:
    """Start the local services and run the runtime with an example function."""
    from dbus_spark.config import logs

    # The demo's output is its results; the runtime's log is for --verbose. Set
    # before the runtime's modules load: its Spark workers inherit it.
    logs.set_verbose(verbose)
    if not verbose:
        os.environ[logs.RUNTIME_LOG_ENV] = "ERROR"

    import pymysql

    from dbus_deploy.services import endpoints, load_config, up
    from dbus_spark.interfaces.settings import runtime_config
    from dbus_spark.spark.job import start as start_query
    from dbus_spark.spark.job import stop as stop_query
    from dbus_spark.spark.session import spark_session

    started = time.monotonic()
    if start_services:
        click.echo("== services")
        for service in up(progress=lambda line: click.echo(f"   {line}")):
            ports = ", ".join(str(p) for p in service.ports)
            click.echo(f"   {service.name}: {service.action} on 127.0.0.1:{ports}")
    config = load_config()
    local = endpoints(config)
    db = local.mariadb
    conn = pymysql.connect(
        host=db.host, port=db.port, user=db.user, password=db.password, autocommit=True
    )
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS shop")
        cur.execute(ORDERS_DDL)

    run = uuid.uuid4().hex[:8]
    home = config.home / "demo"
    runtime = runtime_config(
        sources=(f"shop={db.dsn}",),
        deployments=(deployment or str(config.repo / "functions" / "orders"),),
        kafka=local.kafka.bootstrap_servers,
        elasticsearch=local.elasticsearch.url,
        checkpoint=str(home / f"checkpoint-{run}"),
        start="latest",
    )
    click.echo("== runtime (Spark local mode)")
    spark = spark_session()
    query = start_query(runtime, spark=spark)
    try:
        _wait(lambda: _progressed(query), timeout, "the runtime's first micro-batch")
        click.echo(f"   running; checkpoint {runtime.checkpoint_dir}")
        ids = _write_orders(conn)
        click.echo("== results")
        kafka = _read_kafka(local.kafka.bootstrap_servers, ids, run, timeout)
        for topic, key, ce_type, data in kafka:
            click.echo(f"   kafka  {topic:<16} key={key:<22} {ce_type}  {json.dumps(data)}")
        docs = _read_elasticsearch(local.elasticsearch.url, ids, timeout)
        for doc_id, source in docs:
            click.echo(f"   es     {INDEX}/_doc/{doc_id:<14} {json.dumps(source)}")
        gone = ids["deleted"]
        click.echo(f"   es     {INDEX}/_doc/{gone} deleted: {gone not in {d for d, _ in docs}}")
    finally:
        stop_query(query, spark)
        spark.stop()
    click.echo(f"== done in {time.monotonic() - started:.1f}s")


def _progressed(query: Any) -> bool:
    error = query.exception()
    if error is not None:
        raise click.ClickException(f"the runtime stopped: {str(error).splitlines()[0]}")
    return query.lastProgress is not None


def _wait(ready: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise click.ClickException(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def _write_orders(conn: Any) -> dict[str, Any]:
    base = int(time.time() * 1000) * 10
    paid, shipped, cancelled, test = base + 1, base + 2, base + 3, base + 4
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO shop.orders (id, status, total, customer_email, is_test) "
            "VALUES (%s, %s, %s, %s, %s)",
            [
                (paid, "paid", "19.90", "ada@example.com", False),
                (shipped, "paid", "250.00", "alan@example.com", False),
                (cancelled, "new", "5.00", "grace@example.com", False),
                (test, "paid", "1.00", "qa@example.com", True),
            ],
        )
        cur.execute("UPDATE shop.orders SET status = 'shipped' WHERE id = %s", (shipped,))
        cur.execute("DELETE FROM shop.orders WHERE id = %s", (cancelled,))
    click.echo(
        f"   wrote orders {paid} (paid), {shipped} (paid → shipped), {cancelled} (deleted), "
        f"{test} (test account, filtered out)"
    )
    return {"all": {paid, shipped, cancelled, test}, "kept": {paid, shipped}, "deleted": cancelled}


def _read_kafka(
    bootstrap: str, ids: dict[str, Any], run: str, timeout: float
) -> list[tuple[str, str, str, Any]]:
    from confluent_kafka import Consumer

    from dbus_fn.kafka_binding import from_kafka_message
    from dbus_spark.config.logs import kafka_config

    # Message keys are the primary key as a JSON array, e.g. [42].
    wanted = {json.dumps([i]) for i in ids["all"]}
    consumer = Consumer(
        kafka_config(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"dbus-demo-{run}",
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
    )
    consumer.subscribe([TOPICS])
    found: list[tuple[str, str, str, Any]] = []
    deadline = time.monotonic() + timeout
    # 2 inserts kept, 1 update, 1 insert + 1 delete of the cancelled order.
    while len(found) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        key = (msg.key() or b"").decode()
        if key not in wanted:
            continue
        event = from_kafka_message(msg.key(), msg.value(), msg.headers() or [])
        found.append((msg.topic(), key, event.get_type(), event.get_data()))
    consumer.close()
    if not found:
        raise click.ClickException(
            "no change arrived in Kafka; run again with --verbose to see the runtime's log"
        )
    return found


def _read_elasticsearch(url: str, ids: dict[str, Any], timeout: float) -> list[tuple[str, Any]]:
    from elasticsearch import Elasticsearch, NotFoundError

    es = Elasticsearch(url)
    kept = {str(i) for i in ids["kept"]}
    deadline = time.monotonic() + timeout
    docs: list[tuple[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            found = es.mget(index=INDEX, ids=sorted(kept | {str(ids["deleted"])}))
            docs = [(d["_id"], d["_source"]) for d in found["docs"] if d.get("found")]
        except NotFoundError:
            docs = []
        shipped = [s for _, s in docs if s.get("status") == "shipped"]
        if {d for d, _ in docs} == kept and shipped:
            break
        time.sleep(1.0)
    es.close()
    if not docs:
        raise click.ClickException(
            "no document arrived in Elasticsearch; run again with --verbose to see the "
            "runtime's log"
        )
    return docs
