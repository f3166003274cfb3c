from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dbus_fn.cli import cli
from dbus_fn.dependencies import read_requirements
from dbus_fn.json_format import event_to_json, write_jsonl
from dbus_fn.testing import insert

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def scaffold(tmp_path: Path, runner: CliRunner) -> Path:
    result = runner.invoke(cli, ["fn", "init", "cli_demo", "-C", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return tmp_path / "cli_demo"


def test_init_scaffolds_a_working_folder(scaffold: Path, runner: CliRunner) -> None:
    assert sorted(p.name for p in scaffold.iterdir()) == [
        "cli_demo.py",
        "dbus.toml",
        "events.jsonl",
        "requirements.txt",
        "test_cli_demo.py",
        "tox.ini",
    ]
    assert read_requirements(scaffold) is None  # comments only, until packages are named
    assert "[testenv:emulate]" in (scaffold / "tox.ini").read_text()
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 0, result.output
    assert "cli_demo 0.1.0: module cli_demo.py, tables shop.orders" in result.output
    assert "filter     cli_demo:skip_test_rows  tables=shop.orders" in result.output
    assert result.output.endswith("OK\n")


def test_init_refuses_an_existing_folder_and_a_bad_name(scaffold: Path, runner: CliRunner) -> None:
    again = runner.invoke(cli, ["fn", "init", "cli_demo", "-C", str(scaffold.parent)])
    assert again.exit_code == 2
    assert "already exists" in again.output
    bad = runner.invoke(cli, ["fn", "init", "9lives", "-C", str(scaffold.parent)])
    assert bad.exit_code == 2
    assert "expected a name of letters, digits, _ and -, starting with a letter; got '9lives'" in (
        bad.output
    )



def test_init_names_the_length_limit_of_a_long_name(tmp_path: Path, runner: CliRunner) -> None:
    result = runner.invoke(cli, ["fn", "init", "a" * 300, "-C", str(tmp_path)])
    assert result.exit_code == 2
    assert "expected a name of at most 63 characters, got one of 300" in result.stderr
    assert "a" * 64 not in result.output
    assert list(tmp_path.iterdir()) == []
def test_run_local_prints_what_goes_where(scaffold: Path, runner: CliRunner) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl")],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["destination"] for r in records] == [
        "kafka://shop.orders.insert",
        "kafka://shop.orders.update",
        "kafka://shop.orders.delete",
    ]
    assert records[0]["event"]["data"]["after"] == {"id": 1, "status": "new", "total": "19.90"}
    assert "cli_demo: 4 row events, 3 deliveries, 1 filtered, 0 dead-lettered" in result.stderr


def _break_projection(scaffold: Path) -> None:
    module = scaffold / "cli_demo.py"
    module.write_text(
        module.read_text()
        .replace(
            "    return {column",
            '    if event.row["id"] == 2:\n        raise KeyError("x")\n    return {column',
        )
        .replace('return not event.row.get("is_test", False)', "return True")
    )


def test_dead_letters_are_printed_and_fail_on_request(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    _break_projection(scaffold)
    args = ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl")]
    printed = runner.invoke(cli, args)
    assert printed.exit_code == 0, printed.output
    dead = [
        json.loads(line) for line in printed.stdout.splitlines() if '"dead_letter":true' in line
    ]
    assert len(dead) == 1
    assert dead[0]["destination"] == "kafka://shop.orders.dead-letter"
    assert "projection cli_demo:public_columns (" in dead[0]["error"]
    assert "raised KeyError: 'x'" in dead[0]["error"]
    failed = runner.invoke(cli, [*args, "--fail-on-dead-letter", "-o", str(tmp_path / "out.jsonl")])
    assert failed.exit_code == 1
    assert failed.stderr.strip().endswith(
        "Error: 1 event went to the dead-letter destination (--fail-on-dead-letter)"
    )
    short = failed.stdout.splitlines()
    assert short[0] == "kafka://shop.orders.insert  io.dbus.row.inserted [1]"
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 4


def test_options_fall_back_to_environment(scaffold: Path, runner: CliRunner) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold)],
        env={"DBUS_EVENTS": str(scaffold / "events.jsonl"), "DBUS_FAIL_ON_DEAD_LETTER": "1"},
    )
    assert result.exit_code == 0, result.output
    help_text = runner.invoke(cli, ["fn", "run-local", "--help"]).output
    flat = " ".join(help_text.split())
    for variable in ("DBUS_EVENTS", "DBUS_OUTPUT", "DBUS_TYPE_PREFIX", "DBUS_FAIL_ON_DEAD_LETTER"):
        assert f"env var: {variable}" in flat


