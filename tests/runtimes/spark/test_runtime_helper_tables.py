"""Where a runtime is told to keep online schema change tools' helper tables: the flag
or its variable, for every source it is given, kept in its config file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dbus_fn.cli import cli
from dbus_spark.config.runtime import load_config
from dbus_spark.interfaces.settings import runtime_config

ORDERS = str(Path(__file__).resolve().parents[3] / "functions" / "orders")


@pytest.mark.parametrize(("given", "kept"), [(None, False), (False, False), (True, True)])
def test_every_source_of_the_runtime_keeps_helper_tables_as_told(
    tmp_path: Path, given: bool | None, kept: bool
) -> None:
    config = runtime_config(
        sources=("a=mysql://u:p@127.0.0.1:1", "b=mysql://u:p@127.0.0.1:2"),
        deployments=(ORDERS,),
        kafka="127.0.0.1:9092",
        elasticsearch="http://127.0.0.1:9200",
        checkpoint=str(tmp_path / "checkpoint"),
        keep_helper_tables=given,
    )
    assert [b.spec.keep_helper_tables for b in config.sources] == [kept, kept]
    assert load_config(config.save(tmp_path / "runtime.json")) == config


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--keep-helper-tables"], {}, "--keep-helper-tables"),
        ([], {"DBUS_KEEP_HELPER_TABLES": "1"}, "DBUS_KEEP_HELPER_TABLES (from the environment)"),
    ],
)
def test_a_cluster_member_refuses_the_option_its_sources_carry(
    args: list[str], env: dict[str, str], named: str
) -> None:
    result = CliRunner().invoke(cli, ["runtime", "start", "--cluster", "prod", *args], env=env)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --cluster takes the sources and functions")
    assert f"drop {named}" in line
