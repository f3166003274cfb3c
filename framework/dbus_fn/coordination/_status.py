"""``cluster_status``: one read of a cluster's whole state, for people and scripts."""

from __future__ import annotations

import calendar
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from dbus_fn.coordination._client import ZooKeeperSettings, load
from dbus_fn.coordination._registry import FunctionStore
from dbus_fn.coordination._sources import SourceReference, SourceRegistry
from dbus_fn.errors import DbusError
from dbus_fn.events import BinlogPosition


@dataclass(frozen=True, slots=True)
class RuntimeStatus:
    id: str
    host: str
    pid: int
    capacity: float
    started: str
    api: str = ""
    """Where it serves its metrics, API and dashboard ("" when off)."""


@dataclass(frozen=True, slots=True)
class SourceStatus:
    name: str
    registered: bool
    owner: str | None
    owner_running: bool
    epoch: int | None
    position: dict[str, Any] | None
    committed_by: str | None
    committed_at: str | None
    lag_bytes: int | None = None
    lag_problem: str | None = None
    """Why the lag is unknown, when it was asked for and could not be had."""
    released: str | None = None
    """When the leader released the source from its last owner (UTC); it has no
    owner until the handoff has passed."""
    handoff: float | None = None
    """The handoff of the assignment: of its owner, or of the owner it was released from."""
    handoff_left: float | None = None
    """Seconds of a released source's handoff still to go, by this machine's clock."""
    history: dict[str, str] = field(default_factory=dict)
    """Per history task (``deployment:table``, ``deployment:replay``), how far it got
    as committed with the position: rows and chunks read, or done."""
    pace: dict[str, str] = field(default_factory=dict)
    """Per deployment not with the source's stream (paused, detached and why, catching
    up), where it stands, as committed with the position."""

    def owner_text(self) -> str:
        if self.released is not None:
            left = ""
            if self.handoff_left is not None:
                left = f", ~{self.handoff_left:.1f} s left" if self.handoff_left > 0 else ", due"
            return (
                f"- epoch {self.epoch} handing off (released {self.released}, "
                f"handoff {self.handoff or 0:g} s{left})"
            )
        if not self.owner:
            return "unassigned"
        owner = f"{self.owner} epoch {self.epoch}"
        return owner if self.owner_running else owner + " (not running)"


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster: str
    root: str
    runtimes: tuple[RuntimeStatus, ...]
    leader: str | None
    term: int | None
    epoch: int
    sources: tuple[SourceStatus, ...]
    functions: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [
            f"cluster {self.cluster} ({self.root})",
            f"leader {self.leader or '(none)'}  term {self.term if self.term is not None else '-'}"
            f"  assignment epoch {self.epoch}",
            f"runtimes ({len(self.runtimes)}):",
        ]
        out += [
            f"  {r.id}  host={r.host} pid={r.pid} capacity={r.capacity:g} started={r.started}"
            + (f" api={r.api}" if r.api else "")
            for r in self.runtimes
        ]
        out.append(f"sources ({len(self.sources)}):")
        for s in self.sources:
            where = "(none)"
            if s.position:
                file, gtid = s.position.get("file"), s.position.get("gtid")
                where = f"{file}:{s.position.get('pos', '')}" if file else ""
                if gtid:
                    where = f"{where}@{gtid}" if where else f"gtid {gtid}"
            owner = s.owner_text()
            gone = "" if s.registered else "  (removed)"
            lag = ""
            if s.lag_bytes is not None:
                lag = f"  lag {s.lag_bytes} bytes"
            elif s.lag_problem:
                lag = f"  lag unknown ({s.lag_problem})"
            out.append(f"  {s.name}  {owner}  position {where}{gone}{lag}")
            out += [f"    history {task}: {text}" for task, text in sorted(s.history.items())]
            out += [f"    pace {name}: {text}" for name, text in sorted(s.pace.items())]
        out.append(f"functions ({len(self.functions)}):")
        out += [f"  {name} {version}" for name, version in sorted(self.functions.items())]
        return out


def history_progress(section: dict[str, Any]) -> dict[str, str]:
    """Per task of a committed history section, its progress as one phrase."""
    out = {}
    for task in section.get("tasks", []):
        chunks, rows = len(task.get("done", [])), int(task.get("rows", 0))
        estimate = int(task.get("estimated_rows", 0))
        of = f"/~{estimate}" if estimate and not task.get("finished") else ""
        state = "done" if task.get("finished") else "reading"
        first = int(task.get("run", 1)) == 1 and not task.get("where")
        kind = (
            "repair" if task.get("repair")
            else "bootstrap" if task.get("bootstrap", first)
            else "backfill"
        )  # fmt: skip
        out[f"{task['deployment']}:{task['table']}"] = (
            f"{kind} {state}, {rows}{of} rows in {chunks} chunks"
        )
    for replay in section.get("replays", []):
        state = "done" if replay.get("finished") else "running"
        out[f"{replay['deployment']}:replay"] = f"replay {state}, {int(replay.get('rows', 0))} rows"
    return out


