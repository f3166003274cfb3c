from __future__ import annotations

from pathlib import Path

import pytest

from dbus_fn.errors import DestinationError, ManifestError
from dbus_fn.manifest import Destination, Manifest, load_manifest

GOOD = """
name = "orders"
version = "1.2.0"
module = "orders.py"
tables = ["shop.orders", "shop.order_*"]
sources = ["shop"]
default_route = "kafka://orders"
dead_letter_route = "kafka://orders.dlq"
timeout = 0.5

[sinks.kafka]
bootstrap_servers = "127.0.0.1:9092"
"""


def test_manifest_is_read_from_a_folder(tmp_path: Path) -> None:
    (tmp_path / "dbus.toml").write_text(GOOD)
    manifest = load_manifest(tmp_path)
    assert manifest.name == "orders" and manifest.version == "1.2.0"
    assert manifest.tables == ("shop.orders", "shop.order_*")
    assert manifest.default_route == Destination("kafka", "orders")
    assert manifest.dead_letter_route == Destination("kafka", "orders.dlq")
    assert manifest.timeout == 0.5
    assert manifest.sinks["kafka"]["bootstrap_servers"] == "127.0.0.1:9092"
    assert manifest.root == tmp_path.resolve()
    assert manifest.subscribes("shop.order_items") and not manifest.subscribes("shop.users")


def test_defaults() -> None:
    manifest = Manifest.from_mapping(
        {"name": "x", "version": "1", "module": "x", "tables": ["a.b"], "timeout": 0}
    )
    assert manifest.default_route is None
    assert manifest.dead_letter_route == Destination("kafka", "dbus.dead-letter.x")
    assert manifest.timeout is None


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ManifestError) as caught:
        Manifest.from_mapping(
            {
                "name": "Bad Name",
                "module": 3,
                "tables": ["orders"],
                "default_route": "http://x",
                "timeout": -1,
                "sinks": {"s3": {}},
                "colour": "blue",
            },
            origin="dbus.toml",
        )
    error = caught.value
    assert str(error).startswith("dbus.toml is invalid: ")
    assert "\n" not in str(error)
    problems = "\n".join(error.problems)
    for expected in (
        "unknown key(s) colour",
        "name: expected a lowercase name ([a-z][a-z0-9_-]*), got 'Bad Name'",
        'version: missing; expected a version such as "1.0.0"',
        "module: expected a module path",
        'tables: expected "db.table" globs such as "shop.*", got \'orders\'',
        "default_route: expected a destination kafka://topic or es://index, got 'http://x'",
        "timeout: expected seconds (a positive number, 0 for none), got -1",
        "sinks.s3: unknown sink; expected one of kafka, es",
    ):
        assert expected in problems
    assert len(error.problems) == 8


def test_route_needs_a_declared_sink() -> None:
    with pytest.raises(ManifestError, match=r"default_route: es://orders needs a \[sinks.es\]"):
        Manifest.from_mapping(
            {
                "name": "x",
                "version": "1",
                "module": "x",
                "tables": ["a.b"],
                "default_route": "es://orders",
                "dead_letter_route": "kafka://dlq",
                "sinks": {"kafka": {}},
            }
        )


def test_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no such file; expected a deployment manifest"):
        load_manifest(tmp_path)


def test_invalid_toml(tmp_path: Path) -> None:
    (tmp_path / "dbus.toml").write_text("name = \n")
    with pytest.raises(ManifestError, match="not valid TOML"):
        load_manifest(tmp_path / "dbus.toml")


@pytest.mark.parametrize(
    ("text", "scheme", "name"),
    [("kafka://orders.paid", "kafka", "orders.paid"), ("es://shop-orders", "es", "shop-orders")],
)
def test_destination_parse(text: str, scheme: str, name: str) -> None:
    destination = Destination.parse(text)
    assert (destination.scheme, destination.name) == (scheme, name)
    assert str(destination) == text
    assert Destination.parse(destination) is destination


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("http://x", "unknown scheme 'http'"),
        ("orders", "expected a destination kafka://topic or es://index, got 'orders'"),
        ("kafka://", "expected a Kafka topic name"),
        ("kafka://a b", "expected a Kafka topic name"),
        ("es://Orders", "expected an Elasticsearch index name"),
        ("es://_x", "expected an Elasticsearch index name"),
    ],
)
def test_bad_destinations(text: str, message: str) -> None:
    with pytest.raises(DestinationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Destination.parse(text)


def test_initial_defaults_to_a_snapshot_and_can_be_turned_off() -> None:
    base = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    assert Manifest.from_mapping(base).initial == "snapshot"
    assert Manifest.from_mapping({**base, "initial": "none"}).initial == "none"


def test_an_unknown_initial_is_refused_naming_the_choices() -> None:
    base = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    with pytest.raises(ManifestError) as error:
        Manifest.from_mapping({**base, "initial": "everything"})
    assert "initial: expected 'snapshot' or 'none', got 'everything'" in str(error.value)
