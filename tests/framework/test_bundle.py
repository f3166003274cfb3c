"""Bundles' zip: the same files always give the same bytes."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from dbus_fn.bundle import build_bundle, check_no_secrets, unpack, zip_files
from dbus_fn.errors import SecretLeakError

_KEY_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7hunter2"
PRIVATE_KEY = f"-----BEGIN PRIVATE KEY-----\n{_KEY_BODY}\n-----END PRIVATE KEY-----\n"
ENCRYPTED_KEY = (
    f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{_KEY_BODY}\n-----END ENCRYPTED PRIVATE KEY-----\n"
)
RSA_KEY = f"-----BEGIN RSA PRIVATE KEY-----\n{_KEY_BODY}\n-----END RSA PRIVATE KEY-----\n"
CERTIFICATE = (
    "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTAN\n-----END CERTIFICATE-----\n"
)


def test_the_same_files_in_any_order_zip_to_the_same_bytes() -> None:
    files = {"pkg/rules.py": b"x = 1\n", "dbus.toml": b'name = "a"\n', "a.py": b""}
    packed = zip_files(files, compresslevel=9)
    assert zip_files(dict(reversed(files.items())), compresslevel=9) == packed
    assert unpack(packed) == files
    entries = zipfile.ZipFile(io.BytesIO(packed)).infolist()
    assert [e.filename for e in entries] == ["a.py", "dbus.toml", "pkg/rules.py"]
    assert {(e.date_time, e.external_attr >> 16, e.compress_type) for e in entries} == {
        ((1980, 1, 1, 0, 0, 0), 0o644, zipfile.ZIP_DEFLATED)
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ssl.key.pem", PRIVATE_KEY),
        ("ssl_key_pem", _KEY_BODY),  # key material by its name, PEM armour or not
        ("ssl.keystore.key", ENCRYPTED_KEY),
        ("sasl.oauthbearer.assertion.private.key.pem", RSA_KEY),
        ("private_key", _KEY_BODY),
        ("ssl.certificate.pem", CERTIFICATE + RSA_KEY),  # a key beside the certificate
        ("ssl.ca.pem", ENCRYPTED_KEY),
        ("ssl.key.password", _KEY_BODY),
        ("ssl.keystore.password", _KEY_BODY),
        ("ssl.truststore.password", _KEY_BODY),
        ("sasl.oauthbearer.client.secret", _KEY_BODY),
        ("sasl.oauthbearer.assertion.private.key.passphrase", _KEY_BODY),
    ],
)
def test_key_material_and_passwords_in_a_sink_are_refused_with_the_env_form(
    key: str, value: str
) -> None:
    with pytest.raises(SecretLeakError) as caught:
        check_no_secrets({"kafka": {"bootstrap_servers": "k1:9092", key: value}}, "dbus.toml sinks")
    message = str(caught.value)
    assert message.startswith(f"dbus.toml sinks.kafka.{key} ")
    assert f'"{key}_env" = "VARIABLE"' in message
    assert "\n" not in message and _KEY_BODY not in message and "hunter2" not in message
    assert caught.value.exit_code == 2


def test_certificates_key_locations_and_variables_are_no_secret() -> None:
    check_no_secrets(
        {"kafka": {
            "ssl.certificate.pem": CERTIFICATE, "ssl.ca.pem": CERTIFICATE,
            "ssl.keystore.certificate.chain": CERTIFICATE + CERTIFICATE,
            "ssl.key.location": "/etc/kafka/client.key", "ssl.keystore.location": "/etc/k.p12",
            "sasl.oauthbearer.assertion.private.key.file": "/run/secrets/assertion.key",
            "ssl.key.pem_env": "ORDERS_KAFKA_KEY", "ssl.key.password_env": "ORDERS_KEY_PASSWORD",
            "ssl.keystore.key_file": "/run/secrets/orders-key.pem",
        }},
        "dbus.toml sinks",
    )  # fmt: skip


def test_an_elasticsearch_secret_is_refused_with_the_options_es_takes() -> None:
    with pytest.raises(SecretLeakError) as caught:
        check_no_secrets({"es": {"hosts": ["https://dbus:hun/ter2@es:9200"]}}, "dbus.toml sinks")
    message = str(caught.value)
    assert "sinks.es.hosts[0] holds an address with a password" in message
    assert "password_env" in message and "api_key_env" in message and "hun/ter2" not in message


def _deployment(folder: Path, sink_lines: str) -> Path:
    folder.mkdir()
    (folder / "dbus.toml").write_text(
        'name = "keys"\nversion = "1.0.0"\nmodule = "keys.py"\ntables = ["shop.orders"]\n'
        'default_route = "kafka://orders"\n[sinks.kafka]\nbootstrap_servers = "k1:9092"\n'
        'security_protocol = "SSL"\n' + sink_lines
    )
    (folder / "keys.py").write_text(
        'import dbus_fn as fn\n\n\n@fn.filter(tables="shop.orders")\n'
        "def everything(event: fn.RowChange) -> bool:\n    return True\n"
    )
    return folder


def test_a_bundle_with_a_private_key_in_its_sinks_is_refused(tmp_path: Path) -> None:
    folder = _deployment(tmp_path / "keys", f'"ssl.key.pem" = """\n{PRIVATE_KEY}"""\n')
    with pytest.raises(SecretLeakError) as caught:
        build_bundle(folder)
    message = str(caught.value)
    assert "sinks.kafka.ssl.key.pem looks like a secret" in message
    assert '"ssl.key.pem_env" = "VARIABLE"' in message
    assert _KEY_BODY not in message and "PRIVATE KEY" not in message


def test_a_bundle_naming_its_key_s_variable_holds_no_key(tmp_path: Path) -> None:
    folder = _deployment(
        tmp_path / "keys",
        '"ssl.key.pem_env" = "KAFKA_KEY"\n"ssl.key.password_env" = "KAFKA_KEY_PASSWORD"\n'
        f'"ssl.certificate.pem" = """\n{CERTIFICATE}"""\n',
    )
    bundle = build_bundle(folder)
    assert bundle.manifest["sinks"]["kafka"]["ssl.key.pem_env"] == "KAFKA_KEY"
    assert "PRIVATE KEY" not in unpack(bundle.data)["dbus.toml"].decode()
