"""`dbus cluster init|status|source` against the real ZooKeeper."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from coordination_support import make_function
from kazoo.client import KazooClient
from support import wait_until

from dbus_fn.coordination import Coordinator, ZooKeeperSettings, cluster_incarnation
from dbus_fn.events import BinlogPosition

pytestmark = pytest.mark.integration


def test_init_creates_the_cluster_once(dbus: Any, settings: ZooKeeperSettings) -> None:
    first = dbus("cluster", "init")
    assert first.exit_code == 0
    assert first.output == f"Created cluster 'test' (/dbus/test on ZooKeeper {settings.hosts})\n"
    again = dbus("cluster", "init")
    assert again.output.startswith("Found existing cluster 'test'")


def test_a_cluster_made_again_under_its_name_is_another_making_of_it(
    dbus: Any, settings: ZooKeeperSettings, client: KazooClient
) -> None:
    """Its members scope their exactly-once lanes by it: a cluster made again under its
    name (its tree deleted, or on a new ZooKeeper) never takes the marks of the one
    before, which are orders of another history of its sources' binlogs."""
    assert dbus("cluster", "init").exit_code == 0
    first = cluster_incarnation(client, settings)
    assert dbus("cluster", "init").output.startswith("Found existing")
    assert cluster_incarnation(client, settings) == first
    client.delete(settings.layout.root, recursive=True)
    assert dbus("cluster", "init").output.startswith("Created")
    again = cluster_incarnation(client, settings)
    assert len(first) == len(again) == 32 and again != first
    # A root made before roots had one: its members keep the lanes they had.
    root = json.loads(client.get(settings.layout.root)[0])
    del root["id"]
    client.set(settings.layout.root, json.dumps(root).encode())
    assert cluster_incarnation(client, settings) == ""


def test_init_makes_the_chroot_its_zookeeper_address_names(
    dbus: Any, settings: ZooKeeperSettings
) -> None:
    hosts = f"{settings.hosts}/team-a/dbus"  # neither folder exists yet
    missing = dbus("cluster", "status", "--zookeeper", hosts)
    assert missing.exit_code != 0 and "create it with `dbus cluster init" in missing.output
    made = dbus("cluster", "init", "--zookeeper", hosts)
    assert made.exit_code == 0, made.output
    assert made.output == f"Created cluster 'test' (/dbus/test on ZooKeeper {hosts})\n"
    assert dbus("cluster", "status", "--zookeeper", hosts).exit_code == 0


def test_sources_are_added_listed_and_removed(dbus: Any, cluster: ZooKeeperSettings) -> None:
    assert dbus("cluster", "source", "list").output.startswith("no sources; add one with")
    added = dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN", "--table", "shop.*")
    assert added.exit_code == 0
    assert added.output == "Registered source shop (DSN from env:SHOP_DSN)\n"
    twice = dbus("cluster", "source", "add", "shop", "--dsn-env", "OTHER")
    assert twice.exit_code == 1
    assert "source 'shop' is already registered" in twice.output
    assert "give --replace to change it" in twice.output
    replaced = dbus(
        "cluster", "source", "add", "shop", "--dsn-file", "/etc/dbus/shop.dsn", "--replace"
    )
    assert replaced.output == "Replaced source shop (DSN from file:/etc/dbus/shop.dsn)\n"
    assert dbus("cluster", "source", "list").output == (
        "shop  dsn=file:/etc/dbus/shop.dsn  tables=*\n"
    )
    assert dbus("cluster", "source", "remove", "shop").output == "Removed source shop\n"
    gone = dbus("cluster", "source", "remove", "shop")
    assert gone.exit_code == 1
    assert "no source 'shop'" in gone.output


def test_replacing_a_source_a_runtime_reads_says_it_applies_once_that_runtime_restarts(
    dbus: Any, cluster: ZooKeeperSettings
) -> None:
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    unread = dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN", "--replace")
    assert unread.output == "Replaced source shop (DSN from env:SHOP_DSN)\n"
    with Coordinator.from_settings(cluster, "rt-a", 2) as runtime:
        wait_until(lambda: "shop" in runtime.owned_sources(), 10, "shop owned")
        replaced = dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN",
                        "--table", "shop.*", "--replace")  # fmt: skip
    assert replaced.exit_code == 0, replaced.output
    assert replaced.output.splitlines() == [
        "Replaced source shop (DSN from env:SHOP_DSN)",
        "runtime rt-a reads shop now and goes on with the tables and DSN it took until it "
        "takes the source again: restart it to apply the change",
    ]


