"""`dbus fn deploy|list|describe|rollback|delete` against the real ZooKeeper."""

from __future__ import annotations

import zipfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from coordination_support import change_code, make_function, set_version
from kazoo.client import KazooClient
from support import free_port

from dbus_fn.coordination import FunctionStore, ZooKeeperSettings, build_bundle, materialize
from dbus_fn.registry import load_deployment

pytestmark = pytest.mark.integration


def test_deploy_registers_a_version_and_makes_it_active(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    result = dbus("fn", "deploy", str(folder))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Deployed cfn_demo 1.0.0 (sha256:")
    assert "2 files); active" in result.output
    store = FunctionStore(client, cluster)
    assert store.active_version("cfn_demo") == "1.0.0"
    bundle = store.bundle("cfn_demo", "1.0.0")
    names = zipfile.ZipFile(BytesIO(bundle.data)).namelist()
    assert names == ["cfn_demo.py", "dbus.toml"], "notes.txt is not part of the module"

    listed = dbus("fn", "list")
    assert listed.exit_code == 0
    assert listed.output == "cfn_demo  active=1.0.0  versions=1.0.0\n"


_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n"


def test_a_private_key_in_the_manifest_is_refused_and_nothing_is_stored(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    manifest = folder / "dbus.toml"
    manifest.write_text(
        manifest.read_text()
        + '[sinks.kafka]\nbootstrap_servers = "127.0.0.1:9092"\n'
        + f'"ssl.key.pem" = """{_KEY}"""\n'
    )
    _, before = client.get(cluster.layout.functions)
    refused = dbus("fn", "deploy", str(folder))
    assert refused.exit_code == 2, refused.output
    assert refused.output.count("\n") == 1 and "ssl.key.pem" in refused.output
    assert '"ssl.key.pem_env" = "VARIABLE"' in refused.output
    assert "MIIEvQ" not in refused.output and "PRIVATE KEY" not in refused.output
    assert client.get_children(cluster.layout.functions) == []
    assert client.get(cluster.layout.functions)[1].version == before.version
    # Named by the variable that holds it on the runtimes, it is deployed.
    manifest.write_text(manifest.read_text().split('"ssl.key.pem"')[0]
                        + '"ssl.key.pem_env" = "ORDERS_KAFKA_KEY"\n')  # fmt: skip
    assert dbus("fn", "deploy", str(folder)).exit_code == 0
    stored = FunctionStore(client, cluster).bundle("cfn_demo", "1.0.0")
    assert b"MIIEvQ" not in stored.data


def test_the_same_content_twice_is_a_no_op(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    assert dbus("fn", "deploy", str(folder)).exit_code == 0
    _, before = client.get(cluster.layout.functions)
    again = dbus("fn", "deploy", str(folder))
    assert again.exit_code == 0, again.output
    assert again.output.startswith("cfn_demo 1.0.0 already deployed (sha256:")
    assert again.output.endswith("nothing to do\n")
    _, after = client.get(cluster.layout.functions)
    assert after.version == before.version, "a no-op writes nothing"


def test_changed_content_under_the_same_version_is_refused(
    dbus: Any, cluster: ZooKeeperSettings, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    assert dbus("fn", "deploy", str(folder)).exit_code == 0
    change_code(folder, "a change")
    refused = dbus("fn", "deploy", str(folder))
    assert refused.exit_code == 1
    assert refused.output.count("\n") == 1
    assert "cfn_demo 1.0.0 is already deployed with other content" in refused.output
    assert "bump `version` in dbus.toml" in refused.output


def test_describe_rollback_and_delete(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    assert dbus("fn", "deploy", str(folder)).exit_code == 0
    set_version(folder, "1.1.0")
    change_code(folder, "1.1")
    second = dbus("fn", "deploy", str(folder))
    assert second.exit_code == 0
    assert second.output.rstrip().endswith("active (was 1.0.0)")

    described = dbus("fn", "describe", "cfn_demo")
    assert described.exit_code == 0
    lines = described.output.splitlines()
    assert lines[0] == "cfn_demo: active 1.1.0"
    assert lines[1].startswith("   1.0.0  sha256:")
    assert lines[2].startswith(" * 1.1.0  sha256:")
    assert "module cfn_demo.py  tables shop.orders" in lines[2]

    back = dbus("fn", "rollback", "cfn_demo", "--to", "1.0.0")
    assert back.exit_code == 0
    assert back.output == "cfn_demo: active 1.0.0 (was 1.1.0)\n"
    assert FunctionStore(client, cluster).active_version("cfn_demo") == "1.0.0"

    deleted = dbus("fn", "delete", "cfn_demo")
    assert deleted.exit_code == 0
    assert deleted.output == "Deleted cfn_demo (2 versions)\n"
    assert client.get_children(cluster.layout.functions) == []
    assert dbus("fn", "list").output.startswith("no functions deployed in cluster test;")


def test_deploy_under_another_name(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    result = dbus("fn", "deploy", str(folder), "--name", "orders-eu")
    assert result.exit_code == 0, result.output
    assert FunctionStore(client, cluster).names() == ["orders-eu"]


def test_bundles_are_deterministic_and_materialize_loadable(tmp_path: Path) -> None:
    folder = make_function(tmp_path / "fn")
    first = build_bundle(folder)
    (folder / "cfn_demo.py").touch()  # a new mtime changes nothing
    second = build_bundle(folder)
    assert first.data == second.data
    assert first.content_hash == second.content_hash
    change_code(folder, "x")
    assert build_bundle(folder).content_hash != first.content_hash

    unpacked = materialize(first, tmp_path / "cache")
    assert unpacked.name == first.content_hash.replace(":", "-")
    assert materialize(first, tmp_path / "cache") == unpacked
    deployment = load_deployment(unpacked)
    assert deployment.name == "cfn_demo"
    assert [f.name for f in deployment.functions] == ["cfn_demo:keep"]


def test_a_package_module_is_bundled_without_caches(tmp_path: Path) -> None:
    folder = tmp_path / "pkgfn"
    package = folder / "cfn_pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (package / "__init__.py").write_text("from .rules import keep\n")
    (package / "rules.py").write_text(
        "import dbus_fn as fn\n\n\n@fn.filter(tables='shop.orders')\n"
        "def keep(event) -> bool:\n    return True\n"
    )
    (folder / "dbus.toml").write_text(
        'name = "cfn-pkg"\nversion = "1"\nmodule = "./cfn_pkg"\ntables = ["shop.orders"]\n'
    )
    bundle = build_bundle(folder)
    assert bundle.files == ("cfn_pkg/__init__.py", "cfn_pkg/rules.py", "dbus.toml")
    assert load_deployment(materialize(bundle, tmp_path / "cache")).name == "cfn-pkg"


def test_deploying_a_folder_that_fails_validation(
    dbus: Any, cluster: ZooKeeperSettings, client: KazooClient, tmp_path: Path
) -> None:
    folder = make_function(tmp_path / "fn")
    (folder / "cfn_demo.py").write_text("import dbus_fn as fn\nraise RuntimeError('boom')\n")
    result = dbus("fn", "deploy", str(folder))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "importing the function module failed with RuntimeError: boom" in result.output
    assert client.get_children(cluster.layout.functions) == []


def test_a_dotted_module_name_cannot_be_bundled(dbus: Any, cluster: Any, tmp_path: Path) -> None:
    folder = make_function(tmp_path / "fn")
    manifest = folder / "dbus.toml"
    manifest.write_text(manifest.read_text().replace('"cfn_demo.py"', '"cfn_demo"'))
    result = dbus("fn", "deploy", str(folder))
    assert result.exit_code == 1
    assert "module = 'cfn_demo' in dbus.toml is a dotted name" in result.output
    assert 'write the path instead, e.g. module = "cfn_demo.py"' in result.output


def test_a_secret_in_the_manifest_is_refused(dbus: Any, cluster: Any, tmp_path: Path) -> None:
    folder = make_function(tmp_path / "fn")
    with (folder / "dbus.toml").open("a") as manifest:
        manifest.write('[sinks.kafka]\n"sasl.password" = "hunter2-secret"\n')
    result = dbus("fn", "deploy", str(folder))
    assert result.exit_code == 2
    assert "dbus.toml sinks.kafka.sasl.password looks like a secret" in result.output
    assert "hunter2" not in result.output


def test_rollback_to_an_unknown_version(dbus: Any, cluster: Any, tmp_path: Path) -> None:
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    result = dbus("fn", "rollback", "cfn_demo", "--to", "0.9.0")
    assert result.exit_code == 1
    assert result.output == (
        "Error: cfn_demo has no version '0.9.0'; known versions: 1.0.0 "
        "(see `dbus fn describe cfn_demo`)\n"
    )


def test_rollback_of_a_function_never_deployed_says_there_is_no_such_function(
    dbus: Any, cluster: Any, tmp_path: Path
) -> None:
    assert dbus("fn", "deploy", str(make_function(tmp_path / "fn"))).exit_code == 0
    result = dbus("fn", "rollback", "nope", "--to", "1.0.0")
    assert result.exit_code == 1
    assert result.output.startswith("Error: no function 'nope' in cluster 'test' (")
    assert result.output.endswith("; deployed: cfn_demo (see `dbus fn list`)\n")
    assert result.output.count("\n") == 1


def test_describe_and_delete_an_unknown_function(dbus: Any, cluster: Any) -> None:
    for args in (("describe", "nope"), ("delete", "nope"), ("rollback", "nope", "--to", "1")):
        result = dbus("fn", *args)
        assert result.exit_code == 1, args
        assert "no function 'nope' in cluster 'test'" in result.output or (
            "nope has no version '1'" in result.output
        )
        assert result.output.count("\n") == 1


def test_a_missing_cluster(dbus: Any, tmp_path: Path) -> None:
    result = dbus("fn", "deploy", str(make_function(tmp_path / "fn")))
    assert result.exit_code == 1
    assert result.output.startswith("Error: no cluster 'test' (/dbus/test on ZooKeeper 127.0.0.1:")
    assert result.output.rstrip().endswith("create it with `dbus cluster init --cluster test`")
    listed = dbus("fn", "list", "--cluster", "typo")
    assert listed.exit_code == 1
    assert "no cluster 'typo'" in listed.output


def test_a_bad_zookeeper_address(dbus: Any, tmp_path: Path) -> None:
    folder = make_function(tmp_path / "fn")
    port = free_port()
    result = dbus(
        "fn", "deploy", str(folder), "--zookeeper", f"127.0.0.1:{port}", "--zk-timeout", "1"
    )
    assert result.exit_code == 3
    assert result.output == (
        f"Error: cannot reach ZooKeeper at 127.0.0.1:{port} within 1 s; start it "
        "(`dbus services up zookeeper`) or give its address with --zookeeper or DBUS_ZOOKEEPER\n"
    )
    malformed = dbus("fn", "list", "--zookeeper", "zk.example:notaport")
    assert malformed.exit_code == 2
    assert "invalid ZooKeeper address 'zk.example:notaport'" in malformed.output


def test_help_names_the_environment_variables(dbus: Any) -> None:
    text = dbus("fn", "deploy", "--help").output
    for variable in ("DBUS_ZOOKEEPER", "DBUS_CLUSTER", "DBUS_ZK_AUTH", "DBUS_ZK_TIMEOUT"):
        assert variable in text