def test_usage_errors_exit_2(scaffold: Path, runner: CliRunner) -> None:
    missing = runner.invoke(cli, ["fn", "run-local", str(scaffold)])
    assert missing.exit_code == 2
    assert "expected exactly one of --events FILE or --source DSN" in missing.output
    no_path = runner.invoke(cli, ["fn", "validate", str(scaffold / "nope")])
    assert no_path.exit_code == 2


def test_broken_module_is_one_line_exit_1(scaffold: Path, runner: CliRunner) -> None:
    (scaffold / "cli_demo.py").write_text("import dbus_fn as fn\nx = 1 / 0\n")
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("Error: ")
    assert "cli_demo.py:2: importing the function module failed with ZeroDivisionError" in line
    assert "Traceback" not in result.output


def test_bad_filter_annotation_is_one_line_exit_1(scaffold: Path, runner: CliRunner) -> None:
    module = scaffold / "cli_demo.py"
    module.write_text(
        module.read_text().replace(
            "def skip_test_rows(event: fn.RowChange) -> bool",
            "def skip_test_rows(event: fn.RowChange) -> str",
        )
    )
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1
    assert "filter cli_demo:skip_test_rows (" in result.stderr
    assert "cli_demo.py:8): expected a return annotation of bool, got str" in result.stderr


def test_invalid_manifest_lists_every_problem(scaffold: Path, runner: CliRunner) -> None:
    (scaffold / "dbus.toml").write_text('name = "X"\nmodule = "cli_demo.py"\ntables = []\n')
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1
    assert "name: expected a lowercase name" in result.stderr
    assert "version: missing" in result.stderr
    assert "tables: expected a non-empty list" in result.stderr


