"""The runtime's configuration: flags and local defaults, and the private config file."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from dbus_fn.coordination import ZooKeeperSettings
from dbus_fn.errors import ConfigError
from dbus_fn.events import BinlogPosition
from dbus_spark.cluster.member import HANDOFF_MARGIN, handoff_seconds
from dbus_spark.config.runtime import (
    ConfigFile,
    DeploymentFolder,
    RuntimeConfig,
    WriteFencing,
    load_config,
)
from dbus_spark.interfaces.settings import runtime_config

ORDERS = str(Path(__file__).resolve().parents[3] / "functions" / "orders")


def _config(**overrides: object) -> RuntimeConfig:
    options: dict[str, object] = {
        "sources": ("shop=mysql://dbus:secret@127.0.0.1:3306",),
        "deployments": (ORDERS,),
        "kafka": "127.0.0.1:9092",
        "elasticsearch": "http://127.0.0.1:9200",
        "checkpoint": "/tmp/ckpt",
    }
    options.update(overrides)
    return runtime_config(**options)  # type: ignore[arg-type]


def test_sources_subscribe_to_the_tables_of_every_deployment() -> None:
    config = _config()
    (binding,) = config.sources
    assert binding.spec.name == "shop"
    assert binding.spec.tables == ("shop.orders",)
    assert binding.start == "latest"


def test_the_deployments_that_ask_for_exactly_once_are_the_ones_written_once(
    tmp_path: Path,
) -> None:
    once = tmp_path / "once"
    once.mkdir()
    text = (Path(ORDERS) / "dbus.toml").read_text().replace('name = "orders"', 'name = "once"')
    (once / "dbus.toml").write_text(text + '\ndelivery = "exactly-once"\n')
    for module in Path(ORDERS).glob("*.py"):
        (once / module.name).write_text(module.read_text())
    config = _config(deployments=(ORDERS, str(once)))
    assert config.exactly_once_deployments == ("once",)
    assert config.exactly_once
    assert (config.writes_once("once"), config.writes_once("orders")) == (True, False)
    assert not _config().exactly_once


def test_each_source_gets_its_own_server_id() -> None:
    config = _config(sources=("a=mysql://u:p@127.0.0.1:1", "b=mysql://u:p@127.0.0.1:1"))
    ids = {b.replica_id for b in config.sources}
    assert len(ids) == 2


def test_the_config_file_round_trips_and_is_private(tmp_path: Path) -> None:
    config = _config()
    path = config.save(tmp_path / "runtime.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_config(path) == config


def test_the_config_file_is_parsed_again_only_when_it_changed(
    tmp_path: Path, config_reads: list[Path]
) -> None:
    path = _config().save(tmp_path / "runtime.json")
    file = ConfigFile(path)
    first = file.current()
    assert file.current() is first and config_reads == [path]
    _config(trigger=5.0).save(path)
    os.utime(path, ns=(1, 1))  # a new mtime, whatever the clock's resolution
    assert file.current().trigger_seconds == 5.0 and len(config_reads) == 2
    assert file.current().trigger_seconds == 5.0 and len(config_reads) == 2


def test_a_position_start_round_trips(tmp_path: Path) -> None:
    config = _config(start="latest")
    binding = config.sources[0]
    moved = RuntimeConfig.from_json(
        {
            **config.to_json(),
            "sources": [
                {
                    **config.to_json()["sources"][0],
                    "start": {"file": "mariadb-bin.000002", "pos": 1234, "gtid": "0-1-9"},
                }
            ],
        }
    )
    assert moved.sources[0].start == BinlogPosition("mariadb-bin.000002", 1234, "0-1-9")
    assert moved.sources[0].spec == binding.spec


@pytest.mark.parametrize("bad", ["mysql://u:secretpw@h:1", "=mysql://u:secretpw@h:1", "shop="])
def test_a_source_that_is_not_name_equals_dsn_is_refused_without_its_password(bad: str) -> None:
    with pytest.raises(ConfigError, match="NAME=DSN") as caught:
        _config(sources=(bad,))
    assert "secretpw" not in str(caught.value)


def test_a_source_of_several_servers_is_taken_with_every_server() -> None:
    config = _config(sources=("shop=mysql://u:secretpw@db1:3306,db2:3306",))
    spec = config.sources[0].spec
    assert spec.fails_over and [s.address for s in spec.servers] == ["db1:3306", "db2:3306"]


@pytest.mark.parametrize(
    "bad", ["mysql://u:secret=pw@h:1", "kafka://u:secret=pw@h:9092/t", "kafka://h:9092/t?a=b"]
)
def test_a_dsn_whose_password_holds_an_equals_sign_is_no_name(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not NAME=DSN") as caught:
        _config(sources=(bad,))
    assert "secret" not in str(caught.value) and "pw" not in str(caught.value)


def test_a_source_dsn_that_does_not_parse_names_the_flag_and_the_encoding() -> None:
    with pytest.raises(ConfigError) as caught:
        _config(sources=("shop=mysql://u:secret/pw@db1:3306",))
    message = str(caught.value)
    assert message.startswith("--source 'shop=mysql://u:***@db1:3306': invalid source DSN")
    assert "%2F for /" in message and "secret" not in message
    assert caught.value.setting == "source"  # DBUS_SOURCES is named when it came from there


def test_an_unreadable_config_file_names_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match=r"broken\.json"):
        load_config(broken)


def test_decode_shards_default_to_one_per_core_and_survive_the_config_file(tmp_path: Path) -> None:
    assert _config().decode_shards == 0  # resolved from Spark's cores when the query starts
    config = _config(decode_shards=3)
    assert load_config(config.save(tmp_path / "c.json")).decode_shards == 3


def test_the_open_read_defaults_to_two_seconds_and_survives_the_config_file(
    tmp_path: Path,
) -> None:
    assert _config().open_read_seconds == 2.0
    config = _config(open_read=7.5)
    assert load_config(config.save(tmp_path / "c.json")).open_read_seconds == 7.5
    assert load_config(_config(open_read=0.0).save(tmp_path / "d.json")).open_read_seconds == 0


def test_the_detach_bound_defaults_to_five_seconds_and_survives_the_config_file(
    tmp_path: Path,
) -> None:
    assert _config().detach_seconds == 5.0
    config = _config(detach_after=0.5)
    assert load_config(config.save(tmp_path / "c.json")).detach_seconds == 0.5
    assert load_config(_config(detach_after=0.0).save(tmp_path / "d.json")).detach_seconds == 0


def test_a_batch_reads_a_source_only_under_the_hold_it_was_planned_with(tmp_path: Path) -> None:
    """A micro-batch planned before a cluster moved a source away, or before this
    runtime took it up again, must not read it (see dbus_spark.planning.source)."""
    config = _config()
    (binding,) = config.sources
    held = replace(config, sources=(replace(binding, epoch=4, generation=2),))
    loaded = load_config(held.save(tmp_path / "c.json"))
    assert loaded.sources[0].generation == 2
    assert loaded.reads("shop", 4, 2)
    assert not loaded.reads("shop", 4, 1)  # taken up again since
    assert not loaded.reads("shop", 3, 2)  # another epoch
    assert not replace(loaded, sources=()).reads("shop", 4, 2)  # moved away


def test_a_members_write_fencing_survives_the_private_config_file(tmp_path: Path) -> None:
    """Worker processes learn from the config file how to confirm holds, digest
    credentials included: the file is private, and the credentials are not shown."""
    zookeeper = ZooKeeperSettings(
        hosts="127.0.0.1:2181", cluster="prod", auth="dbus:s3cret", session_timeout=6.0
    )
    fencing = WriteFencing(zookeeper, "rt-a", transaction_timeout=3.0, hold_seconds=1.5)
    config = replace(_config(), fencing=fencing)
    path = config.save(tmp_path / "c.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = load_config(path)
    assert loaded.fencing == fencing
    assert loaded.fencing is not None and loaded.fencing.zookeeper.auth == "dbus:s3cret"
    assert "s3cret" not in repr(loaded)
    assert load_config(_config().save(tmp_path / "alone.json")).fencing is None


def test_the_handoff_covers_the_hold_the_transaction_and_the_abort_scan() -> None:
    fencing = WriteFencing(ZooKeeperSettings(), "rt-a", transaction_timeout=2.0, hold_seconds=2.0)
    assert handoff_seconds(fencing, abort_scan=1.0) == 2.0 + 2.0 + 1.0 + HANDOFF_MARGIN
    assert handoff_seconds(fencing, abort_scan=10.0) == 2.0 + 2.0 + 10.0 + HANDOFF_MARGIN


def test_key_shards_read_with_the_server_ids_claimed_for_them(tmp_path: Path) -> None:
    (binding,) = _config().sources
    claimed = replace(binding, shard_replica_ids=(71, 72))
    loaded = load_config(replace(_config(), sources=(claimed,)).save(tmp_path / "c.json"))
    (again,) = loaded.sources
    assert [again.reader_replica_id(i) for i in range(3)] == [binding.replica_id, 71, 72]
    # Past the claimed ones (a query on more cores), and alone: derived, all distinct.
    derived = [binding.reader_replica_id(i) for i in range(4)]
    assert derived[0] == binding.replica_id
    assert derived[3] == again.reader_replica_id(3)
    assert len(set(derived)) == 4


def test_the_default_checkpoint_does_not_depend_on_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbus_spark.interfaces.settings import member_config

    monkeypatch.setenv("DBUS_HOME", str(tmp_path / "home"))
    made = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        config = member_config(
            kafka="127.0.0.1:9092", elasticsearch="http://127.0.0.1:9200", checkpoint=None
        )
        made.append(config.checkpoint_dir)
    assert made[0] == made[1] == str(tmp_path / "home" / "runtime" / "checkpoint")


def test_without_flags_the_runtime_reads_the_local_services_that_up_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbus_deploy.services import load_config
    from dbus_deploy.services._endpoints import write_endpoints

    monkeypatch.setenv("DBUS_HOME", str(tmp_path))
    monkeypatch.setenv("DBUS_MARIADB_PORT", "3317")
    monkeypatch.setenv("DBUS_KAFKA_PORT", "9096")
    write_endpoints(load_config(), ["mariadb", "kafka", "elasticsearch"])
    monkeypatch.delenv("DBUS_MARIADB_PORT")  # the shell that ran `up` is gone
    monkeypatch.delenv("DBUS_KAFKA_PORT")
    config = runtime_config(
        sources=(), deployments=(ORDERS,), kafka=None, elasticsearch=None, checkpoint=None
    )
    (binding,) = config.sources
    assert (binding.spec.name, binding.spec.dsn) == ("local", "mysql://dbus:dbus@127.0.0.1:3317")
    assert config.kafka_bootstrap == "127.0.0.1:9096"
    assert config.elasticsearch_url == "http://127.0.0.1:9200"
    assert config.checkpoint_dir == str(tmp_path / "runtime" / "checkpoint")


def test_one_folder_given_twice_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        _config(deployments=(ORDERS, ORDERS + "/"))
    assert str(caught.value) == f"--functions {ORDERS}/ is given twice; pass each folder once"


def test_two_folders_naming_one_deployment_are_refused_in_one_line(tmp_path: Path) -> None:
    import shutil

    copy = shutil.copytree(ORDERS, tmp_path / "orders-copy")
    with pytest.raises(ConfigError) as caught:
        _config(deployments=(ORDERS, str(copy)))
    assert str(caught.value) == (
        f"--functions {ORDERS} and {copy} both name deployment 'orders'; "
        "change name = in one of their dbus.toml files"
    )


def test_a_deployment_keeps_the_name_it_runs_under_through_the_config_file(
    tmp_path: Path,
) -> None:
    config = replace(
        _config(checkpoint=str(tmp_path / "ckpt")),
        deployments=(DeploymentFolder("orders-eu", ORDERS), DeploymentFolder("orders-us", ORDERS)),
    )
    loaded = load_config(config.save(tmp_path / "config.json"))
    assert loaded.deployments == config.deployments
    eu, us = (d.manifest() for d in loaded.deployments)
    assert (eu.name, us.name) == ("orders-eu", "orders-us")
    assert str(eu.dead_letter_route) == "kafka://orders.dead-letter"  # its dbus.toml names it


def test_a_config_file_of_paths_alone_runs_each_under_its_manifest_s_name(
    tmp_path: Path,
) -> None:
    import json

    path = _config(checkpoint=str(tmp_path / "ckpt")).save(tmp_path / "config.json")
    data = json.loads(path.read_text())
    data["deployments"] = [ORDERS]  # as a runtime of an earlier release wrote it
    path.write_text(json.dumps(data))
    (deployment,) = load_config(path).deployments
    assert (deployment.name, deployment.path) == ("orders", ORDERS)


def test_a_config_file_naming_a_folder_that_is_gone_still_reads(tmp_path: Path) -> None:
    import json

    path = _config(checkpoint=str(tmp_path / "ckpt")).save(tmp_path / "config.json")
    data = json.loads(path.read_text())
    data["deployments"] = [str(tmp_path / "gone")]
    path.write_text(json.dumps(data))
    (deployment,) = load_config(path).deployments
    assert (deployment.name, deployment.path) == ("gone", str(tmp_path / "gone"))
