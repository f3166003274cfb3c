"""How a runtime's planner acts on a request (a backfill, replay, repair, pause or
resume; ``dbus_spark.planning.request_models``) it takes from its mailbox
(``dbus_spark.planning.mailbox``), between two micro-batches: it checks it against
what the runtime runs (the deployment, the tables, the condition, what is being
read already) and starts the history reads it asks for, or refuses it with the one
line that says why. Nothing here needs Spark.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from dbus_fn.capture import BinlogReader, parse_position, position_to_json
from dbus_fn.errors import (
    ConfigError,
    DbusError,
    HistoryError,
    PositionError,
)
from dbus_fn.events import BinlogPosition
from dbus_fn.manifest import Destination, Manifest
from dbus_spark.config.kafka_source import KAFKA
from dbus_spark.planning.kafka_planner import KafkaPlanner
from dbus_spark.planning.mailbox import answer, pending
from dbus_spark.planning.request_models import (
    Answer,
    PaceRequest,
    RepairRequest,
    ReplayRequest,
    Request,
)
from dbus_spark.state.history.records import ReplayTask
from dbus_spark.state.history.tasks import HistoryStore
from dbus_spark.state.records import position_order

log = logging.getLogger("dbus.runtime")


def take_requests(
    checkpoint_dir: str,
    store: HistoryStore,
    readers: Mapping[str, BinlogReader],
    manifests: Sequence[Manifest],
    pace: Callable[[PaceRequest, str | None], Answer] | None = None,
    kafka: Mapping[str, KafkaPlanner] | None = None,
) -> None:
    """Answer every pending request (the runtime's driver, between micro-batches): a
    backfill starts on each source that has the tables, or is refused as a whole;
    ``pace`` answers a pause or a resume, on the one source a cluster's request is for
    or on all (None: this runtime cannot). ``kafka``: the runtime's Kafka sources, whose
    history is a replay of what their topics keep (``kafka_refusal``)."""
    kafka = kafka or {}
    for request, only in pending(checkpoint_dir):
        readers_of = {s: r for s, r in readers.items() if only in (None, s)}
        try:
            refusal = kafka_refusal(request, manifests, list(readers), list(kafka))
            reply = (
                Answer.refused(refusal) if refusal is not None
                else _reply(request, only, store, readers_of, manifests, pace, kafka)
            )  # fmt: skip
        except Exception as exc:  # what anyone may post must never stop the planner
            log.exception("request %s of %s could not be acted on", request.id, request.deployment)
            reply = Answer(False, f"the runtime could not act on the request ({exc}); check "
                           "what it names and ask again")  # fmt: skip
        answer(checkpoint_dir, request, reply)


def kafka_refusal(
    request: Request, manifests: Sequence[Manifest], binlogs: Sequence[str], kafka: Sequence[str]
) -> HistoryError | None:
    """Why a request cannot act on a Kafka source (``dbus_spark.config.kafka_source``), if it
    names one or its deployment reads only those: a topic's retention, not a table, is
    its history (a replay reads what they keep), and its reads go with the stream."""
    manifest = next((m for m in manifests if m.name == request.deployment), None)
    if manifest is None or not kafka:
        return None
    reads = [s for s in kafka if manifest.captures(s)]
    named = getattr(request, "source", None)
    if isinstance(request, ReplayRequest) or not reads:
        return None
    if named is not None and named not in kafka:
        return None
    if isinstance(request, PaceRequest):
        return HistoryError(
            f"{request.deployment} reads the Kafka source {reads[0]}, which is read with the "
            "stream and cannot be held: pause and resume act on binlog sources; stop the "
            "runtime, or undeploy the deployment, to hold it"
        )
    mine = [s for s in binlogs if manifest.captures(s)]
    if named is None and mine:
        return None  # its binlog sources are read; its Kafka ones have no history here
    return HistoryError(
        f"{request.deployment} reads the Kafka source {named or reads[0]}, whose history is "
        "its topics' retention, not a table: backfill and repair read tables; replay what "
        f"the topics keep (dbus fn replay {request.deployment} --from TIME)"
    )


def _reply(
    request: Request,
    only: str | None,
    store: HistoryStore,
    readers: Mapping[str, BinlogReader],
    manifests: Sequence[Manifest],
    pace: Callable[[PaceRequest, str | None], Answer] | None,
    kafka: Mapping[str, KafkaPlanner],
) -> Answer:
    if isinstance(request, PaceRequest):
        refusal = HistoryError(
            "this runtime pauses no deployment: it runs with --detach-after 0, where "
            "every deployment goes with the stream; start it with --detach-after above "
            "0 to pause one"
        )
        return pace(request, only) if pace else Answer.refused(refusal)
    if isinstance(request, ReplayRequest):
        try:
            started = start_replay(store, readers, manifests, request, kafka)
        except DbusError as exc:
            return Answer.refused(exc)
        return Answer(True, f"started replaying {len(started)} source(s)", tuple(started))
    started: list[tuple[str, str]] = []
    problems: list[str] = []
    for source, reader in readers.items():
        try:
            if isinstance(request, RepairRequest):
                tasks = [
                    store.repair(
                        reader, manifests, request.deployment, item.table, item.keys,
                        tuple((d.destination, d.key) for d in item.deletes),
                    )
                    for item in request.items
                    if item.source == source
                ]  # fmt: skip
            else:
                tasks = store.backfill(
                    reader, manifests, request.deployment, request.tables, request.where
                )
        except HistoryError as exc:
            problems.append(str(exc))
            continue
        started += [(source, task.id) for task in tasks]
    if started:
        return Answer(True, f"started {len(started)} table read(s)", tuple(started))
    return Answer(False, problems[0] if problems else "no source runs here")


def start_replay(
    store: HistoryStore,
    readers: Mapping[str, BinlogReader],
    manifests: Sequence[Manifest],
    request: ReplayRequest,
    kafka: Mapping[str, KafkaPlanner] | None = None,
) -> list[tuple[str, str]]:
    """Check a replay against the sources and start it on each; nothing starts if any
    part is refused. A Kafka source (``kafka``) replays what its topics keep."""
    kafka = kafka or {}
    manifest = next((m for m in manifests if m.name == request.deployment), None)
    if manifest is None:
        names = ", ".join(sorted(m.name for m in manifests)) or "none"
        raise HistoryError(
            f"no deployment {request.deployment!r} runs here (it runs: {names}); name one of them"
        )
    check_replay(request, manifest, [*readers, *kafka])
    route = None if request.route is None else str(Destination.parse(request.route))
    sources = [
        name for name in [*readers, *kafka]
        if (request.source in (None, name))
        and manifest.captures(name)
    ]  # fmt: skip
    if not sources:
        raise HistoryError(f"no source {request.source!r} runs here for {request.deployment!r}")
    since, start_text = time_or_position(request.start)
    until, end_text = time_or_position(request.end) if request.end else (None, None)
    if start_text is not None and len(sources) > 1:
        raise HistoryError(
            f"--from {request.start} is a position of one source; name it with --source "
            f"({', '.join(sources)})"
        )
    replays = []
    for name in sources:
        if name in kafka:
            first, last = kafka[name].replay_bounds(since, start_text, until)
            replays.append((name, ReplayTask(request.deployment, {KAFKA: first}, {KAFKA: last},
                                             route=route, since=since, until=until)))  # fmt: skip
            continue
        reader = readers[name]
        try:
            start = reader.resolve_start(
                "earliest" if start_text is None else parse_position(start_text)
            )
        except PositionError as exc:
            raise PositionError(
                f"{exc.message.split('; choose')[0]}; replay only what the binlog still "
                f"holds, or read the tables again with `dbus fn backfill {request.deployment}`",
                source=name, position=request.start, choices=("backfill",),
            ) from None  # fmt: skip
        latest = reader.master_position()
        end = latest if end_text is None else reader.resolve_start(parse_position(end_text))
        if end.file and start.file and position_order(end) < position_order(start):
            raise HistoryError(f"--to {request.end} comes before --from {request.start}")
        replays.append((name, ReplayTask(
            request.deployment, position_to_json(start), position_to_json(end), route=route,
            since=since, until=until,
        )))  # fmt: skip
    running = [n for n, r in replays if (o := store.replays(n).get(r.deployment)) and not
               o.finished]  # fmt: skip
    if running:
        raise HistoryError(
            f"a replay of {request.deployment!r} is running on {running[0]}; wait for it "
            "to end, then ask again"
        )
    return [(name, store.replay(name, replay).id) for name, replay in replays]


def check_replay(
    request: ReplayRequest, manifest: Manifest | None, sources: Sequence[str] | None
) -> None:
    """Refuse at once what a replay request gets wrong without a source to ask: a
    position that does not parse, a time still to come, an end before its start (two
    times, or two positions of one file), a ``--route`` that is the deployment's own
    destination (``manifest``, when known) and a ``--source`` not among ``sources``
    (when known). ``HistoryError`` or ``ConfigError``, exit 2."""
    if sources is not None and request.source is not None and request.source not in sources:
        raise HistoryError(
            f"--source {request.source!r} is not a source here (the sources: "
            f"{', '.join(sorted(sources)) or 'none'}); name one of them"
        )
    bounds = [("--from", request.start), ("--to", request.end)]
    parsed = {flag: _replay_bound(flag, text) for flag, text in bounds if text is not None}
    since = parsed["--from"]
    until = parsed.get("--to")
    if isinstance(since, float) and since > time.time():
        raise HistoryError(
            f"--from {request.start} is in the future (times are UTC unless they say): "
            "nothing has been written there to replay; give a time that has passed"
        )
    ordered = None if until is None else _comparable_bounds(since, until)
    if ordered is not None and ordered[1] < ordered[0]:
        raise HistoryError(f"--to {request.end} comes before --from {request.start}; swap them")
    route = None if request.route is None else Destination.parse(request.route)
    if manifest is not None and route is not None:
        own = [manifest.default_route, manifest.dead_letter_route]
        if route in own:
            raise HistoryError(
                f"--route {route} is deployment {manifest.name!r}'s own destination, where "
                "its live results go; name a shadow one (such as "
                f"{route.scheme}://{route.name}.shadow), or leave --route out to replay into "
                "the destinations its routes name"
            )


def _replay_bound(flag: str, text: str) -> float | BinlogPosition:
    moment, position = time_or_position(text)
    if position is None:
        assert moment is not None
        return moment
    try:
        return parse_position(position)
    except ConfigError as exc:
        raise ConfigError(
            f"{flag} {text!r} is neither a time nor a position ({exc.message}; or an ISO "
            "time such as 2026-11-25T08:00:00)",
            setting="position",
        ) from None


def _comparable_bounds(
    since: float | BinlogPosition, until: float | BinlogPosition
) -> tuple[float, float] | None:
    """Two times, or two positions in one binlog file, as numbers in their order; None
    when only the source can order them (a GTID, a time against a position)."""
    if isinstance(since, float) and isinstance(until, float):
        return since, until
    if (
        isinstance(since, BinlogPosition)
        and isinstance(until, BinlogPosition)
        and since.file
        and since.file == until.file
    ):
        return float(since.pos), float(until.pos)
    return None


def time_or_position(text: str) -> tuple[float | None, str | None]:
    """An ISO time (epoch seconds) or a position's text."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None, text
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp(), None


__all__ = ["check_replay", "start_replay", "take_requests", "time_or_position"]