def test_invoke_one_event(scaffold: Path, runner: CliRunner, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_bytes(event_to_json(insert("shop.orders", id=5, status="paid", is_test=False)))
    result = runner.invoke(cli, ["fn", "invoke", str(scaffold), "--event", str(event)])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert record["destination"] == "kafka://shop.orders.insert"
    assert record["event"]["data"]["after"] == {"id": 5, "status": "paid"}
    event.write_bytes(event_to_json(insert("shop.orders", id=6, is_test=True)))
    dropped = runner.invoke(cli, ["fn", "invoke", str(scaffold), "--event", str(event)])
    assert dropped.stdout == "filtered: no delivery\n"


def test_an_event_of_a_table_not_subscribed_says_so_instead_of_filtered(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    event = tmp_path / "event.json"
    event.write_bytes(event_to_json(insert("shop.users", id=5)))
    result = runner.invoke(cli, ["fn", "invoke", str(scaffold), "--event", str(event)])
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "no delivery: 1 event skipped: the deployment does not subscribe to shop.users "
        "(add it to tables in dbus.toml to run it)\n"
    )
    events = tmp_path / "events.jsonl"
    write_jsonl(events, [insert("shop.users", id=1), insert("shop.carts", id=2),
                         insert("shop.orders", id=3, status="new")])  # fmt: skip
    ran = runner.invoke(cli, ["fn", "run-local", str(scaffold), "--events", str(events)])
    assert ran.exit_code == 0, ran.output
    assert (
        "cli_demo: 3 row events, 1 delivery, 0 filtered, 0 dead-lettered, 2 events skipped: "
        "the deployment does not subscribe to shop.carts, shop.users (add them to tables in "
        "dbus.toml to run them)"
    ) in ran.stderr


def test_bad_event_file_is_one_line_exit_1(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    write_jsonl(events, [insert("shop.orders", id=1)])
    with events.open("a") as out:
        out.write('{"specversion": "1.0"}\n')
    result = runner.invoke(cli, ["fn", "run-local", str(scaffold), "--events", str(events)])
    assert result.exit_code == 1
    assert "events.jsonl:2" in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.skipif(
    shutil.which("tox", path=os.path.dirname(sys.executable)) is None,
    reason="tox is not installed next to this interpreter",
)
def test_scaffold_passes_tox_emulate_and_test(scaffold: Path) -> None:
    """The acceptance check: `dbus fn init NAME && cd NAME && tox` passes with no
    services; the scaffold installs dbus-fn from this checkout on its own."""
    tox = shutil.which("tox", path=os.path.dirname(sys.executable))
    assert tox is not None
    tox_ini = (scaffold / "tox.ini").read_text()
    (relative,) = re.findall(r"deps =\s+\{env:DBUS_FN_REQUIREMENT:\{toxinidir\}/([^}]+)\}", tox_ini)
    assert not Path(relative).is_absolute()  # no absolute path of this machine
    assert (scaffold / relative).resolve() == REPO
    assert "-r requirements.txt" in tox_ini  # the packages the runtime is given, installed
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("DBUS_FN_REQUIREMENT", None)
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [tox, "-e", "emulate,test", "--workdir", str(scaffold.parent / ".tox")],
        cwd=scaffold,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "cli_demo: 4 row events, 3 deliveries, 1 filtered, 0 dead-lettered" in output
    assert "3 passed" in output


def test_source_and_events_are_exclusive(scaffold: Path, runner: CliRunner) -> None:
    result = runner.invoke(
        cli,
        [
            "fn",
            "run-local",
            str(scaffold),
            "--events",
            str(scaffold / "events.jsonl"),
            "--source",
            "mysql://u:secret@127.0.0.1:1",
        ],
    )
    assert result.exit_code == 2
    assert "secret" not in result.output


def test_unreachable_source_is_one_line_without_the_password(
    scaffold: Path, runner: CliRunner
) -> None:
    result = runner.invoke(
        cli,
        [
            "fn",
            "run-local",
            str(scaffold),
            "--source",
            "mysql://u:secret@127.0.0.1:1",
            "--idle-timeout",
            "1",
        ],
    )
    assert result.exit_code != 0
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("Error: ")
    assert "secret" not in result.output


@pytest.mark.integration
def test_run_local_over_a_live_binlog(
    fresh_database: Any, runner: CliRunner, tmp_path: Path
) -> None:
    from dbus_fn.capture import BinlogReader, SourceSpec, replica_id_for

    db = fresh_database.name
    connection = fresh_database.connect()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, status VARCHAR(16), "
            "total DECIMAL(8,2), is_test BOOLEAN NOT NULL DEFAULT FALSE)"
        )
    dsn = fresh_database.endpoint.dsn
    probe = BinlogReader(SourceSpec("probe", dsn, (f"{db}.*",)), replica_id_for(f"probe/{db}"))
    start = probe.master_position()
    probe.close()
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO orders VALUES (1, 'new', 9.50, FALSE), (2, 'new', 1, TRUE)")
        cursor.execute("UPDATE orders SET status = 'paid' WHERE id = 1")
        cursor.execute("DELETE FROM orders WHERE id = 1")
    folder = tmp_path / "live"
    folder.mkdir()
    (folder / "live_orders.py").write_text(
        "import dbus_fn as fn\n\n"
        '@fn.filter(tables="*.orders")\n'
        "def real(event) -> bool:\n"
        '    return not event.row["is_test"]\n\n'
        '@fn.route(tables="*.orders")\n'
        "def by_status(event) -> str:\n"
        "    return f\"kafka://orders.{event.row['status']}\"\n"
    )
    (folder / "dbus.toml").write_text(
        f'name = "live"\nversion = "1"\nmodule = "live_orders.py"\ntables = ["{db}.orders"]\n'
    )
    result = runner.invoke(
        cli,
        [
            "fn",
            "run-local",
            str(folder),
            "--source",
            f"shop={dsn}",
            "--from",
            f"{start.file}:{start.pos}",
            "--idle-timeout",
            "3",
            "--fail-on-dead-letter",
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["destination"], r["event"]["type"]) for r in records] == [
        ("kafka://orders.new", "io.dbus.row.inserted"),
        ("kafka://orders.paid", "io.dbus.row.updated"),
        ("kafka://orders.paid", "io.dbus.row.deleted"),
    ]
    assert records[0]["event"]["data"]["after"] == {
        "id": 1,
        "status": "new",
        "total": "9.50",
        "is_test": 0,
    }
    assert records[0]["event"]["source"] == f"/mysql/shop/{db}/orders"
    assert "live: 4 row events, 3 deliveries, 1 filtered, 0 dead-lettered" in result.stderr


def test_an_unreachable_source_exits_3(scaffold: Path, runner: CliRunner) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--source", "mysql://u:p@127.0.0.1:1"],
    )
    assert result.exit_code == 3, result.output
    assert "unreachable" in result.stderr