def test_source_add_needs_exactly_one_reference(dbus: Any, cluster: ZooKeeperSettings) -> None:
    neither = dbus("cluster", "source", "add", "shop")
    assert neither.exit_code == 2
    assert "expected exactly one of --dsn-env VAR or --dsn-file PATH" in neither.output
    relative = dbus("cluster", "source", "add", "shop", "--dsn-file", "shop.dsn")
    assert relative.exit_code == 2
    assert "--dsn-file expects an absolute path" in relative.output


def test_a_source_registered_to_keep_helper_tables_is_listed_so(
    dbus: Any, cluster: ZooKeeperSettings
) -> None:
    added = dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN",
                 "--keep-helper-tables")  # fmt: skip
    assert added.exit_code == 0, added.output
    plain = dbus("cluster", "source", "add", "shop2", "--dsn-env", "SHOP_DSN")
    assert plain.exit_code == 0, plain.output
    assert dbus("cluster", "source", "list").output == (
        "shop  dsn=env:SHOP_DSN  tables=*  keep-helper-tables\nshop2  dsn=env:SHOP_DSN  tables=*\n"
    )


def test_status_shows_runtimes_leader_assignments_positions_and_functions(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    runtime = Coordinator.from_settings(cluster, "rt-a", 2)
    runtime.api = "http://127.0.0.1:9464"  # where `runtime start` serves its dashboard
    with runtime:
        wait_until(lambda: "shop" in runtime.owned_sources(), 10, "shop owned")
        epoch = runtime.owned_sources()["shop"]
        runtime.commit_position("shop", BinlogPosition("binlog.000003", 1234, "0-1-9"), epoch)
        result = dbus("cluster", "status")
        as_json = json.loads(dbus("cluster", "status", "--json").output)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == "cluster test (/dbus/test)"
    assert lines[1] == f"leader rt-a  term 1  assignment epoch {epoch}"
    assert lines[2] == "runtimes (1):"
    assert lines[3].startswith("  rt-a  host=") and "capacity=2" in lines[3]
    assert lines[3].endswith(" api=http://127.0.0.1:9464")
    assert lines[4:] == [
        "sources (1):",
        f"  shop  rt-a epoch {epoch}  position binlog.000003:1234@0-1-9",
        "functions (1):",
        "  cfn_demo 1.0.0",
    ]
    assert as_json["leader"] == "rt-a"
    assert as_json["runtimes"][0]["api"] == "http://127.0.0.1:9464"
    assert as_json["sources"][0]["position"] == {
        "file": "binlog.000003",
        "pos": 1234,
        "gtid": "0-1-9",
    }
    assert as_json["functions"] == {"cfn_demo": "1.0.0"}

    after = dbus("cluster", "status").output.splitlines()
    assert after[1].startswith("leader (none)")
    assert "runtimes (0):" in after
    assert f"  shop  rt-a epoch {epoch} (not running)  position binlog.000003:1234@0-1-9" in after


def test_status_of_a_missing_cluster(dbus: Any, settings: ZooKeeperSettings) -> None:
    result = dbus("cluster", "status", "--cluster", "nope")
    assert result.exit_code == 1
    assert result.output.startswith("Error: no cluster 'nope'")


HISTORY = {
    "tasks": [
        {"deployment": "cfn_demo", "table": "shop.orders", "key": ["id"], "splittable": True,
         "done": [[[["i", 300]], {}, {}], [[["i", 600]], {}, {}]], "rows": 600,
         "estimated_rows": 1000, "finished": 0.0},
        {"deployment": "cfn_demo", "table": "shop.items", "key": ["id"], "splittable": True,
         "done": [[None, {}, {}]], "rows": 40, "finished": 1.0},
    ],
    "considered": {"cfn_demo": ["shop.*"]},
    "replays": [{"deployment": "cfn_demo", "start": {}, "end": {}, "rows": 12}],
}  # fmt: skip


def test_status_shows_the_history_committed_with_a_position(
    dbus: Any, cluster: ZooKeeperSettings
) -> None:
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    with Coordinator.from_settings(cluster, "rt-a") as runtime:
        wait_until(lambda: "shop" in runtime.owned_sources(), 10, "shop owned")
        epoch = runtime.owned_sources()["shop"]
        position = BinlogPosition("binlog.000003", 1234)
        runtime.commit_position("shop", position, epoch, HISTORY)
        # A commit without history keeps the last one given (a held commit does too).
        runtime.commit_position("shop", BinlogPosition("binlog.000003", 2000), epoch)
        committed = runtime.committed_position("shop")
        lines = dbus("cluster", "status").output.splitlines()
    assert committed is not None and committed.history == HISTORY
    at = lines.index(f"  shop  rt-a epoch {epoch}  position binlog.000003:2000")
    assert lines[at + 1 : at + 4] == [
        "    history cfn_demo:replay: replay running, 12 rows",
        "    history cfn_demo:shop.items: bootstrap done, 40 rows in 1 chunks",
        "    history cfn_demo:shop.orders: bootstrap reading, 600/~1000 rows in 2 chunks",
    ]


def test_a_history_command_to_a_cluster_names_what_is_missing(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    for unknown in (dbus("fn", "backfill", "nope"), dbus("fn", "pause", "nope")):
        assert unknown.exit_code == 2
        assert "no deployment 'nope' is deployed in cluster test (deployed: none)" in (
            unknown.output
        )
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    # Deployed, but no runtime owns a source to read it from.
    for nobody in (
        dbus("fn", "replay", "cfn_demo", "--from", "2026-11-25T08:00:00"),
        dbus("fn", "resume", "cfn_demo"),
    ):
        assert nobody.exit_code == 3
        assert "no runtime of cluster test owns a source" in nobody.output
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    assert dbus("cluster", "source", "add", "shop2", "--dsn-env", "SHOP_DSN").exit_code == 0
    with Coordinator.from_settings(cluster, "rt-a") as runtime:
        wait_until(lambda: len(runtime.owned_sources()) == 2, 10, "both sources owned")
        position = dbus("fn", "replay", "cfn_demo", "--from", "binlog.000001:4")
        # The owner is a bare coordinator: nobody takes the request.
        silent = dbus("fn", "backfill", "cfn_demo", "--table", "shop.orders")
    assert position.exit_code == 2
    assert "--from binlog.000001:4 is a position of one source; name it with --source" in (
        position.output
    )
    assert silent.exit_code == 3
    assert "no runtime of cluster test answered within 30s for shop, shop2" in silent.output


def test_status_and_fn_list_show_deployments_not_with_a_source_s_stream(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    assert dbus("cluster", "source", "add", "shop", "--dsn-env", "SHOP_DSN").exit_code == 0
    pace = {
        "cfn_demo": {"position": {"file": "binlog.000003", "pos": 900}, "state": "detached",
                     "reason": "Elasticsearch at http://es:9200 did not take 3 action(s)"},
        "other": {"position": {"file": "binlog.000003", "pos": 700}, "state": "paused",
                  "reason": "paused"},
    }  # fmt: skip
    with Coordinator.from_settings(cluster, "rt-a") as runtime:
        wait_until(lambda: "shop" in runtime.owned_sources(), 10, "shop owned")
        epoch = runtime.owned_sources()["shop"]
        runtime.commit_position("shop", BinlogPosition("binlog.000003", 1234), epoch,
                                {"tasks": [], "pace": pace})  # fmt: skip
        lines = dbus("cluster", "status").output.splitlines()
        listed = dbus("fn", "list").output
    at = lines.index(f"  shop  rt-a epoch {epoch}  position binlog.000003:1234")
    assert lines[at + 1 : at + 3] == [
        "    pace cfn_demo: detached at binlog.000003:900 (Elasticsearch at "
        "http://es:9200 did not take 3 action(s))",
        "    pace other: paused at binlog.000003:700",
    ]
    assert listed == (
        "cfn_demo  active=1.0.0  versions=1.0.0  [shop: detached at binlog.000003:900 "
        "(Elasticsearch at http://es:9200 did not take 3 action(s))]\n"
    )