def pace_progress(section: dict[str, Any]) -> dict[str, str]:
    """Per deployment of a committed pace section (not with the stream), its state,
    position and, unless paused, why, as one phrase."""
    out = {}
    for name, entry in section.items():
        position = entry.get("position") or {}
        state = str(entry.get("state", "detached"))
        text = f"{state} at {position.get('file', '?')}:{position.get('pos', '?')}"
        if state != "paused" and entry.get("reason"):
            text += f" ({entry['reason']})"
        out[name] = text
    return out


def _data(client: KazooClient, path: str) -> dict[str, Any]:
    try:
        raw, _ = client.get(path)
    except NoNodeError:
        return {}
    return load(raw)


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


class LagProbe(Protocol):
    """Bytes of a source's binlog after a position (``binlog_lag`` is one)."""

    def __call__(self, source: SourceReference, position: BinlogPosition) -> int | None: ...


def _lag(
    probe: LagProbe,
    client: KazooClient,
    settings: ZooKeeperSettings,
    name: str,
    position: dict[str, Any],
) -> tuple[int | None, str | None]:
    from dbus_fn.capture import position_from_json

    try:
        reference = SourceRegistry(client, settings).get(name)
        found = probe(reference, position_from_json(position))
    except DbusError as exc:
        # Messages of dbus errors never hold a DSN; keep the first clause.
        return None, str(exc).split(";")[0]
    return found, None if found is not None else "position not in the source's binlogs"


def _left(released: str | None, handoff: object) -> float | None:
    """Seconds until ``released`` + ``handoff`` (0 once passed); None if unknown."""
    if released is None or not isinstance(handoff, (int, float)):
        return None
    try:
        at = calendar.timegm(time.strptime(released, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None
    return max(0.0, at + handoff - time.time())


def cluster_status(
    client: KazooClient, settings: ZooKeeperSettings, *, lag: LagProbe | None = None
) -> ClusterStatus:
    """The cluster's state; with ``lag``, each committed source's distance to its end."""
    layout = settings.layout
    runtimes = []
    for runtime_id in _children(client, layout.runtimes):
        data = _data(client, layout.runtime(runtime_id))
        runtimes.append(
            RuntimeStatus(
                id=runtime_id,
                host=str(data.get("host", "")),
                pid=int(data.get("pid", 0)),
                capacity=float(data.get("capacity", 0)),
                started=str(data.get("started", "")),
                api=str(data.get("api", "")),
            )
        )
    leader = _data(client, layout.leader)
    live_leader = leader.get("runtime") if _children(client, layout.election) else None
    decision = _data(client, layout.assignments)
    registered = set(_children(client, layout.sources))
    assigned = set(_children(client, layout.assignments))
    committed = set(_children(client, layout.positions))
    sources = []
    for name in sorted(registered | assigned | committed):
        assignment = _data(client, layout.assignment(name)) if name in assigned else {}
        position = _data(client, layout.position(name)) if name in committed else {}
        released = assignment.get("released") if not assignment.get("runtime") else None
        handoff = assignment.get("handoff")
        lag_bytes, lag_problem = None, None
        if lag is not None and position.get("position") and name in registered:
            lag_bytes, lag_problem = _lag(lag, client, settings, name, position["position"])
        sources.append(
            SourceStatus(
                name=name,
                registered=name in registered,
                owner=assignment.get("runtime") or None,
                owner_running=assignment.get("runtime") in {r.id for r in runtimes},
                epoch=assignment.get("epoch"),
                position=position.get("position"),
                committed_by=position.get("runtime"),
                committed_at=position.get("committed"),
                lag_bytes=lag_bytes,
                lag_problem=lag_problem,
                released=released,
                handoff=handoff,
                handoff_left=_left(released, handoff),
                history=history_progress(position.get("history") or {}),
                pace=pace_progress((position.get("history") or {}).get("pace") or {}),
            )
        )
    functions = {
        name: version for name, (version, _) in FunctionStore(client, settings).active().items()
    }
    return ClusterStatus(
        cluster=settings.cluster,
        root=layout.root,
        runtimes=tuple(runtimes),
        leader=live_leader,
        term=leader.get("term"),
        epoch=int(decision.get("epoch", 0)),
        sources=tuple(sources),
        functions=functions,
    )
