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


def test_a_deployment_captures_the_sources_it_names_or_every_one_when_it_names_none() -> None:
    fields = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    named = Manifest.from_mapping({**fields, "sources": ["shop", "billing"]})
    assert named.captures("shop") and named.captures("billing")
    assert not named.captures("stock")
    every = Manifest.from_mapping(fields)
    assert every.captures("shop") and every.captures("stock")


def test_deployed_under_another_name_it_is_that_name_and_its_dead_letters_follow() -> None:
    manifest = Manifest.from_mapping(
        {"name": "x", "version": "1", "module": "x", "tables": ["a.b"], "timeout": 0}
    )
    eu = manifest.deployed_as("x-eu")
    assert (eu.name, eu.version, eu.tables) == ("x-eu", "1", ("a.b",))
    assert eu.dead_letter_route == Destination("kafka", "dbus.dead-letter.x-eu")
    assert manifest.deployed_as("x") is manifest


def test_deployed_under_another_name_a_dead_letter_route_of_its_own_stays(
    tmp_path: Path,
) -> None:
    (tmp_path / "dbus.toml").write_text(GOOD)
    eu = load_manifest(tmp_path).deployed_as("orders-eu")
    assert eu.name == "orders-eu"
    assert eu.dead_letter_route == Destination("kafka", "orders.dlq")
    assert eu.default_route == Destination("kafka", "orders")


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
        "name: expected a lowercase name ([a-z][a-z0-9_-]*, at most 63 characters), "
        "got 'Bad Name'",
        'version: missing; expected a version such as "1.0.0"',
        "module: expected a module path",
        'tables: expected "db.table" globs such as "shop.orders" or "shop.*", got \'orders\'',
        "default_route: expected a destination kafka://topic or es://index, got 'http://x'",
        "timeout: expected seconds (a positive number up to 3600, 0 for none), got -1",
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


def test_delivery_defaults_to_at_least_once_and_can_be_exactly_once() -> None:
    base = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    assert Manifest.from_mapping(base).delivery == "at-least-once"
    assert Manifest.from_mapping({**base, "delivery": "exactly-once"}).delivery == "exactly-once"


@pytest.mark.parametrize("delivery", ["exactly_once", "at-most-once", 1, True])
def test_an_unknown_delivery_is_refused_in_one_line_naming_the_choices(delivery: object) -> None:
    base = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    with pytest.raises(ManifestError) as error:
        Manifest.from_mapping({**base, "delivery": delivery}, origin="dbus.toml")
    assert "\n" not in str(error.value)
    assert (
        f"delivery: expected 'at-least-once' or 'exactly-once', got {delivery!r}"
        in str(error.value)
    )


_BASE = {"name": "x", "version": "1", "module": "x.py", "tables": ["a.b"]}


def _problems(**changes: object) -> str:
    with pytest.raises(ManifestError) as caught:
        Manifest.from_mapping({**_BASE, **changes}, origin="dbus.toml")
    assert "\n" not in str(caught.value)
    return "\n".join(caught.value.problems)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"bootstrap_servers": 9092},
         "sinks.kafka.bootstrap_servers: expected a string of host:port pairs such as "
         '"127.0.0.1:9092" or "k1:9092,k2:9092", got the number 9092'),
        ({"bootstrap_servers": "localhost"}, "expected a string of host:port pairs"),
        ({"bootstrap.servers": ["k1:9092"]}, "got a list"),
        ({"acks": {"all": True}}, "sinks.kafka.acks: expected a string, number or boolean"),
    ],
)  # fmt: skip
def test_sink_options_are_type_checked(options: dict[str, object], says: str) -> None:
    assert says in _problems(sinks={"kafka": options})


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"hosts": 9200}, "sinks.es.hosts: expected an http(s) URL"),
        ({"hosts": ["127.0.0.1:9200"]}, "sinks.es.hosts: expected an http(s) URL"),
        ({"url": ""}, "sinks.es.url: expected an http(s) URL"),
    ],
)
def test_elasticsearch_addresses_are_urls(options: dict[str, object], says: str) -> None:
    assert says in _problems(sinks={"es": options}, default_route="es://orders")