def test_run_local_output_replaces_a_file_only_with_force_and_only_on_success(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    args = ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl")]
    refused = runner.invoke(cli, [*args, "-o", str(out)])
    assert refused.exit_code == 2
    assert "already exists; pass --force" in refused.stderr
    assert out.read_text() == "kept\n"
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    failed = runner.invoke(
        cli, ["fn", "run-local", str(scaffold), "--events", str(broken), "-o", str(out), "--force"]
    )
    assert failed.exit_code != 0
    assert out.read_text() == "kept\n"
    replaced = runner.invoke(cli, [*args, "-o", str(out), "--force"])
    assert replaced.exit_code == 0, replaced.output
    written = out.read_text().splitlines()
    assert written
    assert len(written) == len(replaced.stdout.splitlines())  # one short line per record
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_the_readme_example_module_passes_the_scaffold_golden_events(
    scaffold: Path, runner: CliRunner
) -> None:
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    example = next(block for block in blocks if "import dbus_fn as fn" in block)
    (scaffold / "cli_demo.py").write_text(example)
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl"),
         "--fail-on-dead-letter"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "0 dead-lettered" in result.stderr


def test_init_into_a_folder_that_does_not_exist_refuses(
    runner: CliRunner, tmp_path: Path
) -> None:
    missing = tmp_path / "no" / "such"
    result = runner.invoke(cli, ["fn", "init", "demo", "-C", str(missing)])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert not missing.exists()


def _edit_manifest(scaffold: Path, old: str, new: str) -> None:
    manifest = scaffold / "dbus.toml"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new))


_ES = "timeout = 1.0\n[sinks.kafka]\n[sinks.es]\n"


@pytest.mark.parametrize(
    ("old", "new", "code", "says"),
    [
        ('version = "0.1.0"', 'version = "latest"', 1, "version: expected a version"),
        ('version = "0.1.0"', 'version = "v1.0"', 1, "version: expected a version"),
        ('version = "0.1.0"', 'version = "1..0"', 1, "version: expected a version"),
        ('module = "cli_demo.py"', 'module = "cli_demo"', 1, "is a dotted name"),
        ("timeout = 1.0", 'timeout = 1.0\n[sinks.kafka]\n"sasl.password" = "hunter2"', 2,
         "sinks.kafka.sasl.password looks like a secret"),
        ("timeout = 1.0", _ES + 'Authorization = "Bearer hunter2"', 2,
         "sinks.es.Authorization looks like a secret"),
        ("timeout = 1.0", _ES + 'header = "Bearer hunter2"', 2,
         "sinks.es.header holds a password or token"),
        ("timeout = 1.0", 'timeout = 1.0\n[sinks.kafka]\n"sasl.jaas.config" = '
         "'org.apache.kafka.common.security.plain.PlainLoginModule required "
         'username="dbus" password="hunter2";\'', 2,
         "sinks.kafka.sasl.jaas.config holds a password or token"),
        ("timeout = 1.0", _ES + 'hosts = ["https://dbus:hunter2@es:9200"]',
         2, "sinks.es.hosts[0] holds an address with a password"),
        ("timeout = 1.0", _ES + 'basic_auth = ["dbus", "hunter2"]', 2,
         "sinks.es.basic_auth looks like a secret"),
        ("timeout = 1.0", "timeout = 1.0\n[sinks.kafka]\nbootstrap_servers = 9092", 1,
         "sinks.kafka.bootstrap_servers: expected a string of host:port pairs"),
    ],
    ids=["latest", "v-prefix", "empty-part", "dotted-module", "secret-in-sinks", "bearer-key",
         "bearer-value", "jaas-password", "url-basic-auth", "es-basic-auth", "typed-option"],
)  # fmt: skip
def test_validate_refuses_what_deploy_refuses(
    scaffold: Path, runner: CliRunner, old: str, new: str, code: int, says: str
) -> None:
    _edit_manifest(scaffold, old, new)
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == code, result.output
    assert says in result.stderr
    assert "hunter2" not in result.output
    assert "Traceback" not in result.output


_PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7hunter2"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ('"ssl.key.pem"', f"-----BEGIN PRIVATE KEY-----\n{_PEM_BODY}\n-----END PRIVATE KEY-----"),
        ("ssl_key_pem", _PEM_BODY),
        ('"ssl.certificate.pem"',
         f"-----BEGIN ENCRYPTED PRIVATE KEY-----\n{_PEM_BODY}\n-----END PRIVATE KEY-----"),
        ('"ssl.keystore.key"', _PEM_BODY),
    ],
    ids=["pem-key", "key-by-name", "key-beside-a-certificate", "keystore-key"],
)  # fmt: skip
def test_validate_refuses_key_material_naming_the_option_and_its_env_form(
    scaffold: Path, runner: CliRunner, option: str, value: str
) -> None:
    _edit_manifest(
        scaffold, "timeout = 1.0", f'timeout = 1.0\n[sinks.kafka]\n{option} = """\n{value}\n"""'
    )
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    key = option.strip('"')
    assert f"sinks.kafka.{key}" in lines[0] and f'"{key}_env" = "VARIABLE"' in lines[0]
    assert _PEM_BODY not in result.output and "hunter2" not in result.output


def test_validate_takes_a_key_named_by_its_environment_variable(
    scaffold: Path, runner: CliRunner
) -> None:
    _edit_manifest(
        scaffold, "timeout = 1.0", 'timeout = 1.0\n[sinks.kafka]\n"ssl.key.pem_env" = "KAFKA_KEY"\n'
        '"ssl.key.password_env" = "KAFKA_KEY_PASSWORD"'
    )  # fmt: skip
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 0, result.output


