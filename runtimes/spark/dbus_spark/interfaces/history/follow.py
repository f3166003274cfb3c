"""What `dbus fn backfill` and `replay` do: ask the runtime, then show the progress.

Progress is rows and chunks read, the rate and an ETA (from the server's row
estimate), as a progress bar on a terminal and as a plain line every few seconds
otherwise (a log, CI). It is read from the runtime's history file, so what the
bar shows is what the runtime has committed.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from dbus_fn.errors import ConfigError, DestinationError, HistoryError, ServiceUnreachableError
from dbus_fn.manifest import Destination
from dbus_spark.interfaces.history.target import CommittedHistory, deployment_name_check, runtime_at
from dbus_spark.planning.request_models import (
    Answer,
    BackfillRequest,
    ReplayRequest,
    Request,
    answer_from_json,
    request_to_json,
)
from dbus_spark.planning.requests import check_replay, time_or_position
from dbus_spark.state.checkpoint import progress_path
from dbus_spark.state.history.records import HistoryTask, ReplayTask
from dbus_spark.state.history.tasks import HistoryStore

if TYPE_CHECKING:
    from dbus_fn.coordination import ZooKeeperSettings

_TABLE = re.compile(r"^[^.\s]+\.[^.\s]+$")
PLAIN_EVERY = 5.0
ANSWER_TIMEOUT = 30.0


def backfill(
    deployment: str,
    tables: Sequence[str],
    where: str | None,
    *,
    checkpoint: str | None = None,
    cluster: ZooKeeperSettings | None = None,
    wait: bool = True,
    out: IO[str] | None = None,
    answer_timeout: float = ANSWER_TIMEOUT,
    token: str | None = None,
) -> list[Followed]:
    """Ask the runtime at ``checkpoint`` (or the runtimes of ``cluster``) to read
    ``tables`` (default: all of the deployment's) again for ``deployment``; follow
    it to the end if ``wait``."""
    out = out or sys.stderr
    bad = [t for t in tables if not _TABLE.match(t)]
    if bad:
        raise HistoryError(f"--table {bad[0]!r} is not db.table; name a table as db.table")
    if where is not None and not where.strip():
        raise HistoryError(
            "--where is empty; give a condition on the table's columns (such as "
            "\"updated_at > '2024-01-01'\"), or leave it out to read every row"
        )
    request = BackfillRequest(deployment, tuple(tables), where)
    if cluster is not None:
        return _ask_cluster(cluster, request, "backfill", wait=wait, out=out,
                            answer_timeout=answer_timeout)  # fmt: skip
    folder, config = runtime_at(checkpoint)
    manifest = deployment_name_check(folder, config, deployment)
    unsubscribed = [t for t in tables if not manifest.subscribes(t)]
    if unsubscribed:
        raise HistoryError(
            f"deployment {deployment!r} does not subscribe to {unsubscribed[0]} (its tables: "
            f"{', '.join(manifest.tables)}); name one of its tables",
            table=unsubscribed[0],
        )
    return _ask(folder, request, "backfill", wait=wait, out=out,
                answer_timeout=answer_timeout, token=token)  # fmt: skip


def replay(
    deployment: str,
    start: str,
    end: str | None = None,
    *,
    route: str | None = None,
    source: str | None = None,
    checkpoint: str | None = None,
    cluster: ZooKeeperSettings | None = None,
    wait: bool = True,
    out: IO[str] | None = None,
    answer_timeout: float = ANSWER_TIMEOUT,
    token: str | None = None,
) -> list[Followed]:
    """Ask the runtime at ``checkpoint`` to run ``deployment`` over the binlog from
    ``start`` (a position, a GTID state or an ISO time) to ``end`` (default: now)."""
    out = out or sys.stderr
    if route is not None:
        try:
            Destination.parse(route)
        except DestinationError as exc:
            raise ConfigError(f"--route {route!r} is not a destination: {exc}",
                              setting="route") from None  # fmt: skip
    request = ReplayRequest(deployment, start, end, route, source)
    if cluster is not None:
        return _ask_cluster(cluster, request, "replay", wait=wait, out=out,
                            answer_timeout=answer_timeout)  # fmt: skip
    folder, config = runtime_at(checkpoint)
    manifest = deployment_name_check(folder, config, deployment)
    check_replay(request, manifest, [binding.spec.name for binding in config.sources])
    return _ask(folder, request, "replay", wait=wait, out=out, answer_timeout=answer_timeout,
                token=token)  # fmt: skip


def ask(folder: str, request: Request, what: str, *, answer_timeout: float,
        token: str | None = None) -> Answer:  # fmt: skip
    """Ask the runtime at ``folder``, through its API (``dbus_spark.interfaces.api.client``), and
    wait for its answer; a refusal is raised. Ctrl-C meanwhile withdraws the request
    (``Interrupted``): a request the runtime did not take never runs."""
    from dbus_fn.cli._errors import Interrupted
    from dbus_spark.interfaces.api.client import ask_runtime, withdraw_at

    try:
        reply = ask_runtime(folder, request, token=token, timeout=answer_timeout)
    except KeyboardInterrupt:
        taken = withdraw_at(folder, request.id, token=token)
        if taken is None:
            raise Interrupted(
                f"interrupted: the {what} of {request.deployment} is withdrawn; no runtime "
                "had taken it, so nothing of it runs"
            ) from None
        if not taken.accepted:
            raise Interrupted(
                f"interrupted: the runtime refused the {what} of {request.deployment}: "
                f"{taken.message}"
            ) from None
        raise Interrupted(
            f"interrupted: the runtime had already taken the {what} of "
            f"{request.deployment} ({taken.message}); it goes on there"
        ) from None
    if not reply.accepted:
        reply.raise_refusal()
    return reply


def _ask(
    folder: str, request: Request, what: str, *, wait: bool, out: IO[str], answer_timeout: float,
    token: str | None,
) -> list[Followed]:  # fmt: skip
    reply = ask(folder, request, what, answer_timeout=answer_timeout, token=token)
    print(f"{what} of {request.deployment}: {reply.message}", file=out)
    store = HistoryStore(progress_path(folder))
    if not wait:
        return _tasks(store, reply.tasks)
    return follow(store, reply.tasks, out=out)


def _ask_cluster(
    settings: ZooKeeperSettings,
    request: BackfillRequest | ReplayRequest,
    what: str,
    *,
    wait: bool,
    out: IO[str],
    answer_timeout: float,
) -> list[Followed]:
    """Post ``request`` to the runtimes owning the cluster's sources; wait for every
    owner's answer; follow the accepted tasks in what they commit to ZooKeeper."""
    from dbus_fn.coordination import cluster_client, cluster_status

    with cluster_client(settings) as client:
        _deployed(client, settings, request.deployment)
        status = cluster_status(client, settings)
        if isinstance(request, ReplayRequest):
            check_replay(request, None, [s.name for s in status.sources if s.registered])
        only = request.source if isinstance(request, ReplayRequest) else None
        sources = _owned(settings, status, only)
        if (
            isinstance(request, ReplayRequest)
            and len(sources) > 1
            and time_or_position(request.start)[1] is not None
        ):
            raise HistoryError(
                f"--from {request.start} is a position of one source; name it with "
                f"--source ({', '.join(sources)})"
            )
        answers = _post(client, settings, request, sources, answer_timeout)
        replies = list(answers.values())
        accepted = [reply for reply in replies if reply.accepted]
        if not accepted:
            replies[0].raise_refusal()
        missing = sorted(set(sources) - set(answers))
        ids = [task for reply in accepted for task in reply.tasks]
        print(f"{what} of {request.deployment}: started {len(ids)} task(s) on "
              f"{', '.join(sorted(s for s, _ in ids))}"
              + (f"; no answer for {', '.join(missing)}" if missing else ""),
              file=out)  # fmt: skip
        history = CommittedHistory(client, settings, sorted({s for s, _ in ids}))
        if not wait:
            return _tasks(history, ids)
        return follow(history, ids, out=out)


def ask_cluster(
    settings: ZooKeeperSettings, request: Request, *, answer_timeout: float = ANSWER_TIMEOUT
) -> dict[str, Answer]:
    """Post ``request`` (a pause, a resume) to the runtimes owning the cluster's
    sources; per source, its owner's answer (a refusal from all is raised)."""
    from dbus_fn.coordination import cluster_client, cluster_status

    with cluster_client(settings) as client:
        _deployed(client, settings, request.deployment)
        sources = _owned(settings, cluster_status(client, settings), None)
        answers = _post(client, settings, request, sources, answer_timeout)
    if not any(reply.accepted for reply in answers.values()):
        next(iter(answers.values())).raise_refusal()
    return answers


def _deployed(client: Any, settings: ZooKeeperSettings, name: str) -> None:
    from dbus_fn.coordination import FunctionStore

    deployed = FunctionStore(client, settings).active()
    if name not in deployed:
        raise HistoryError(
            f"no deployment {name!r} is deployed in cluster {settings.cluster} (deployed: "
            f"{', '.join(sorted(deployed)) or 'none'}); name one of them"
        )


def _owned(settings: ZooKeeperSettings, status: Any, only: str | None) -> list[str]:
    """The cluster's sources a runtime owns now (only ``only``, if given)."""
    sources = [s.name for s in status.sources if s.registered and s.owner]
    if only is not None:
        sources = [s for s in sources if s == only]
    if not sources:
        raise ServiceUnreachableError(
            f"no runtime of cluster {settings.cluster} owns a source"
            + (f" named {only!r}" if only else "")
            + "; start one with `dbus runtime start --cluster`, then ask again",
            service="runtime",
        )
    return sources


def _post(
    client: Any, settings: ZooKeeperSettings, request: Request, sources: list[str],
    answer_timeout: float,
) -> dict[str, Answer]:  # fmt: skip
    """Post ``request`` for ``sources``; per source, its owner's answer, as they come
    within ``answer_timeout`` seconds (none at all is an error)."""
    from dbus_fn.coordination import RequestBox

    box = RequestBox(client, settings)
    posted = box.post(request_to_json(request), sources)
    deadline = time.monotonic() + answer_timeout
    try:
        while len(answers := box.answers(posted)) < len(sources):
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        box.withdraw(posted)
    if not answers:
        raise ServiceUnreachableError(
            f"no runtime of cluster {settings.cluster} answered within "
            f"{answer_timeout:.0f}s for {', '.join(sources)}; check `dbus cluster "
            "status`, then ask again",
            service="runtime",
        )
    return {source: answer_from_json(answer) for source, answer in answers.items()}


Followed = HistoryTask | ReplayTask


def _tasks(store: HistoryStore, ids: Sequence[tuple[str, str]]) -> list[Followed]:
    store.reload()
    found: list[Followed] = []
    for source, task in ids:
        if task.endswith(":replay"):
            replay = store.replays(source).get(task.rsplit(":", 1)[0])
            found += [replay] if replay is not None else []
        elif task in store.tasks(source):
            found.append(store.tasks(source)[task])
    return found


def _waits(store: HistoryStore, ids: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Per deployment whose sinks refused its last history read, why (``refused``)."""
    return {
        deployment: wait["reason"]
        for source in sorted({source for source, _ in ids})
        for deployment, wait in store.waiting(source).items()
    }


def _line(task: Followed, now: float, waiting: str | None = None) -> str:
    elapsed = max(now - task.started, 1e-6)
    rate = task.rows / elapsed
    estimate = task.estimated_rows if isinstance(task, HistoryTask) else 0
    chunks = f" in {task.chunks} chunks" if isinstance(task, HistoryTask) else ""
    total = f"/~{estimate}" if estimate else ""
    if task.finished:
        return (f"{task.id}: done, {task.rows} rows{chunks}, "
                f"{task.rows / max(task.finished - task.started, 1e-6):.0f} rows/s")  # fmt: skip
    left = max(estimate - task.rows, 0)
    eta = f", ETA {left / rate:.0f}s" if rate > 0 and estimate else ""
    wait = f", waiting for its sinks ({waiting}); read again after a backoff" if waiting else ""
    return (f"{task.id}: {task.rows}{total} rows{chunks.replace(' in', ',')}, {rate:.0f} rows/s"
            f"{eta}{wait}")  # fmt: skip


def follow(
    store: HistoryStore, ids: Sequence[tuple[str, str]], *, out: IO[str]
) -> list[Followed]:
    """Show the tasks' progress until every one has read its last chunk. Ctrl-C stops
    the showing only (``Interrupted``): the runtime took the reads and ends them."""
    from dbus_fn.cli._errors import Interrupted

    try:
        return _follow(store, ids, out)
    except KeyboardInterrupt:
        reads = ", ".join(f"{task} on {source}" for source, task in ids)
        raise Interrupted(
            f"interrupted: no longer showing the progress; the runtime had already taken "
            f"{reads or 'nothing'} and reads on to the end"
        ) from None


def _follow(
    store: HistoryStore, ids: Sequence[tuple[str, str]], out: IO[str]
) -> list[Followed]:
    if out.isatty():
        return _follow_bars(store, ids, out)
    last = 0.0
    while True:
        tasks = _tasks(store, ids)
        now = time.time()
        # A cluster's tasks show up once committed with a position.
        ended = len(tasks) == len(ids) and all(t.finished for t in tasks)
        if ended or now - last >= PLAIN_EVERY:
            waits = _waits(store, ids)
            for task in tasks:
                print(_line(task, now, waits.get(task.deployment)), file=out, flush=True)
            last = now
        if ended:
            return tasks
        time.sleep(0.5)


def _follow_bars(
    store: HistoryStore, ids: Sequence[tuple[str, str]], out: IO[str]
) -> list[Followed]:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("rows · {task.fields[chunks]} chunks · {task.fields[rate]} rows/s"),
        TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, console=Console(file=out)) as progress:
        bars = {}
        while True:
            tasks = _tasks(store, ids)
            now = time.time()
            for task in tasks:
                rate = f"{task.rows / max(now - task.started, 1e-6):.0f}"
                estimate = task.estimated_rows if isinstance(task, HistoryTask) else 0
                total = task.rows if task.finished else max(estimate, task.rows)
                chunks = task.chunks if isinstance(task, HistoryTask) else "-"
                if task.id not in bars:
                    bars[task.id] = progress.add_task(task.id, total=total or None,
                                                      chunks=0, rate="0")  # fmt: skip
                progress.update(bars[task.id], completed=task.rows, total=total or None,
                                chunks=chunks, rate=rate)  # fmt: skip
            if len(tasks) == len(ids) and all(t.finished for t in tasks):
                return tasks
            time.sleep(0.5)


__all__ = ["ask", "backfill", "follow", "replay"]
