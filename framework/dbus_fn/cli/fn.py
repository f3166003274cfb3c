"""``dbus fn``: scaffold, validate and run function modules locally; deploy them.

Each command parses its options, calls the library (registry, emulator) and
turns a ``DbusError`` into one line and its exit code: 1 for a module, manifest
or event that is wrong, 2 for a usage mistake. ``run-local`` and ``invoke``
print dead letters like any other record; ``--fail-on-dead-letter`` makes them
exit 1. The history commands (backfill, verify, replay, deadletters, redrive)
need a runtime: the runtime registers them (entry point group ``dbus_fn.cli.fn``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from decimal import Decimal
from importlib import resources
from pathlib import Path
from string import Template
from typing import IO

import click

from dbus_fn.cli._errors import CommandError, Interrupted, dbus_fn_requirement
from dbus_fn.cli._options import (
    FROM,
    FiniteFloatRange,
    env_option,
    given_as,
    refuse_empty,
    start_point,
)
from dbus_fn.cli._output import check_output, output_file
from dbus_fn.cli._plugins import PluginGroup
from dbus_fn.cli.cluster import ZooKeeperOptions, zookeeper_options
from dbus_fn.cloudevent import DEFAULT_TYPE_PREFIX
from dbus_fn.emulator import EmulatedRecord, Emulator, read_event_file
from dbus_fn.errors import ConfigError, EventFormatError
from dbus_fn.events import RowChange
from dbus_fn.files import cannot_create_in
from dbus_fn.json_format import write_jsonl
from dbus_fn.manifest import NAME_MAX
from dbus_fn.registry import LoadedDeployment, load_deployment, taken_module_name, with_packages
from dbus_fn.testing import row_change

_PATH = click.argument(
    "path",
    type=click.Path(exists=True, path_type=Path),
    default=".",
)


def _type_prefix(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A reverse-DNS name (io.dbus): the event types are ``<prefix>.row.inserted`` ..."""
    if not re.fullmatch(r"[A-Za-z0-9][\w-]*(\.[A-Za-z0-9][\w-]*)*", value):
        raise click.BadParameter(
            f"expected a reverse-DNS name such as {DEFAULT_TYPE_PREFIX} (event types are "
            f"<prefix>.row.inserted ...), got {value!r}"
        )
    return value


_TYPE_PREFIX = env_option(
    "--type-prefix",
    env="DBUS_TYPE_PREFIX",
    default=DEFAULT_TYPE_PREFIX,
    show_default=True,
    callback=_type_prefix,
    help="CloudEvent type prefix of the events written (a reverse-DNS name).",
)
_FAIL_ON_DEAD_LETTER = env_option(
    "--fail-on-dead-letter",
    is_flag=True,
    env="DBUS_FAIL_ON_DEAD_LETTER",
    help="Exit 1 if any event went to the dead-letter destination.",
)


@click.group("fn", cls=PluginGroup, plugins="dbus_fn.cli.fn")
def fn() -> None:
    """Write, check and run function modules locally (no Spark, no services); deploy
    them to a cluster (deploy, list, describe, rollback, delete: ZooKeeper).

    PATH is a deployment folder (with a dbus.toml) or its dbus.toml.
    """


@fn.command("init")
@click.argument("name")
@env_option(
    "--table",
    env="DBUS_TABLE",
    default="shop.orders",
    show_default=True,
    help='The "db.table" the scaffolded functions subscribe to.',
)
@env_option(
    "--directory",
    "-C",
    env="DBUS_DIRECTORY",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    help="Where to create the NAME folder (default: here).",
)
def init(name: str, table: str, directory: Path) -> None:
    """Create the folder NAME: a function module, its test, golden events, a
    dbus.toml, a requirements.txt for its own packages and a tox.ini (`tox` tests,
    `tox -e emulate` emulates)."""
    if len(name) > NAME_MAX:
        raise click.BadParameter(
            f"expected a name of at most {NAME_MAX} characters, got one of {len(name)}",
            param_hint="NAME",
        )
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise click.BadParameter(
            f"expected a name of letters, digits, _ and -, starting with a letter; got {name!r}",
            param_hint="NAME",
        )
    module = name.replace("-", "_").lower()
    taken = taken_module_name(module)
    if taken is not None:
        raise click.BadParameter(
            f"{name!r} would name the module {module}.py, which would hide {taken} from the "
            f"runtime; choose another name, such as {name}-functions",
            param_hint="NAME",
        )
    if not re.fullmatch(r"[A-Za-z0-9_$]+\.[A-Za-z0-9_$]+", table):
        raise click.BadParameter(f'expected "db.table", got {table!r}', param_hint="--table")
    folder = directory / name
    if folder.exists():
        raise click.UsageError(f"{folder} already exists; expected a new folder name")
    refused = cannot_create_in(directory)
    if refused is not None:
        raise ConfigError(
            f"{given_as(click.get_current_context(), 'directory', '-C')} {directory}: cannot "
            f"create {folder} ({refused.strerror}); choose a writable folder with -C",
            setting="directory",
        )
    values = {
        "requirement": _scaffold_requirement(folder),
        "name": name.lower(),
        "module": module,
        "table": table,
        "topic": table.replace("_", "-").lower(),
    }
    files = {
        f"{module}.py": "module.py.tmpl",
        f"test_{module}.py": "test_module.py.tmpl",
        "dbus.toml": "dbus.toml.tmpl",
        "tox.ini": "tox.ini.tmpl",
        "requirements.txt": "requirements.txt.tmpl",
    }
    folder.mkdir(parents=True)
    templates = resources.files("dbus_fn.cli") / "templates"
    for target, template in files.items():
        text = Template((templates / template).read_text(encoding="utf-8")).substitute(values)
        (folder / target).write_text(text, encoding="utf-8")
    write_jsonl(folder / "events.jsonl", _golden_events(table))
    click.echo(f"Created {folder}/ with {', '.join([*files, 'events.jsonl'])}.")
    click.echo(f"Next: cd {folder} && tox -e emulate   (and `tox -e test` for the tests)")