def test_validate_refuses_a_module_outside_the_folder(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere.py"
    shutil.copy(scaffold / "cli_demo.py", outside)
    _edit_manifest(scaffold, 'module = "cli_demo.py"', 'module = "../elsewhere.py"')
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1, result.output
    assert "outside the deployment folder" in result.stderr


def test_validate_refuses_a_module_named_like_one_of_pythons_own(
    scaffold: Path, runner: CliRunner
) -> None:
    """Imported under its name with its folder first on ``sys.path``, a module named
    ``copy`` would stand in for the standard one in the runtime's workers."""
    (scaffold / "cli_demo.py").rename(scaffold / "copy.py")
    _edit_manifest(scaffold, 'module = "cli_demo.py"', 'module = "copy.py"')
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert (
        "copy.py: a function module named 'copy' would hide Python's own copy module from "
        "the runtime and every deployment beside it; rename it (and module = in dbus.toml), "
        "such as to copy_functions.py" in line
    )
    assert str(scaffold) not in sys.path
    assert sys.modules["copy"].__file__ != str(scaffold / "copy.py")


@pytest.mark.parametrize(
    ("name", "taken"),
    [("json", "Python's own json module"), ("Pluggy", "the installed package pluggy")],
)
def test_init_refuses_a_name_whose_module_would_hide_another(
    tmp_path: Path, runner: CliRunner, name: str, taken: str
) -> None:
    result = runner.invoke(cli, ["fn", "init", name, "-C", str(tmp_path)])
    assert result.exit_code == 2
    assert (
        f"{name!r} would name the module {name.lower()}.py, which would hide {taken} from "
        f"the runtime; choose another name, such as {name}-functions" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("version", ["1", "1.0.0", "2.1.0-rc.1", "1.0.0+build.7"])
def test_validate_accepts_numbered_versions(
    scaffold: Path, runner: CliRunner, version: str
) -> None:
    _edit_manifest(scaffold, 'version = "0.1.0"', f'version = "{version}"')
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 0, result.output
    assert "bundle cli_demo.py, dbus.toml" in result.output


def test_print_in_a_function_goes_to_stderr_and_the_records_stay_json(
    scaffold: Path, runner: CliRunner
) -> None:
    module = scaffold / "cli_demo.py"
    module.write_text(
        module.read_text().replace(
            'return not event.row.get("is_test", False)',
            'print("checking", event.row["id"])\n    return not event.row.get("is_test", False)',
        )
    )
    assert 'print("checking"' in module.read_text()
    result = runner.invoke(
        cli, ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl")]
    )
    assert result.exit_code == 0, result.output
    assert "checking 1" in result.stderr  # the print() went to stderr ...
    records = [json.loads(line) for line in result.stdout.splitlines()]  # ... stdout is JSONL
    assert records and all("destination" in record for record in records)


@pytest.mark.parametrize("command", ["run-local", "invoke"])
def test_print_while_the_module_loads_goes_to_stderr_too(
    scaffold: Path, runner: CliRunner, tmp_path: Path, command: str
) -> None:
    module = scaffold / "cli_demo.py"
    check = 'return not event.row.get("is_test", False)'
    text = module.read_text().replace("import dbus_fn as fn\n", "import dbus_fn as fn\nprint(1)\n")
    module.write_text(text.replace(check, f"print(2)\n    {check}"))
    assert "print(1)" in module.read_text() and "print(2)" in module.read_text()
    event = tmp_path / "event.json"
    event.write_text((scaffold / "events.jsonl").read_text().splitlines()[0])
    given = ["--events", str(scaffold / "events.jsonl")] if command == "run-local" else [
        "--event", str(event)]  # fmt: skip
    result = runner.invoke(cli, ["fn", command, str(scaffold), *given])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("1\n") and "2\n" in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records and all("destination" in record for record in records)


def test_an_events_file_without_events_fails_instead_of_testing_nothing(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        cli, ["fn", "run-local", str(scaffold), "--events", str(empty), "-o", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "holds no events, so nothing was tested" in result.stderr
    assert "dbus source record" in result.stderr
    assert not out.exists()


def _warnings(runner: CliRunner, scaffold: Path) -> list[str]:
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("OK\n")
    return [line for line in result.stderr.splitlines() if line.startswith("warning: ")]


def test_validate_warns_about_what_loads_but_looks_wrong(
    scaffold: Path, runner: CliRunner
) -> None:
    assert _warnings(runner, scaffold) == []
    module = scaffold / "cli_demo.py"
    original = module.read_text()
    module.write_text(
        original + '\n\n@fn.filter(tables="shop.orders")\n'
        "def skip_test_rows(event: fn.RowChange) -> bool:\n    return True\n"
    )
    (twice,) = _warnings(runner, scaffold)
    assert "skip_test_rows is defined 2 times" in twice
    assert "only the last one runs" in twice

    module.write_text('"""Nothing yet."""\nimport dbus_fn as fn\n')
    (empty,) = _warnings(runner, scaffold)
    assert "defines no functions: every change goes to kafka://shop.orders unchanged" in empty

    _edit_manifest(scaffold, 'default_route = "kafka://shop.orders"\n', "")
    (nothing,) = _warnings(runner, scaffold)
    assert "no default_route: nothing is delivered" in nothing

    module.write_text(original.split("@fn.route")[0])
    (unrouted,) = _warnings(runner, scaffold)
    assert "no route function and no default_route" in unrouted



def test_a_glob_with_an_unclosed_bracket_is_refused_in_the_manifest_and_a_selector(
    scaffold: Path, runner: CliRunner
) -> None:
    _edit_manifest(scaffold, 'tables = ["shop.orders"]', 'tables = ["shop.*"]')
    module = scaffold / "cli_demo.py"
    text = module.read_text()
    module.write_text(text.replace('filter(tables="shop.orders")', 'filter(tables="shop.[orders")'))
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1, result.output
    assert "filter cli_demo:skip_test_rows (" in result.stderr
    assert (
        "globs such as \"shop.orders\" or \"shop.*\", got 'shop.[orders'; a set of characters is "
        "written [abc], a literal [ as [[]"
    ) in result.stderr

    _edit_manifest(scaffold, 'tables = ["shop.*"]', 'tables = ["shop.orders", "shop.[ab"]')
    result = runner.invoke(cli, ["fn", "validate", str(scaffold)])
    assert result.exit_code == 1, result.output
    assert "tables: 'shop.[ab' has an unclosed '['" in result.stderr


def test_ctrl_c_stops_run_local_over_events_leaving_the_output_file_as_it_was(
    tmp_path: Path, function_folder: Any
) -> None:
    import signal
    import time

    folder = function_folder(
        "slow",
        """
        import time
        import dbus_fn as fn

        @fn.filter(tables="shop.orders")
        def slowly(event: fn.RowChange) -> bool:
            time.sleep(0.005)
            return True

        @fn.route(tables="shop.orders")
        def orders(event: fn.RowChange) -> str:
            return "kafka://orders"
        """,
        ["shop.orders"],
    )
    events = tmp_path / "events.jsonl"
    write_jsonl(events, (insert("shop.orders", id=i, status="paid") for i in range(4000)))
    out = tmp_path / "out.jsonl"
    out.write_text("kept\n")
    process = subprocess.Popen(
        [sys.executable, "-c", "from dbus_fn.cli import main; main()", "fn", "run-local",
         str(folder), "--events", str(events), "-o", str(out), "--force"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # Records are being written: the partial output beside the file has some.
        while not any(p.stat().st_size for p in tmp_path.glob(".out.jsonl.*.part")):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith("interrupted after ") and f"{out} left as it was" in line
    assert out.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "fn-slow", "out.jsonl"]


@pytest.mark.parametrize("prefix", ["", ".", "io.", "io..dbus", "a b"])
def test_a_type_prefix_that_makes_no_event_type_is_refused(
    scaffold: Path, runner: CliRunner, prefix: str
) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl"),
         "--type-prefix", prefix],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "expected a reverse-DNS name such as io.dbus (event types are <prefix>.row." in (
        result.stderr
    )
    assert f"got {prefix!r}" in result.stderr and result.stdout == ""


def test_a_reverse_dns_type_prefix_names_the_event_types(
    scaffold: Path, runner: CliRunner
) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl"),
         "--type-prefix", "com.example-shop"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    first = json.loads(result.stdout.splitlines()[0])
    assert first["event"]["type"] == "com.example-shop.row.inserted"


def _one_line(result: Any, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return str(lines[0])


def test_invoke_and_run_local_refuse_an_event_nested_200000_deep_in_one_line(
    scaffold: Path, runner: CliRunner, tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 200_000 + b"\n")
    invoked = runner.invoke(cli, ["fn", "invoke", str(scaffold), "--event", str(deep)])
    assert f"{deep} nests arrays and objects more than 128 levels deep" in _one_line(invoked, 1)
    ran = runner.invoke(cli, ["fn", "run-local", str(scaffold), "--events", str(deep)])
    assert f"{deep}:1 nests arrays and objects more than 128 levels deep" in _one_line(ran, 1)


def test_invoke_reads_a_device_only_up_to_the_event_limit(scaffold: Path) -> None:
    import resource

    def bounded() -> None:  # a read without end fails here instead of filling the machine
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    result = subprocess.run(
        [sys.executable, "-c", "from dbus_fn.cli import main; main()",
         "fn", "invoke", str(scaffold), "--event", "/dev/zero"],
        capture_output=True, text=True, timeout=120, preexec_fn=bounded,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "/dev/zero holds more than 67108864 bytes (64 MiB), the most one event may" in lines[0]


@pytest.mark.parametrize(
    ("name", "data", "code", "says"),
    [
        ("dbus.toml", b"\xff\xfe\x00n\x00a\x00m\x00e", 1, "is not UTF-8 text but UTF-16"),
        ("dbus.toml", b"name = \x97\xde\xad", 1, "is not UTF-8 text (byte 0x97 at offset 7)"),
        ("requirements.txt", "six==1.16.0\n".encode("utf-16"), 2, "is not UTF-8 text but UTF-16"),
        ("requirements.txt", b"\x97\xde\xad", 2, "is not UTF-8 text (byte 0x97 at offset 0)"),
    ],
    ids=["manifest-utf-16", "manifest-bytes", "requirements-utf-16", "requirements-bytes"],
)  # fmt: skip
def test_validate_and_deploy_refuse_a_file_not_in_utf8_naming_it(
    scaffold: Path, runner: CliRunner, name: str, data: bytes, code: int, says: str
) -> None:
    (scaffold / name).write_bytes(data)
    nowhere = ["--zookeeper", "127.0.0.1:1", "--zk-timeout", "0.2"]
    for command in (["validate", str(scaffold)], ["deploy", str(scaffold), *nowhere]):
        line = _one_line(runner.invoke(cli, ["fn", *command]), code)
        assert f"{scaffold / name}" in line and says in line and "as UTF-8" in line


@pytest.mark.parametrize("directory", ["/proc", "/sys"])
def test_init_where_no_folder_can_be_made_is_one_line(runner: CliRunner, directory: str) -> None:
    # Not even root makes a folder there (a folder made read-only would not stop root).
    result = runner.invoke(cli, ["fn", "init", "demo", "-C", directory])
    line = _one_line(result, 2)
    assert f"-C {directory}: cannot create {directory}/demo (" in line
    assert line.endswith("); choose a writable folder with -C")


@pytest.mark.parametrize("output", ["/proc/x.jsonl", "/sys/x.jsonl"])
def test_run_local_output_where_no_file_can_be_made_is_one_line(
    scaffold: Path, runner: CliRunner, output: str
) -> None:
    result = runner.invoke(
        cli,
        ["fn", "run-local", str(scaffold), "--events", str(scaffold / "events.jsonl"),
         "-o", output],
    )  # fmt: skip
    line = _one_line(result, 2)
    folder = str(Path(output).parent)
    assert f"--output {output}: cannot create a file in {folder} (" in line
    assert line.endswith("); choose a writable path with --output")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["deploy", "{scaffold}", "--name", ""], "--name '' is empty; give the name to deploy"),
        (["deploy", "{scaffold}", "--name", " "], "--name ' ' is only whitespace"),
        (["rollback", "cli_demo", "--to", ""],
         "--to '' is empty; give the version to make active (`dbus fn describe NAME` lists"),
        (["list", "--cluster", ""], "--cluster '' is empty; give a cluster name, or leave the "
         "option out for 'default'"),
    ],
    ids=["deploy-name", "deploy-blank-name", "rollback-to", "list-cluster"],
)  # fmt: skip
def test_an_empty_name_version_or_cluster_is_refused_before_zookeeper_is_asked(
    scaffold: Path, runner: CliRunner, command: list[str], says: str
) -> None:
    nowhere = ["--zookeeper", "127.0.0.1:1", "--zk-timeout", "0.2"]  # asked: exit 3
    args = [part.format(scaffold=scaffold) for part in command]
    assert says in _one_line(runner.invoke(cli, ["fn", *args, *nowhere]), 2)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_an_idle_timeout_that_is_not_a_finite_number_is_refused(
    runner: CliRunner, scaffold: Path, value: str
) -> None:
    result = runner.invoke(
        cli, ["fn", "run-local", str(scaffold), "--source", "mysql://u:p@127.0.0.1:1",
              "--idle-timeout", value],
    )  # fmt: skip
    line = _one_line(result, 2)
    assert f"--idle-timeout {value!r} is not a finite number; give one such as 2.5" in line
