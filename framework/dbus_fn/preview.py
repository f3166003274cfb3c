"""Two versions of a deployment over the same real events, side by side.

``dbus fn preview PATH`` takes the recent events a running runtime kept of the
tables PATH subscribes to, the outcome the deployed version gives each one (the
runtime runs it, nothing is written anywhere) and runs the local version over
the same events here; the dashboard's preview page compares the deployed version
with the previous one the same way. Per event, each side is an ``Outcome``:
filtered or not, the rows delivered and where, the dead letters and their
errors. ``compare`` pairs two lists of outcomes and sums up what changes: routes
that appear or vanish, fields added or removed, dead letters that are new.

Everything here is plain data (``to_json`` / ``from_json``): the runtime sends
outcomes over its API, the command and the page read them back.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dbus_fn.cloudevent import event_id, event_parts, from_cloudevent
from dbus_fn.errors import ConfigError, DbusError
from dbus_fn.events import Operation, RowChange
from dbus_fn.json_format import event_from_json
from dbus_fn.pipeline import Pipeline
from dbus_fn.registry import LoadedDeployment

DEFAULT_EVENTS = 100
"""How many of the newest events a preview runs over unless told."""

__all__ = [
    "DEFAULT_EVENTS",
    "Comparison",
    "Outcome",
    "Sent",
    "compare",
    "event_summary",
    "outcomes",
    "parse_since",
    "render",
    "row_changes",
]


@dataclass(frozen=True, slots=True)
class Sent:
    """One record a version sends for an event: a row to a destination, or a dead letter."""

    destination: str
    row: Mapping[str, Any] | None = None
    """The delivered row as its CloudEvent carries it (JSON values); None for a dead letter."""
    error: str | None = None
    """For a dead letter, its one-line error."""

    @property
    def dead_letter(self) -> bool:
        return self.error is not None

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"destination": self.destination, "dead_letter": True, "error": self.error}
        return {"destination": self.destination, "dead_letter": False, "row": self.row}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sent:
        if data.get("dead_letter"):
            return cls(str(data["destination"]), error=str(data.get("error", "")))
        return cls(str(data["destination"]), row=dict(data.get("row") or {}))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one version does with one event."""

    subscribed: bool
    """False: the version does not read the event's table (it sends nothing)."""
    filtered: bool = False
    sent: tuple[Sent, ...] = ()

    @property
    def routes(self) -> frozenset[str]:
        return frozenset(s.destination for s in self.sent if not s.dead_letter)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(k for s in self.sent if s.row is not None for k in s.row)

    @property
    def dead_letters(self) -> tuple[Sent, ...]:
        return tuple(s for s in self.sent if s.dead_letter)

    def to_json(self) -> dict[str, Any]:
        return {
            "subscribed": self.subscribed,
            "filtered": self.filtered,
            "sent": [s.to_json() for s in self.sent],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Outcome:
        return cls(
            subscribed=bool(data.get("subscribed", True)),
            filtered=bool(data.get("filtered", False)),
            sent=tuple(Sent.from_json(s) for s in data.get("sent", ())),
        )

    def text(self) -> str:
        """One line: what the version did."""
        if not self.subscribed:
            return "not subscribed to this table"
        if self.filtered and not self.sent:
            return "filtered out"
        parts = []
        for sent in self.sent:
            if sent.dead_letter:
                parts.append(f"dead letter to {sent.destination}: {sent.error}")
            else:
                parts.append(f"{sent.destination} {_compact(sent.row)}")
        return "; ".join(parts) or "sends nothing"


def _compact(row: Mapping[str, Any] | None, width: int = 100) -> str:
    text = json.dumps(row, separators=(",", ":"), sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def row_changes(events: Iterable[Mapping[str, Any]]) -> list[RowChange]:
    """The row changes of events in the structured JSON form (what a runtime's window
    holds); ``EventFormatError`` names one that is not a row event."""
    changes = []
    for data in events:
        changes.append(from_cloudevent(event_from_json(json.dumps(data), where="the window")))
    return changes


def outcomes(deployment: LoadedDeployment, changes: Sequence[RowChange]) -> list[Outcome]:
    """What ``deployment`` does with each change, run here and sent nowhere. A function
    that fails on an event gives that event a dead letter; the others go on."""
    pipeline = Pipeline(deployment)
    found = []
    for change in changes:
        if not deployment.subscribes(change.qualified_table):
            found.append(Outcome(subscribed=False))
            continue
        outcome = pipeline.process(change)
        sent = []
        for delivery in outcome.deliveries:
            try:
                _, data = event_parts(delivery.projected())
            except DbusError as exc:
                sent.append(Sent(str(delivery.destination), error=f"no CloudEvent form: {exc}"))
                continue
            image = data["before"] if change.op is Operation.DELETE else data["after"]
            sent.append(Sent(str(delivery.destination), row=image))
        for dead in outcome.dead_letters:
            sent.append(Sent(str(dead.destination), error=dead.error))
        found.append(Outcome(True, outcome.filtered, tuple(sent)))
    return found


def event_summary(change: RowChange) -> dict[str, Any]:
    """What names an event in a preview: id, table, operation, key, commit time."""
    return {
        "id": event_id(change),
        "source": change.source,
        "table": change.qualified_table,
        "op": str(change.op),
        "key": {c: _plain(change.row.get(c)) for c in change.primary_key},
        "time": change.commit_time.isoformat() if change.commit_time else None,
    }


def _plain(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two versions' outcomes over the same events, and what changes between them."""

    deployment: str
    left: str
    """What the left side is, e.g. ``deployed 3``."""
    right: str
    events: list[dict[str, Any]]
    left_outcomes: list[Outcome]
    right_outcomes: list[Outcome]
    summary: dict[str, Any] = field(default_factory=dict)

    def changed(self, index: int) -> bool:
        return self.left_outcomes[index] != self.right_outcomes[index]

    def to_json(self) -> dict[str, Any]:
        return {
            "deployment": self.deployment,
            "left": self.left,
            "right": self.right,
            "summary": self.summary,
            "events": [
                {
                    "event": event,
                    "changed": self.changed(i),
                    "left": self.left_outcomes[i].to_json(),
                    "right": self.right_outcomes[i].to_json(),
                }
                for i, event in enumerate(self.events)
            ],
        }


def compare(
    deployment: str,
    left: tuple[str, Sequence[Outcome]],
    right: tuple[str, Sequence[Outcome]],
    events: Sequence[dict[str, Any]],
) -> Comparison:
    """Pair two versions' outcomes (``(label, outcomes)``, one per event) and sum up
    the difference: routes that appear or vanish (with how many events each side sent
    there), fields added or removed, and dead letters new on the right."""
    left_label, lefts = left
    right_label, rights = right
    if not len(lefts) == len(rights) == len(events):
        raise ValueError("compare needs one outcome per event on each side")
    routed: dict[str, Counter[str]] = {"left": Counter(), "right": Counter()}
    fields: dict[str, set[str]] = {"left": set(), "right": set()}
    dead = {"left": 0, "right": 0}
    new_dead = 0
    filtered = {"left": 0, "right": 0}
    for a, b in zip(lefts, rights, strict=True):
        for side, outcome in (("left", a), ("right", b)):
            routed[side].update(outcome.routes)
            fields[side] |= outcome.fields
            dead[side] += len(outcome.dead_letters)
            filtered[side] += outcome.filtered
        if b.dead_letters and not a.dead_letters:
            new_dead += 1
    changed = sum(a != b for a, b in zip(lefts, rights, strict=True))
    summary = {
        "events": len(events),
        "changed": changed,
        "routes_appear": sorted(set(routed["right"]) - set(routed["left"])),
        "routes_vanish": sorted(set(routed["left"]) - set(routed["right"])),
        "routes": {
            route: [routed["left"][route], routed["right"][route]]
            for route in sorted(set(routed["left"]) | set(routed["right"]))
        },
        "fields_added": sorted(fields["right"] - fields["left"]),
        "fields_removed": sorted(fields["left"] - fields["right"]),
        "dead_letters": [dead["left"], dead["right"]],
        "new_dead_letters": new_dead,
        "filtered": [filtered["left"], filtered["right"]],
    }
    return Comparison(
        deployment, left_label, right_label, list(events), list(lefts), list(rights), summary
    )


def render(comparison: Comparison, *, every: bool = False) -> str:
    """The comparison as text: each event that changes (every event with ``every``),
    its two outcomes one under the other, then the summary."""
    lines = []
    width = max(len(comparison.left), len(comparison.right))
    for i, event in enumerate(comparison.events):
        changed = comparison.changed(i)
        if not (changed or every):
            continue
        key = ",".join(f"{k}={v}" for k, v in event["key"].items())
        mark = "changed" if changed else "same"
        lines.append(f"{event['time'] or '-'} {event['op']} {event['table']} {key} ({mark})")
        lines.append(f"  {comparison.left:<{width}}  {comparison.left_outcomes[i].text()}")
        lines.append(f"  {comparison.right:<{width}}  {comparison.right_outcomes[i].text()}")
    s = comparison.summary
    lines.append(
        f"{comparison.deployment}: {s['changed']} of {s['events']} events change "
        f"({comparison.left} → {comparison.right})"
    )
    for route, (before, after) in s["routes"].items():
        if before != after:
            lines.append(f"  route {route}: {before} → {after} events")
    if s["routes_appear"]:
        lines.append(f"  routes that appear: {', '.join(s['routes_appear'])}")
    if s["routes_vanish"]:
        lines.append(f"  routes that vanish: {', '.join(s['routes_vanish'])}")
    if s["fields_added"]:
        lines.append(f"  fields added: {', '.join(s['fields_added'])}")
    if s["fields_removed"]:
        lines.append(f"  fields removed: {', '.join(s['fields_removed'])}")
    if s["filtered"][0] != s["filtered"][1]:
        lines.append(f"  filtered out: {s['filtered'][0]} → {s['filtered'][1]}")
    if s["dead_letters"][0] != s["dead_letters"][1] or s["new_dead_letters"]:
        lines.append(
            f"  dead letters: {s['dead_letters'][0]} → {s['dead_letters'][1]} "
            f"({s['new_dead_letters']} events newly dead-lettered)"
        )
    return "\n".join(lines)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d)")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: datetime | None = None) -> float:
    """``--since``: a duration back from now (``90s``, ``10m``, ``2h``, ``1d``) or an ISO
    time; epoch seconds. ``ConfigError`` names what it expected."""
    moment = now or datetime.now(UTC)
    found = _DURATION.fullmatch(text.strip())
    if found:
        return moment.timestamp() - float(found[1]) * _UNIT[found[2]]
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"--since {text!r} is neither a duration nor a time: give one such as 10m, 2h "
            "or 2026-12-01T10:00:00+00:00",
            setting="--since",
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