def _scaffold_requirement(folder: Path) -> str:
    """``dbus_fn_requirement()`` for the new folder's tox.ini: a folder as a path from
    the tox.ini (``{toxinidir}/...``), so the file names no absolute path of this machine."""
    requirement = dbus_fn_requirement()
    if not Path(requirement).is_dir():
        return requirement
    relative = os.path.relpath(requirement, folder.resolve())
    return "{toxinidir}/" + Path(relative).as_posix()


def _golden_events(table: str) -> list[RowChange]:
    """Four changes of ``table``: an insert, its update, a test row and a delete."""
    types = {
        "id": "bigint",
        "status": "varchar(32)",
        "total": "decimal(10,2)",
        "is_test": "tinyint(1)",
    }
    first = {"id": 1, "status": "new", "total": Decimal("19.90"), "is_test": 0}
    paid = {**first, "status": "paid"}
    test_row = {"id": 2, "status": "new", "total": Decimal("0.00"), "is_test": 1}
    images = [
        ("insert", None, first),
        ("update", first, paid),
        ("insert", None, test_row),
        ("delete", paid, None),
    ]
    return [
        row_change(op, table, before, after, source="local", column_types=types)
        for op, before, after in images
    ]


@fn.command("validate")
@_PATH
def validate(path: Path) -> None:
    """Check a deployment as `dbus fn deploy` does (manifest, module, functions,
    selectors, what its bundle may hold, the packages its requirements.txt names)
    without a cluster; list its functions."""
    from dbus_fn.bundle import build_bundle
    from dbus_fn.checks import deployment_warnings
    from dbus_fn.dependencies import packages_of

    packages = packages_of(path)
    bundle = build_bundle(path, packages=packages)
    deployment = load_deployment(path, packages=packages)
    _describe(deployment)
    click.echo(f"  bundle {', '.join(bundle.files)}: {len(bundle.data)} bytes")
    if packages is not None:
        click.echo(f"  dependencies: {packages.describe()}")
    for warning in deployment_warnings(deployment):
        click.echo(f"warning: {warning}", err=True)
    click.echo("OK")


def _describe(deployment: LoadedDeployment) -> None:
    manifest = deployment.manifest
    click.echo(
        f"{manifest.name} {manifest.version}: module {manifest.module}, "
        f"tables {', '.join(manifest.tables)}"
    )
    for info in deployment.functions:
        operations = ",".join(sorted(op.value for op in info.selector.operations))
        context = " (event, context)" if info.takes_context else ""
        click.echo(
            f"  {info.kind:<10} {info.name}{context}  tables={','.join(info.selector.tables)}"
            f"  ops={operations}  order={info.order}  {info.location}"
        )
    timeout = f"{manifest.timeout:g} s" if manifest.timeout else "none"
    click.echo(
        f"  default route {manifest.default_route or '(none)'}; "
        f"dead letters {manifest.dead_letter_route}; timeout {timeout}"
    )


