"""GTIDs and binlog coordinates: parsing, ordering, and GTID states.

MariaDB GTIDs are ``domain-server-seq``; a server's position is a *state*, one
GTID per replication domain (``0-1-14,1-2-3``), as in ``@@gtid_binlog_pos``.
MySQL GTIDs are ``uuid:n`` (``uuid:tag:n`` since 8.3); a MySQL server's position is
the *set* of every GTID it executed (``_gtid_sets``), as in ``@@gtid_executed``.
A transaction boundary's position carries its server's kind of either; a row
change's carries its transaction's own GTID. ``StreamGtids`` keeps one as a read
passes transactions.

A source of several servers (``_failover``) hands out *server-neutral* positions:
file and offset name one server's binlog only, and its reads move between
servers. Such a position's file is ``gtid.N``, N the transaction's place in the
replication stream (the sum of its GTID state's sequence numbers, one more with
each transaction on any server); its offset is the change's place inside the
transaction (rows handed out before it), or ``TRANSACTION_END`` at a boundary.
(On MySQL, N is the number of transactions in the executed set: also one more
with each transaction on any server.)
``coordinates`` orders them like any other; the GTID is carried as always.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dbus_fn.capture._gtid_sets import GtidSet, looks_like_set, parse_mysql_gtid
from dbus_fn.errors import ConfigError
from dbus_fn.events import BinlogPosition

_MARIADB = re.compile(r"^(\d+)-(\d+)-(\d+)$")
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
    tag: str = ""

    def __str__(self) -> str:
        return f"{self.uuid}:{self.tag}:{self.number}" if self.tag else f"{self.uuid}:{self.number}"


def parse_gtid(text: str) -> MariadbGtid | MysqlGtid:
    """One GTID, MariaDB ``0-1-42`` or MySQL ``3e11fa47-...:23`` (``uuid:tag:23``)."""
    value = text.strip()
    match = _MARIADB.match(value)
    if match:
        return MariadbGtid(*(int(g) for g in match.groups()))
    if looks_like_set(value):
        try:
            (uuid, tag), number = parse_mysql_gtid(value)
        except ConfigError:
            pass
        else:
            return MysqlGtid(uuid, number, tag)
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


def state_total(text: str | None) -> int:
    """The place in the replication stream of a position's GTIDs: a MariaDB state's
    sequence numbers' sum, or how many transactions a MySQL set holds."""
    if looks_like_set(text):
        return len(GtidSet.parse(text))
    return gtid_total(parse_gtid_state(text))


def check_gtids(text: str) -> None:
    """Raise ``ConfigError`` unless ``text`` is a MariaDB GTID state or a MySQL GTID set."""
    if looks_like_set(text):
        GtidSet.parse(text)
    else:
        parse_gtid_state(text)


class StreamGtids:
    """The GTIDs a read has passed, in the form its boundary positions carry:
    MariaDB's state (the last GTID of each domain) or MySQL's executed set.

    A MySQL set is known only from a start that carries one or from the
    ``PREVIOUS_GTIDS`` event that opens each binlog file (``learn``); until then a
    boundary carries no GTIDs rather than a set missing what came before.
    """

    __slots__ = ("_mysql", "_set", "_state")

    def __init__(self, text: str | None, *, mysql: bool) -> None:
        self._mysql = mysql
        self._state: dict[int, MariadbGtid] = {} if mysql else parse_gtid_state(text)
        self._set: GtidSet | None = GtidSet.parse(text) if mysql and text else None

    def learn(self, executed: GtidSet) -> None:
        """A binlog file's ``PREVIOUS_GTIDS``: the set before it, when none is known."""
        if self._mysql and self._set is None:
            self._set = executed.copy()

    def commit(self, gtid: str | None) -> None:
        """A transaction of GTID ``gtid`` committed."""
        if gtid is None:
            return
        if self._mysql:
            if self._set is not None:
                self._set.add_gtid(gtid)
            return
        found = parse_gtid(gtid)
        assert isinstance(found, MariadbGtid)  # a MariaDB server's event
        self._state[found.domain] = found

    def text(self) -> str | None:
        """The GTIDs a boundary here carries (None: not known)."""
        if self._mysql:
            return str(self._set) if self._set else None
        return format_gtid_state(self._state)

    def total(self) -> int:
        """This boundary's place in the replication stream (``state_total``)."""
        if self._mysql:
            return len(self._set) if self._set is not None else 0
        return gtid_total(self._state)

    def total_with(self, gtid: str | None) -> int:
        """The place in the stream of the transaction ``gtid``, next after this one."""
        total = self.total()
        if gtid is None:
            return total
        if self._mysql:
            return total if self._set is not None and gtid in self._set else total + 1
        found = parse_gtid(gtid)
        assert isinstance(found, MariadbGtid)
        before = self._state.get(found.domain)
        return total - (before.sequence if before is not None else 0) + found.sequence


def neutral_position(total: int, pos: int, gtid: str | None) -> BinlogPosition:
    """A server-neutral position of a change (module docstring): its transaction's
    place ``total`` in the stream and its place ``pos`` inside the transaction."""
    return BinlogPosition(f"{NEUTRAL_FILE}{total}", min(pos, TRANSACTION_END - 1), gtid)


def neutral_boundary(gtid_state: str | None) -> BinlogPosition:
    """The server-neutral position of a transaction boundary, from its GTID state."""
    return BinlogPosition(f"{NEUTRAL_FILE}{state_total(gtid_state)}", TRANSACTION_END, gtid_state)


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
    """``binlog.000001:1234``, ``binlog.000001:1234@0-1-14``, a MariaDB GTID state
    ``0-1-14`` or a MySQL GTID set ``3e11fa47-...:1-100``.

    A bare GTID state or set resumes by GTID; the file is then empty.
    """
    value = text.strip()
    gtid: str | None = None
    if "@" in value:
        value, gtid = value.split("@", 1)
        check_gtids(gtid)
    elif looks_like_set(value):
        canonical = str(GtidSet.parse(value))
        if not canonical:
            raise ConfigError(
                f"invalid position {text!r}: the GTID set is empty", setting="position"
            )
        return BinlogPosition("", 0, canonical)
    elif value and ":" not in value:
        parse_gtid_state(value)
        return BinlogPosition("", 0, value)
    file, sep, pos = value.rpartition(":")
    if not sep or not file or not pos.isdigit():
        raise ConfigError(
            f"invalid position {text!r}: write file:pos (binlog.000001:1234), "
            "file:pos@gtid, a MariaDB GTID state (0-1-14) or a MySQL GTID set "
            "(3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100)",
            setting="position",
        )
    return BinlogPosition(file, int(pos), gtid)
