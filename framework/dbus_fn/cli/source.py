"""``dbus source``: add, list, tail and record binlog sources."""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import IO, Any, NamedTuple

import click

from dbus_fn.cli._options import (
    FROM,
    KEEP_HELPER_TABLES,
    FiniteFloatRange,
    env_option,
    start_point,
)
from dbus_fn.cli._output import check_output, output_file
from dbus_fn.errors import SourceError


def _capture() -> Any:
    import dbus_fn.capture as capture

    return capture


def _spec(source: str, tables: tuple[str, ...], keep_helper_tables: bool | None) -> Any:
    """A stored source by name, or a DSN given directly; ``tables`` and
    ``keep_helper_tables``, when given, override what the stored source says."""
    capture = _capture()
    if "://" in source:
        return capture.SourceSpec("cli", source, tables or ("*.*",), bool(keep_helper_tables))
    spec = capture.SourceStore().get(source)
    return capture.SourceSpec(
        spec.name,
        spec.dsn,
        tables or spec.tables,
        spec.keep_helper_tables if keep_helper_tables is None else keep_helper_tables,
    )


def _start(reader: Any, value: str) -> Any:
    start = start_point(value)
    if start == "snapshot":
        return start  # read() hands out the tables first, then the binlog from there
    return reader.resolve_start(start)


def _reader(spec: Any, replica_id: int | None) -> Any:
    capture = _capture()
    chosen = (
        replica_id
        if replica_id is not None
        else capture.replica_id_for(f"{spec.name}/cli/{time.time_ns()}")
    )
    return capture.BinlogReader(spec, chosen)


def _items(source: str, read: ReadOptions, undecoded: list[Any]) -> Any:
    """Row and DDL events of the source, plus commits of transactions that had rows.
    Rows the capture could not decode are said on stderr, one line each, and kept in
    ``undecoded`` (``_undecoded_error`` ends the command with them)."""
    from dbus_fn.events import TransactionCommit, UndecodedRows

    reader = _reader(_spec(source, read.tables, read.keep_helper_tables), read.replica_id)
    try:
        for item in reader.read(_start(reader, read.start), idle_timeout=read.idle_timeout):
            if isinstance(item, UndecodedRows):
                undecoded.append(item)
                click.echo(f"dbus: {_undecoded_text(item)}; they are not in the output",
                           err=True)  # fmt: skip
                continue
            if isinstance(item, TransactionCommit) and not item.rows:
                continue
            yield item
    finally:
        reader.close()


def _undecoded_text(rows: Any) -> str:
    return (
        f"the {rows.op.value} rows of {rows.qualified_table} at {rows.position} from row "
        f"{rows.row_index} could not be decoded ({rows.reason})"
    )


def _undecoded_error(undecoded: list[Any]) -> None:
    """Exit 1 after a read that met rows it could not decode: what was read is out."""
    if undecoded:
        raise SourceError(
            f"{len(undecoded)} rows event(s) could not be decoded, the first: "
            f"{_undecoded_text(undecoded[0])}; every other change was written; a runtime "
            "sends such rows to the dead letters of the deployments that read the table"
        )


def _write(
    items: Any, out: IO[bytes], max_events: int | None, encode: Any = None
) -> int:
    """Write items one per line (JSON CloudEvents unless ``encode`` says otherwise),
    flushed; stop at Ctrl-C."""
    from dbus_fn.json_format import event_to_json

    encode = encode or event_to_json
    count = 0
    try:
        for item in items:
            out.write(encode(item) + b"\n")
            out.flush()
            count += 1
            if max_events is not None and count >= max_events:
                break
    except KeyboardInterrupt:
        pass
    return count


def _line(item: Any) -> bytes:
    """One short line for a person: what happened, where, and the row as JSON text."""
    from dbus_fn.cloudevent import primary_key_text, row_json, time_text, utc_time
    from dbus_fn.events import RowChange, SchemaChange

    when = time_text(utc_time(item.commit_time))
    if isinstance(item, RowChange):
        row, _ = row_json(item)
        text = json.dumps(row, ensure_ascii=False, separators=(", ", ": "))
        key = primary_key_text(item) or "(no key)"
        line = f"{when} {item.op.value} {item.qualified_table} {key} {text}"
    elif isinstance(item, SchemaChange):
        line = f"{when} ddl {item.database} {' '.join(item.statement.split())}"
    else:
        line = f"{when} commit {item.position} ({item.rows} rows)"
    return line.encode("utf-8")


_TABLES = click.option(
    "--tables", "-t", multiple=True, metavar="DB.TABLE",
    help="table patterns to capture (globs; repeatable); default: the source's",
)  # fmt: skip
_MAX_EVENTS = click.option(
    "--max-events", type=click.IntRange(min=1), default=None, help="stop after N events"
)
_IDLE_TIMEOUT = click.option(
    "--idle-timeout", type=FiniteFloatRange(min=0, min_open=True), default=None,
    help="stop after S idle seconds (default: run until interrupted)",
)  # fmt: skip
_SERVER_ID = env_option(
    "--server-id", "replica_id", type=int, env="DBUS_SERVER_ID",
    help="replication server_id (unique per connection); default: a new one per run",
)  # fmt: skip


class ReadOptions(NamedTuple):
    """What every command that reads a source is told: tables, start, id and limits."""

    tables: tuple[str, ...]
    keep_helper_tables: bool | None
    start: str
    replica_id: int | None
    max_events: int | None
    idle_timeout: float | None


def _read_options(command: Any) -> Any:
    """Add the ``ReadOptions`` to ``command``, which takes them as ``read``."""

    @functools.wraps(command)
    def collect(**values: Any) -> Any:
        read = ReadOptions(**{name: values.pop(name) for name in ReadOptions._fields})
        return command(read=read, **values)

    for option in (_IDLE_TIMEOUT, _MAX_EVENTS, _SERVER_ID, FROM, KEEP_HELPER_TABLES, _TABLES):
        collect = option(collect)
    return collect