@fn.command("invoke")
@_PATH
@env_option(
    "--event",
    "event_file",
    env="DBUS_EVENT",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A file holding one CloudEvent in JSON.",
)
@_TYPE_PREFIX
@_FAIL_ON_DEAD_LETTER
def invoke(path: Path, event_file: Path, type_prefix: str, fail_on_dead_letter: bool) -> None:
    """Run the deployment's functions over one event; print what would go where (a
    function's print() goes to stderr)."""
    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        emulator = Emulator(with_packages(path), type_prefix=type_prefix)
        records = list(emulator.run_events([read_event_file(event_file)]))
        report = emulator.close()
    for record in records:
        _print_record(record, stdout)
    if not records:
        click.echo(
            f"no delivery: {report.unsubscribed_note()}"
            if report.unsubscribed
            else "filtered: no delivery"
            if report.filtered
            else "no delivery"
        )
    _finish(report.dead_letters, fail_on_dead_letter)


@fn.command("run-local")
@_PATH
@env_option(
    "--events",
    env="DBUS_EVENTS",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A JSONL file of CloudEvents, one per line.",
)
@env_option(
    "--source",
    env="DBUS_SOURCE",
    help="Read a live binlog instead: [NAME=]DSN, e.g. mysql://user:pass@127.0.0.1:3306 "
    "(needs dbus-fn[capture]).",
)
@FROM
@env_option(
    "--idle-timeout",
    env="DBUS_IDLE_TIMEOUT",
    type=FiniteFloatRange(min=0, min_open=True),
    help="With --source: stop after this many seconds without a change (default: run "
    "until interrupted).",
)
@env_option(
    "--output",
    "-o",
    env="DBUS_OUTPUT",
    type=click.Path(path_type=Path),
    help="Write the records as JSONL here; stdout then gets one short line each. The "
    "file is in place only when the run ends without an error: a run over --events that "
    "Ctrl-C stops leaves it as it was and exits 130 (Ctrl-C is how a --source run ends).",
)
@click.option("--force", is_flag=True, help="Replace the --output file if it exists.")
@_TYPE_PREFIX
@_FAIL_ON_DEAD_LETTER
def run_local(
    path: Path,
    events: Path | None,
    source: str | None,
    start: str,
    idle_timeout: float | None,
    output: Path | None,
    force: bool,
    type_prefix: str,
    fail_on_dead_letter: bool,
) -> None:
    """Run the deployment's functions over recorded events (--events) or a live binlog
    (--source); print what would go where, one JSON record per line (destination,
    dead_letter, error, event). Whatever the functions print() goes to stderr, so
    stdout stays JSONL."""
    if (events is None) == (source is None):
        raise click.UsageError("expected exactly one of --events FILE or --source DSN")
    if output is not None:
        check_output(output, force=force)
    stdout = sys.stdout  # the records' stream; a function's print() goes to stderr
    with contextlib.redirect_stdout(sys.stderr):  # its module's too, as it is imported
        emulator = Emulator(with_packages(path), type_prefix=type_prefix)
    if events is not None:
        records = emulator.run_file(events)
    else:
        assert source is not None
        records = _live(emulator, source, start, idle_timeout)
    existed = output is not None and output.exists()
    with contextlib.ExitStack() as stack:
        out = None if output is None else stack.enter_context(output_file(output, binary=False))
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        try:
            for record in records:
                if out is not None:
                    out.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
                    _print_short(record, stdout)
                else:
                    _print_record(record, stdout)
        except KeyboardInterrupt:
            if events is None:  # a live run ends this way: what it wrote is kept
                click.echo("interrupted", err=True)
            else:  # raised inside output_file, which drops the partial output
                emulator.close()
                kept = (
                    ""
                    if output is None
                    else (f"; {output} left as it was" if existed else f"; {output} not written")
                )
                raise Interrupted(
                    f"interrupted after {emulator.report.events} events of {events}{kept}"
                ) from None
        if events is not None and not (emulator.report.events or emulator.report.markers):
            raise EventFormatError(
                f"{events} holds no events, so nothing was tested; record some with "
                f"`dbus source record SOURCE -o {events}` (one CloudEvent per line)",
                problems=("no events",),
                where=str(events),
            )
    report = emulator.close()
    click.echo(f"{emulator.deployment.name}: {report.summary()}", err=True)
    _finish(report.dead_letters, fail_on_dead_letter)


def _live(
    emulator: Emulator, source: str, start: str, idle_timeout: float | None
) -> Iterator[EmulatedRecord]:
    from dbus_fn.capture import SourceSpec

    name, separator, dsn = source.partition("=")
    if not separator or "://" in name:
        name, dsn = "local", source
    spec = SourceSpec(name=name, dsn=dsn, tables=emulator.deployment.manifest.tables)
    return emulator.run_source(spec, start=start_point(start), idle_timeout=idle_timeout)