def test_well_typed_sink_options_pass() -> None:
    manifest = Manifest.from_mapping(
        {
            **_BASE,
            "default_route": "es://orders",
            "sinks": {
                "kafka": {"bootstrap_servers": "k1:9092, [::1]:9093", "linger.ms": 5},
                "es": {"hosts": ["http://127.0.0.1:9200", "https://es.example:443/"]},
            },
        }
    )
    assert manifest.sinks["kafka"]["linger.ms"] == 5


def test_a_name_too_long_says_the_limit_not_lowercase() -> None:
    problems = _problems(name="a" * 300)
    assert "name: expected a name of at most 63 characters, got one of 300" in problems
    assert "a" * 64 not in problems
    assert Manifest.from_mapping({**_BASE, "name": "a" * 63}).name == "a" * 63


@pytest.mark.parametrize("key", ["sources", "tables"])
def test_a_list_written_as_a_string_is_refused(key: str) -> None:
    problems = _problems(**{key: "shop.orders"})
    assert f'{key}: expected a list of' in problems
    assert f'write {key} = ["shop.orders"]' in problems


@pytest.mark.parametrize("timeout", [1e9, 3600.5, float("inf")])
def test_a_time_budget_beyond_an_hour_is_refused(timeout: float) -> None:
    problems = _problems(timeout=timeout)
    assert "timeout: expected seconds (a positive number up to 3600, 0 for none)" in problems


def test_a_time_budget_of_an_hour_passes() -> None:
    assert Manifest.from_mapping({**_BASE, "timeout": 3600}).timeout == 3600.0


@pytest.mark.parametrize("glob", ["shop.[orders", "shop.ord[ers", "[shop.orders"])
def test_a_table_glob_with_an_unclosed_bracket_is_refused(glob: str) -> None:
    problems = _problems(tables=["shop.*", glob])
    assert f"tables: {glob!r} has an unclosed '['" in problems
    assert "a literal [ as [[]" in problems


@pytest.mark.parametrize("glob", ["shop.[ab]*", "shop.[!a]x", "shop.a[[]b"])
def test_closed_bracket_sets_pass(glob: str) -> None:
    assert Manifest.from_mapping({**_BASE, "tables": [glob]}).tables == (glob,)


