"""Source references: the DSN stays on the runtime's machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dbus_fn.capture import SourceSpec
from dbus_fn.coordination import SourceReference
from dbus_fn.errors import ConfigError, SecretLeakError

DSN = "mysql://dbus:not-for-zookeeper@127.0.0.1:3306"


def test_a_reference_resolves_from_the_environment_or_a_file(tmp_path: Path) -> None:
    by_env = SourceReference("shop", dsn_env="SHOP_DSN", tables=("shop.*",))
    spec = by_env.spec({"SHOP_DSN": DSN})
    assert (spec.name, spec.dsn, spec.tables) == ("shop", DSN, ("shop.*",))
    assert by_env.to_json() == {"dsn_env": "SHOP_DSN", "tables": ["shop.*"]}

    secret = tmp_path / "shop.dsn"
    secret.write_text(DSN + "\n")
    by_file = SourceReference("shop", dsn_file=str(secret))
    assert by_file.resolve_dsn({}) == DSN
    assert by_file.spec({}).tables == ("*.*",)


def test_resolution_errors_name_the_place_never_a_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment variable SHOP_DSN is not set"):
        SourceReference("shop", dsn_env="SHOP_DSN").resolve_dsn({"OTHER": DSN})
    with pytest.raises(ConfigError, match="cannot read the DSN file") as unreadable:
        SourceReference("shop", dsn_file=str(tmp_path / "missing")).resolve_dsn({})
    assert "No such file" in str(unreadable.value)


def test_a_dsn_where_a_name_belongs_is_refused_without_echo() -> None:
    with pytest.raises(SecretLeakError) as refused:
        SourceReference("shop", dsn_env=DSN)
    assert "not-for-zookeeper" not in str(refused.value)
    with pytest.raises(SecretLeakError) as as_file:
        SourceReference("shop", dsn_file=DSN)
    assert "not-for-zookeeper" not in str(as_file.value)


def test_bad_names_and_tables() -> None:
    with pytest.raises(ConfigError, match=r"invalid source name '\.\./x'"):
        SourceReference("../x", dsn_env="X")
    with pytest.raises(ConfigError, match=r"invalid table pattern\(s\) \['orders'\]"):
        SourceReference("shop", dsn_env="X", tables=("orders",))


def test_a_table_glob_with_an_unclosed_set_is_refused_before_it_is_stored() -> None:
    # fnmatch would read the [ as itself: the source would capture nothing, unsaid.
    with pytest.raises(ConfigError, match=r"\['shop\.order_\[ab'\].*closed: shop\.order_\[ab\]\*"):
        SourceReference("shop", dsn_env="X", tables=("shop.order_[ab",))
    with pytest.raises(ConfigError, match=r"invalid table pattern\(s\) \['shop\.\[x'\]"):
        SourceSpec("shop", "mysql://u:p@127.0.0.1:3306", ("shop.[x",))
    assert SourceReference("shop", dsn_env="X", tables=("shop.order_[ab]*",)).tables


def test_keeping_helper_tables_is_registered_with_the_source() -> None:
    kept = SourceReference("shop", dsn_env="SHOP_DSN", keep_helper_tables=True)
    assert kept.to_json() == {"dsn_env": "SHOP_DSN", "tables": [], "keep_helper_tables": True}
    again = SourceReference.from_json("shop", kept.to_json())
    assert again == kept and again.spec({"SHOP_DSN": DSN}).keep_helper_tables
    plain = SourceReference.from_json("shop", {"dsn_env": "SHOP_DSN"})
    assert not plain.keep_helper_tables and not plain.spec({"SHOP_DSN": DSN}).keep_helper_tables