def _print_record(record: EmulatedRecord, stream: IO[str]) -> None:
    click.echo(json.dumps(record.to_json(), separators=(",", ":")), file=stream)


def _print_short(record: EmulatedRecord, stream: IO[str]) -> None:
    event = record.event
    what = f"{event.get_type()} {event.get_subject() or ''}".strip()
    line = f"{record.destination}  {what}"
    if record.error:
        line += f"  {record.error}"
    click.echo(line, file=stream)


def _finish(dead_letters: int, fail_on_dead_letter: bool) -> None:
    if dead_letters and fail_on_dead_letter:
        raise CommandError(
            f"{dead_letters} event{'s' if dead_letters != 1 else ''} went to the dead-letter "
            "destination (--fail-on-dead-letter)",
            1,
        )


@fn.command("deploy")
@_PATH
@env_option(
    "--name",
    env="DBUS_FN_NAME",
    callback=refuse_empty(
        "give the name to deploy under, or leave the option out for the manifest's name"
    ),
    help="Name to deploy under (default: the manifest's name).",
)
@zookeeper_options
def deploy(path: Path, name: str | None, zk: ZooKeeperOptions) -> None:
    """Validate PATH (as `validate` does), package it as a bundle of its manifest's
    version and make that version active; running runtimes pick it up at their next
    batch. The same content again is a no-op; changed content needs a new version."""
    from dbus_fn.coordination import build_bundle
    from dbus_fn.dependencies import packages_of

    bundle = build_bundle(path, name=name, packages=packages_of(path))
    with zk.open() as (client, settings):
        from dbus_fn.coordination import FunctionStore

        result = FunctionStore(client, settings).deploy(bundle)
    short = result.content_hash[:19]
    if result.outcome == "already deployed":
        click.echo(f"{result.name} {result.version} already deployed ({short}); nothing to do")
        return
    moved = result.previous and result.previous != result.version
    was = f" (was {result.previous})" if moved else ""
    verb = "Deployed" if result.outcome == "deployed" else "Re-activated"
    click.echo(
        f"{verb} {result.name} {result.version} ({short}, {bundle.size} bytes, "
        f"{len(bundle.files)} files); active{was}"
    )


@fn.command("list")
@zookeeper_options
def list_functions(zk: ZooKeeperOptions) -> None:
    """The deployed functions, their active version and all versions, and where one
    is not with a source's stream (paused, detached and why), as last committed."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import FunctionStore, cluster_status

        functions = FunctionStore(client, settings).summaries()
        sources = cluster_status(client, settings).sources if functions else ()
    if not functions:
        click.echo(f"no functions deployed in cluster {zk.cluster}; deploy with `dbus fn deploy`")
    for item in functions:
        # Where it is not with a source's stream, as its owner committed it.
        pace = "".join(
            f"  [{s.name}: {s.pace[item.name]}]" for s in sources if item.name in s.pace
        )
        click.echo(
            f"{item.name}  active={item.active or '(none)'}  versions={','.join(item.versions)}"
            + pace
        )


@fn.command("describe")
@click.argument("name")
@zookeeper_options
def describe(name: str, zk: ZooKeeperOptions) -> None:
    """A deployed function: its versions (hash, size, time) and the active one."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import FunctionStore

        summary, versions = FunctionStore(client, settings).describe(name)
    click.echo(f"{summary.name}: active {summary.active or '(none)'}")
    for info in versions:
        mark = "*" if info.version == summary.active else " "
        manifest = info.manifest
        click.echo(
            f" {mark} {info.version}  {info.content_hash[:19]}  {info.size} bytes  "
            f"{info.created}  module {manifest.get('module')}  "
            f"tables {','.join(manifest.get('tables', []))}"
        )


@fn.command("rollback")
@click.argument("name")
@click.option(
    "--to",
    "to",
    required=True,
    callback=refuse_empty("give the version to make active (`dbus fn describe NAME` lists them)"),
    help="The earlier version to make active.",
)
@zookeeper_options
def rollback(name: str, to: str, zk: ZooKeeperOptions) -> None:
    """Make an earlier version of NAME active again."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import FunctionStore

        previous = FunctionStore(client, settings).rollback(name, to)
    click.echo(f"{name}: active {to} (was {previous or '(none)'})")


@fn.command("delete")
@click.argument("name")
@zookeeper_options
def delete(name: str, zk: ZooKeeperOptions) -> None:
    """Stop running NAME everywhere and remove all its versions."""
    with zk.open() as (client, settings):
        from dbus_fn.coordination import FunctionStore

        versions = FunctionStore(client, settings).delete(name)
    click.echo(f"Deleted {name} ({len(versions)} version{'s' if len(versions) != 1 else ''})")