def test_a_python_module_given_for_the_manifest_says_to_pass_the_folder(tmp_path: Path) -> None:
    module = tmp_path / "orders.py"
    module.write_text("import dbus_fn as fn\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(module)
    assert str(caught.value) == (
        f"{module}: is a Python module, expected a deployment folder or its dbus.toml; "
        "pass the folder whose dbus.toml names it in module ="
    )
    other = tmp_path / "events.jsonl"
    other.write_text('{"id": 1}\n')
    with pytest.raises(ManifestError, match=r"; expected a deployment folder or its dbus\.toml$"):
        load_manifest(other)


@pytest.mark.parametrize(
    ("scheme", "options", "says"),
    [
        ("kafka", {"sasl_password_env": "export X=1"},
         'sinks.kafka.sasl_password_env: expected the name of an environment variable of '
         'the runtime such as "ORDERS_KAFKA_PASSWORD", got a str'),
        ("kafka", {"sasl_password_env": 7}, "got the number 7"),
        ("kafka", {"acks": "1"},
         "sinks.kafka.acks: dbus sets acks itself (its delivery keeps each key's order and "
         "loses nothing only with it); remove the option"),
        ("kafka", {"enable_idempotence": False}, "dbus sets enable.idempotence itself"),
        ("kafka", {"transactional.id": "x"}, "dbus sets transactional.id itself"),
        ("es", {"hosts": "http://e:9200", "compression": True},
         "sinks.es.compression: unknown option; expected one of hosts, url, username, "
         "password_env, password_file, api_key_env, api_key_file, verify_certs, ca_certs, "
         "request_timeout"),
        ("es", {"hosts": "http://e:9200", "token_env": "ES_TOKEN"},
         "sinks.es.token_env: unknown option"),
        ("kafka", {"sasl_password_file": "secrets/orders"},
         "sinks.kafka.sasl_password_file: expected the absolute path of a file on the "
         'runtime\'s hosts such as "/run/secrets/orders-kafka-password", got a str'),
        ("es", {"hosts": "http://e:9200", "token_file": "/run/secrets/es"},
         "sinks.es.token_file: unknown option"),
    ],
)  # fmt: skip
def test_a_deployment_s_own_cluster_options_are_checked(
    scheme: str, options: dict[str, object], says: str
) -> None:
    route = "es://orders" if scheme == "es" else "kafka://orders"
    assert says in _problems(sinks={scheme: options}, default_route=route)


def test_credentials_are_named_by_environment_variables_and_pass_the_secret_check() -> None:
    from dbus_fn.bundle import check_no_secrets
    from dbus_fn.errors import SecretLeakError

    sinks = {
        "kafka": {"bootstrap_servers": "k1:9092", "security_protocol": "SASL_SSL",
                  "sasl_username": "orders", "sasl_password_env": "ORDERS_KAFKA_PASSWORD"},
        "es": {"hosts": "https://es:9200", "username": "orders", "password_env": "ORDERS_ES"},
    }  # fmt: skip
    manifest = Manifest.from_mapping({**_BASE, "sinks": sinks})
    assert manifest.sinks["kafka"]["sasl_password_env"] == "ORDERS_KAFKA_PASSWORD"
    check_no_secrets(sinks, "dbus.toml sinks")  # names of variables are not secrets
    with pytest.raises(SecretLeakError, match=r"sinks.kafka.sasl_password looks like a secret"):
        check_no_secrets({"kafka": {"sasl_password": "hunter2"}}, "sinks")


def test_credentials_may_come_from_files_on_the_runtime_s_hosts() -> None:
    from dbus_fn.bundle import check_no_secrets

    sinks = {
        "kafka": {"bootstrap_servers": "k1:9092", "sasl_username": "orders",
                  "sasl_password_file": "/run/secrets/orders-kafka"},
        "es": {"hosts": "https://es:9200", "username": "orders",
               "password_file": "/run/secrets/orders-es", "api_key_file": "/run/secrets/k"},
    }  # fmt: skip
    manifest = Manifest.from_mapping({**_BASE, "sinks": sinks})
    assert manifest.sinks["es"]["password_file"] == "/run/secrets/orders-es"
    check_no_secrets(sinks, "dbus.toml sinks")  # paths of files are not secrets


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x97\x00\xde\xad\xbe\xef name", "is not UTF-8 text (byte 0x97 at offset 0)"),
        (GOOD.encode("utf-16"), "is not UTF-8 text but UTF-16"),
    ],
    ids=["random-bytes", "utf-16-with-bom"],
)
def test_a_manifest_not_in_utf8_names_the_file_and_says_to_save_it_as_utf8(
    tmp_path: Path, data: bytes, says: str
) -> None:
    (tmp_path / "dbus.toml").write_bytes(data)
    with pytest.raises(ManifestError) as caught:
        load_manifest(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'dbus.toml'}: {says}")
    assert message.endswith("save the file as UTF-8")
    assert caught.value.path == str(tmp_path / "dbus.toml")


def test_a_manifest_saved_as_utf8_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    (tmp_path / "dbus.toml").write_bytes(GOOD.encode("utf-8-sig"))
    assert load_manifest(tmp_path).name == "orders"


def test_a_kafka_sink_option_the_producer_does_not_know_is_refused_naming_it() -> None:
    data = {"name": "x", "version": "1", "module": "x", "tables": ["a.b"]}
    with pytest.raises(ManifestError) as refused:
        Manifest.from_mapping({**data, "sinks": {"kafka": {"lingerr_ms": 2}}})
    assert "sinks.kafka.lingerr_ms: 'lingerr.ms' is no Kafka producer setting" in str(
        refused.value
    )
    known = {"linger_ms": 2, "sasl.password_env": "PW", "client_id_env": "ID",
             "ssl.ca.location_file": "/etc/ca.pem", "bootstrap_servers": "k:9092"}  # fmt: skip
    assert Manifest.from_mapping({**data, "sinks": {"kafka": known}}).sinks["kafka"] == known
