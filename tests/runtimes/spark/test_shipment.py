"""What each Spark task carries of the driver's: the configuration and the deployment
folders, zipped once per change, unpacked once per executor, never by path."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dbus_fn.bundle import build_bundle, unpack, zip_files
from dbus_fn.capture import SourceSpec
from dbus_fn.errors import BundleError
from dbus_spark.config.runtime import DeploymentFolder, RuntimeConfig, SourceBinding
from dbus_spark.stage import shipment as shipping
from dbus_spark.stage.shipment import Shipper, unpacked


def _config(tmp_path: Path, *folders: Path) -> RuntimeConfig:
    source = SourceBinding(SourceSpec("shop", "mysql://u:p@127.0.0.1:3306", ("*.*",)), 7)
    deployed = tuple(DeploymentFolder(f.name, str(f)) for f in folders)
    return RuntimeConfig(sources=(source,), deployments=deployed,
                         kafka_bootstrap="127.0.0.1:9092",
                         elasticsearch_url="http://127.0.0.1:9200",
                         checkpoint_dir=str(tmp_path / "checkpoint"))  # fmt: skip


@pytest.fixture
def orders(function_folder: Any) -> Path:
    folder: Path = function_folder(
        "orders",
        """
        import dbus_fn as fn

        @fn.filter(tables="shop.orders")
        def keep(event: fn.RowChange) -> bool:
            return True
        """,
        ["shop.orders"],
    )
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "orders.cpython-311.pyc").write_bytes(b"stale")
    (folder / ".hidden").write_text("not shipped")
    return folder


def test_a_shipment_is_made_once_until_a_file_changes(tmp_path: Path, orders: Path) -> None:
    shipper = Shipper()
    first = shipper.ship(_config(tmp_path, orders))
    assert shipper.ship(_config(tmp_path, orders)) is first
    (folder,) = first.folders
    assert first.config.count(folder.content_hash) == 1 and str(orders) not in first.config
    module = orders / "orders.py"
    module.write_text(module.read_text() + "\n# changed\n")
    os.utime(module, ns=(1, 1))  # a new mtime, whatever the clock's resolution
    changed = shipper.ship(_config(tmp_path, orders))
    assert changed.key != first.key
    assert changed.folders[0].content_hash != folder.content_hash


def test_a_changed_configuration_is_a_new_shipment(tmp_path: Path, orders: Path) -> None:
    shipper = Shipper()
    first = shipper.ship(_config(tmp_path, orders))
    changed = shipper.ship(replace(_config(tmp_path, orders), trigger_seconds=5.0))
    assert changed.key != first.key
    assert json.loads(changed.config)["trigger_seconds"] == 5.0
    assert changed.folders == first.folders
    assert shipper.ship(_config(tmp_path, orders)).key == first.key


def test_an_executor_unpacks_the_folders_into_its_own_cache(
    tmp_path: Path, orders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipment = pickle.loads(pickle.dumps(Shipper().ship(_config(tmp_path, orders))))
    monkeypatch.setattr(shipping.tempfile, "gettempdir", lambda: str(tmp_path / "executor"))
    config = unpacked(shipment)
    (deployment,) = config.deployments
    here = Path(deployment.path)
    assert deployment.name == orders.name
    assert here.parent == tmp_path / "executor" / f"dbus-bundles-{os.getuid()}"
    assert sorted(p.name for p in here.iterdir()) == ["dbus.toml", "orders.py"]
    assert (here / "orders.py").read_text() == (orders / "orders.py").read_text()
    assert config.sources[0].spec.dsn == "mysql://u:p@127.0.0.1:3306"
    assert config.checkpoint_dir == str(tmp_path / "checkpoint")


def test_a_folder_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BundleError) as caught:
        Shipper().ship(_config(tmp_path, tmp_path / "gone"))
    assert str(caught.value) == f"the deployment folder {tmp_path / 'gone'} is missing or empty"


def test_a_folder_too_big_to_ship_names_the_fix(
    tmp_path: Path, orders: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shipping, "MAX_FOLDER_BYTES", 100)
    with pytest.raises(BundleError) as caught:
        Shipper().ship(_config(tmp_path, orders))
    assert "keep data files out of it" in str(caught.value)


def test_a_shipped_folder_is_zipped_as_its_bundle_is(tmp_path: Path, orders: Path) -> None:
    (folder,) = Shipper().ship(_config(tmp_path, orders)).folders
    bundle = build_bundle(orders)
    assert folder.content_hash == bundle.content_hash
    assert unpack(folder.data) == unpack(bundle.data)
    assert _entries(folder.data) == _entries(bundle.data)
    assert folder.data == zip_files(unpack(bundle.data), compresslevel=6)


def _entries(data: bytes) -> list[tuple[str, tuple[int, ...], int, int]]:
    infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    return [(i.filename, i.date_time, i.external_attr, i.compress_type) for i in infos]
