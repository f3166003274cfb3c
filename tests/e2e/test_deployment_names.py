"""A deployment is the name it is deployed under, all real: one folder deployed to a
cluster as ``orders-eu`` and ``orders-us``, and another folder whose manifest is also
named ``orders``, deployed as ``orders-theirs`` with an Elasticsearch of its own (a
proxy in front of the real node, cut at first). Each runs as a deployment of its own
in one cluster member: each writes every change once, ``orders-theirs`` writes only
through its own sink, and pausing one name pauses that one alone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from e2e_support import Scratch, member_env
from support import es_count, kafka_count, route_code, wait_for

from dbus_fn.cli import cli
from dbus_fn.coordination import ZooKeeperSettings
from dbus_spark.cluster.member import ClusterMember
from dbus_spark.interfaces.settings import member_config
from dbus_spark.spark.job import start_member, stop
from dbus_spark.state.checkpoint import last_config_path
from dbus_spark.state.progress import ProgressBook

pytestmark = pytest.mark.e2e

CLUSTER = "names"


@pytest.fixture
def dbus(scratch: Scratch, zk_root: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in member_env(scratch, zk_root, CLUSTER, "NAMES_SHOP_DSN").items():
        monkeypatch.setenv(name, value)

    def run(*args: str) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    return run


@pytest.fixture
def member(spark: Any, scratch: Scratch, zk_root: str) -> Iterator[ClusterMember]:
    services = scratch.services
    settings = ZooKeeperSettings(
        hosts=f"{services.zookeeper.hosts}{zk_root}", cluster=CLUSTER, session_timeout=6.0
    )
    base = member_config(
        kafka=services.kafka.bootstrap_servers,
        elasticsearch=services.elasticsearch.url,
        checkpoint=str(scratch.tmp_path / "checkpoint"),
        detach_after=2.0,
    )
    joined = ClusterMember(settings, "rt-names", base, last_config_path(base.checkpoint_dir))
    query = start_member(joined, spark=spark)
    try:
        yield joined
    finally:
        stop(query, spark)
        joined.stop()


def _insert(scratch: Scratch, ids: range) -> None:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO orders VALUES (%s, %s)", [(i, i * 3) for i in ids])


def test_one_folder_under_two_names_and_a_namesake_with_its_own_sink_stay_apart(
    scratch: Scratch, dbus: Any, es_proxy: Any, request: pytest.FixtureRequest
) -> None:
    with scratch.fresh_database.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    table, topic, index = (f"{scratch.fresh_database.name}.orders", scratch.kafka_topic,
                           scratch.es_index)  # fmt: skip
    kafka, es = scratch.services.kafka.bootstrap_servers, scratch.services.elasticsearch.url
    own = f"http://127.0.0.1:{es_proxy.port}"
    shared = scratch.function_folder("orders", route_code(table, f"kafka://{topic}"), [table],
                                     initial="none")  # fmt: skip
    theirs = scratch.function_folder("theirs", route_code(table, f"es://{index}"), [table],
                                     dead_letter=f"es://{index}-dead", initial="none")  # fmt: skip
    for folder, extra in ((shared, ""), (theirs, f'[sinks.es]\nhosts = "{own}"\n')):
        manifest = folder / "dbus.toml"
        # Both manifests name deployment orders; each reads the cluster's source.
        text = manifest.read_text().replace('name = "theirs"', 'name = "orders"')
        manifest.write_text(text + 'sources = ["shop"]\n' + extra)
    dbus("cluster", "init")
    dbus("cluster", "source", "add", "shop", "--dsn-env", "NAMES_SHOP_DSN", "--table", table)
    dbus("fn", "deploy", str(shared), "--name", "orders-eu")
    dbus("fn", "deploy", str(shared), "--name", "orders-us")
    dbus("fn", "deploy", str(theirs), "--name", "orders-theirs")
    es_proxy.cut()  # orders-theirs' own Elasticsearch is away from the start
    request.getfixturevalue("member")
    book = ProgressBook(str(scratch.tmp_path / "checkpoint"))

    _insert(scratch, range(1, 11))
    # Once per deployment of the shared folder: twice in all, not once per namesake.
    assert kafka_count(kafka, topic, expected=20, within=120) == 20
    wait_for(lambda: "orders-theirs" in book.load().get("shop", {}), 60,
             "orders-theirs detached while its own Elasticsearch is cut", every=0.5)  # fmt: skip
    detached = book.load()["shop"]
    assert set(detached) == {"orders-theirs"}, detached
    assert own in detached["orders-theirs"].reason, detached["orders-theirs"].reason
    # Its rows went nowhere else: not to the runtime's Elasticsearch behind the proxy.
    assert es_count(es, index) == 0

    said = dbus("fn", "pause", "orders-eu")
    assert "orders-eu" in said, said
    _insert(scratch, range(11, 21))
    assert kafka_count(kafka, topic, expected=30, within=120) == 30  # orders-us alone
    assert book.load()["shop"]["orders-eu"].paused
    dbus("fn", "resume", "orders-eu")
    assert kafka_count(kafka, topic, expected=40, within=120) == 40

    es_proxy.restore()
    wait_for(lambda: es_count(es, index) == 20, 120, "orders-theirs caught up", every=1.0)