@click.group()
def source() -> None:
    """Binlog sources: add and list them, watch or record their events.

    Named sources are kept in $DBUS_SOURCES_FILE, else $DBUS_HOME/sources.json,
    else ~/.config/dbus/sources.json (mode 0600: it holds their passwords).
    """


@source.command("add")
@click.argument("name")
@click.argument("dsn")
@_TABLES
@KEEP_HELPER_TABLES
@click.option("--replace", is_flag=True, help="overwrite an existing source of that name")
@click.option("--no-check", is_flag=True,
              help="store it without connecting (by default the server must answer, let the "
                   "user in and have a ROW binlog)")  # fmt: skip
def add(
    name: str,
    dsn: str,
    tables: tuple[str, ...],
    keep_helper_tables: bool | None,
    replace: bool,
    no_check: bool,
) -> None:
    """Add source NAME at DSN (mysql://user:password@host:port; a primary and its
    replicas as mysql://user:password@db1:3306,db2:3306, followed by GTID when the
    primary fails over).

    The servers are checked first: each answers, the user logs in and may read the
    binlog position, and its binlog settings can be captured (of several servers,
    one that does not answer is a warning). Nothing is stored if it fails.
    """
    capture = _capture()
    spec = capture.SourceSpec(name, dsn, tables or ("*.*",), bool(keep_helper_tables))
    store = capture.SourceStore()
    if not no_check:
        _check_servers(spec)
    store.add(spec, replace=replace)
    click.echo(f"added source {name!r}: {spec.redacted_dsn} tables {', '.join(spec.tables)} "
               f"(in {store.path})")  # fmt: skip


def _check_servers(spec: Any) -> None:
    """Every server of ``spec`` that answers lets the user in, may read its binlog
    position and has a binlog that can be captured; of several, one may be down (a
    failover moves past it), not all."""
    from dbus_fn.errors import SourceUnreachableError

    reader = _reader(spec, None)
    down: list[SourceUnreachableError] = []
    try:
        for index in range(len(spec.servers)):
            reader.use_server(index)
            try:
                reader.server_info()
                reader.master_position()
            except SourceUnreachableError as exc:
                down.append(exc)
    finally:
        reader.close()
    if len(down) == len(spec.servers) == 1:
        raise down[0]
    if len(down) == len(spec.servers):
        each = "; ".join(f"{e.server or '?'}: {e.reason or e}" for e in down)
        raise SourceUnreachableError(
            f"source {spec.name!r}: none of its {len(down)} servers answers ({each}); check "
            "that they run and the DSN's hosts and ports",
            source=spec.name,
        )
    for away in down:
        click.echo(f"warning: {away}", err=True)


@source.command("list")
@click.option("--json", "as_json", is_flag=True, help="print JSON (passwords masked)")
def list_sources(as_json: bool) -> None:
    """List the sources (passwords are never printed)."""
    store = _capture().SourceStore()
    specs = store.list()
    if as_json:
        click.echo(json.dumps([
            {"name": s.name, "dsn": s.redacted_dsn, "tables": list(s.tables),
             "keep_helper_tables": s.keep_helper_tables} for s in specs
        ], indent=2))  # fmt: skip
        return
    if not specs:
        click.echo(f"no sources yet (in {store.path}); add one with: dbus source add NAME DSN")
        return
    for spec in specs:
        kept = "\tkeep-helper-tables" if spec.keep_helper_tables else ""
        click.echo(f"{spec.name}\t{spec.redacted_dsn}\t{','.join(spec.tables)}{kept}")


@source.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove source NAME."""
    _capture().SourceStore().remove(name)
    click.echo(f"removed source {name!r}")


@source.command("tail")
@click.argument("source_name", metavar="SOURCE")
@_read_options
@click.option("--format", "form", type=click.Choice(["json", "line"]), default="json",
              show_default=True,
              help="json: one CloudEvent per line; line: a short line per change for a "
                   "person (non-ASCII shown as text)")  # fmt: skip
@click.option("--no-commits", is_flag=True, help="leave out the transaction commit markers")
def tail(source_name: str, read: ReadOptions, form: str, no_commits: bool) -> None:
    """Print SOURCE's changes live, one per line.

    SOURCE is a name from `dbus source list` or a DSN.
    """
    undecoded: list[Any] = []
    items = _items(source_name, read, undecoded)
    if no_commits:
        from dbus_fn.events import TransactionCommit

        items = (item for item in items if not isinstance(item, TransactionCommit))
    _write(items, sys.stdout.buffer, read.max_events, _line if form == "line" else None)
    _undecoded_error(undecoded)


@source.command("record")
@click.argument("source_name", metavar="SOURCE")
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path),
              help="the JSONL file to write (for `dbus fn run-local --events`)")  # fmt: skip
@click.option("--force", is_flag=True, help="replace the output file if it exists")
@click.option("--append", is_flag=True, help="add to the output file if it exists")
@_read_options
def record(source_name: str, output: Path, force: bool, append: bool, read: ReadOptions) -> None:
    """Record SOURCE's changes as CloudEvents to a JSONL file the local emulator reads.

    The file is written only if the recording starts: a bad --from or an unreachable
    source leaves an existing file as it was. Ctrl-C ends a recording and keeps it.
    """
    check_output(output, force=force, append=append)
    undecoded: list[Any] = []
    with output_file(output, binary=True, append=append) as out:
        count = _write(_items(source_name, read, undecoded), out, read.max_events)
    click.echo(f"recorded {count} events to {output}", err=True)
    _undecoded_error(undecoded)
