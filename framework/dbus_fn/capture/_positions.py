"""GTIDs and binlog coordinates: parsing, ordering, and GTID states.

MariaDB GTIDs are ``domain-server-seq``; a server's position is a *state*, one
GTID per replication domain (``0-1-14,1-2-3``), as in ``@@gtid_binlog_pos``.
MySQL GTIDs are ``uuid:n``; they are parsed and carried, not used to resume.

A source of several servers (``_failover``) hands out *server-neutral* positions:
file and offset name one server's binlog only, and its reads move between
servers. Such a position's file is ``gtid.N``, N the transaction's place in the
replication stream (the sum of its GTID state's sequence numbers, one more with
each transaction on any server); its offset is the change's place inside the
transaction (rows handed out before it), or ``TRANSACTION_END`` at a boundary.
``coordinates`` orders them like any other; the GTID is carried as always.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dbus_fn.errors import ConfigError
from dbus_fn.events import BinlogPosition

_MARIADB = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_MYSQL = re.compile(
    r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}):(\d+)$"
)
_FILE = re.compile(r"^(.*?)(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class MariadbGtid:
    domain: int
    server: int
    sequence: int

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.sequence}"


@dataclass(frozen=True, slots=True)
class MysqlGtid:
    uuid: str
    number: int

    def __str__(self) -> str:
        return f"{self.uuid}:{self.number}"


def parse_gtid(text: str) -> MariadbGtid | MysqlGtid:
    """One GTID, MariaDB ``0-1-42`` or MySQL ``3e11fa47-...:23``."""
    value = text.strip()
    match = _MARIADB.match(value)
    if match:
        return MariadbGtid(*(int(g) for g in match.groups()))
    match = _MYSQL.match(value)
    if match:
        return MysqlGtid(match.group(1).lower(), int(match.group(2)))
    raise ConfigError(
        f"invalid GTID {text!r}: expected MariaDB domain-server-seq (0-1-42) "
        "or MySQL uuid:n (3e11fa47-71ca-11e1-9e33-c80aa9429562:23)",
        setting="gtid",
    )


def parse_gtid_state(text: str | None) -> dict[int, MariadbGtid]:
    """A MariaDB GTID state (``0-1-14,1-2-3``) as domain -> last GTID."""
    state: dict[int, MariadbGtid] = {}
    for part in (text or "").replace("\n", "").split(","):
        if not part.strip():
            continue
        gtid = parse_gtid(part)
        if not isinstance(gtid, MariadbGtid):
            raise ConfigError(
                f"invalid MariaDB GTID state {text!r}: {part.strip()!r} is a MySQL GTID",
                setting="gtid",
            )
        state[gtid.domain] = gtid
    return state


def format_gtid_state(state: dict[int, MariadbGtid]) -> str | None:
    if not state:
        return None
    if len(state) == 1:  # one domain, the usual server: written at every commit
        return str(next(iter(state.values())))
    return ",".join(str(state[domain]) for domain in sorted(state))


def file_sequence(name: str) -> tuple[str, int]:
    """``binlog.000042`` -> ``("binlog.", 42)``: binlog files order by their number."""
    match = _FILE.match(name)
    if not match:
        return name, -1
    return match.group(1), int(match.group(2))


NEUTRAL_FILE = "gtid."
"""The file of a server-neutral position (module docstring)."""

TRANSACTION_END = (1 << 25) - 1
"""The offset of a server-neutral position at a transaction boundary: after every
change of it (a transaction of more changes than this cannot be ordered inside)."""


def gtid_total(state: dict[int, MariadbGtid]) -> int:
    """A GTID state's place in the replication stream: its sequence numbers' sum."""
    return sum(gtid.sequence for gtid in state.values())


def neutral_position(total: int, pos: int, gtid: str | None) -> BinlogPosition:
    """A server-neutral position of a change (module docstring): its transaction's
    place ``total`` in the stream and its place ``pos`` inside the transaction."""
    return BinlogPosition(f"{NEUTRAL_FILE}{total}", min(pos, TRANSACTION_END - 1), gtid)


def neutral_boundary(gtid_state: str | None) -> BinlogPosition:
    """The server-neutral position of a transaction boundary, from its GTID state."""
    total = gtid_total(parse_gtid_state(gtid_state))
    return BinlogPosition(f"{NEUTRAL_FILE}{total}", TRANSACTION_END, gtid_state)


def is_neutral(position: BinlogPosition) -> bool:
    return position.file.startswith(NEUTRAL_FILE)


def coordinates(position: BinlogPosition) -> tuple[int, int]:
    """A sortable key of a position's file and offset."""
    return file_sequence(position.file)[1], position.pos


def position_to_json(position: BinlogPosition) -> dict[str, str | int]:
    """A position as a JSON-friendly dict: the one form of a position in ZooKeeper, the
    runtime's config file and Spark offsets (``gtid`` only when there is one)."""
    data: dict[str, str | int] = {"file": position.file, "pos": position.pos}
    if position.gtid:
        data["gtid"] = position.gtid
    return data


def position_from_json(data: dict[str, object]) -> BinlogPosition:
    try:
        file, pos, gtid = data.get("file", ""), data.get("pos", 4), data.get("gtid")
        if not isinstance(file, str) or isinstance(pos, bool) or not isinstance(pos, int):
            raise TypeError
        if gtid is not None and not isinstance(gtid, str):
            raise TypeError
    except (AttributeError, TypeError):
        raise ConfigError(
            f"invalid position {data!r}: expected {{'file': str, 'pos': int, 'gtid': str?}}",
            setting="position",
        ) from None
    # An empty GTID is how older offsets and config files said "none".
    return BinlogPosition(file, pos, gtid or None)


def parse_position(text: str) -> BinlogPosition:
    """``binlog.000001:1234``, ``binlog.000001:1234@0-1-14`` or a GTID state ``0-1-14``.

    A bare GTID state resumes by GTID (MariaDB); the file is then empty.
    """
    value = text.strip()
    gtid: str | None = None
    if "@" in value:
        value, gtid = value.split("@", 1)
        parse_gtid_state(gtid)
    elif value and ":" not in value:
        parse_gtid_state(value)
        return BinlogPosition("", 0, value)
    file, sep, pos = value.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise ConfigError(
            f"invalid position {text!r}: write file:pos (binlog.000001:1234), "
            "file:pos@gtid, or a MariaDB GTID state (0-1-14)",
            setting="position",
        )
    return BinlogPosition(file, int(pos), gtid)
