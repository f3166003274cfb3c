"""MySQL GTID sets: the executed set a MySQL position carries, and its forms.

A MySQL transaction's GTID is ``uuid:n`` (or ``uuid:tag:n`` since 8.3, a tagged
GTID); a server's place is the *set* of every GTID it executed, as in
``@@gtid_executed``: ``3e11fa47-...:1-100:120,4c2a...:1-5,3e11fa47-...:etl:1-3``.
A position on a MySQL source carries the set at its transaction boundary, so a
read resumes by it on any server of the topology (``COM_BINLOG_DUMP_GTID``), a
purged start is found against ``@@gtid_purged``, and a failover picks a server
whose ``@@gtid_executed`` holds it all.

``GtidSet`` parses every form the server prints or accepts (newlines, upper-case
UUIDs, a UUID repeated per tag), adds a transaction as it commits (the usual case,
one more number at the end of an interval, costs a dict lookup), compares sets,
and writes the canonical text and the binary form a dump request and a
``PREVIOUS_GTIDS_LOG_EVENT`` use.
"""

from __future__ import annotations

import re
import struct
import uuid as uuids
from collections.abc import Iterator

from dbus_fn.errors import ConfigError

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")

Source = tuple[str, str]
"""A transaction's origin: the server's UUID and its tag ('' when untagged)."""


def looks_like_set(text: str | None) -> bool:
    """Whether ``text`` is a MySQL GTID (set) rather than a MariaDB GTID state: it
    starts with a server UUID."""
    head = (text or "").strip().split(":", 1)[0].strip().lower()
    return bool(_UUID.match(head))


class GtidSet:
    """A set of MySQL GTIDs: per source, sorted disjoint ``[start, end]`` intervals."""

    __slots__ = ("_intervals",)

    def __init__(self) -> None:
        self._intervals: dict[Source, list[list[int]]] = {}

    @classmethod
    def parse(cls, text: str | None, *, what: str = "GTID set") -> GtidSet:
        """``uuid:1-5:7,uuid:tag:1-3``; empty or None is the empty set. A malformed
        text raises ``ConfigError`` naming the part and the form expected."""
        found = cls()
        for part in (text or "").replace("\n", "").split(","):
            part = part.strip()
            if not part:
                continue
            pieces = [piece.strip() for piece in part.split(":")]
            source = pieces[0].lower()
            if not _UUID.match(source) or len(pieces) < 2:
                raise _invalid(text, part, what)
            tag = ""
            waiting = True  # the UUID or a tag needs an interval after it
            for piece in pieces[1:]:
                match = _INTERVAL.match(piece)
                if match is None:
                    if (waiting and tag) or not _TAG.match(piece.lower()):
                        raise _invalid(text, part, what)
                    tag, waiting = piece.lower(), True
                    continue
                start = int(match.group(1))
                end = int(match.group(2)) if match.group(2) else start
                if start < 1 or end < start:
                    raise _invalid(text, part, what)
                found.add_interval((source, tag), start, end)
                waiting = False
            if waiting:
                raise _invalid(text, part, what)
        return found

    def copy(self) -> GtidSet:
        other = GtidSet()
        other._intervals = {key: [list(i) for i in value] for key, value in self._intervals.items()}
        return other

    def add(self, source: Source, number: int) -> None:
        """Add one transaction ``uuid[:tag]:number`` (a commit: usually one past the end)."""
        intervals = self._intervals.get(source)
        if intervals:
            last = intervals[-1]
            if last[1] + 1 == number:
                last[1] = number
                return
            if last[0] <= number <= last[1]:
                return
        self.add_interval(source, number, number)

    def add_interval(self, source: Source, start: int, end: int) -> None:
        intervals = self._intervals.setdefault(source, [])
        merged: list[list[int]] = []
        placed = False
        for low, high in intervals:
            if high + 1 < start:
                merged.append([low, high])
            elif end + 1 < low:
                if not placed:
                    merged.append([start, end])
                    placed = True
                merged.append([low, high])
            else:
                start, end = min(low, start), max(high, end)
        if not placed:
            merged.append([start, end])
        merged.sort()
        self._intervals[source] = merged

    def add_gtid(self, gtid: str) -> None:
        """Add one GTID written ``uuid:n`` or ``uuid:tag:n``."""
        source, number = parse_mysql_gtid(gtid)
        self.add(source, number)

    def __contains__(self, gtid: str) -> bool:
        source, number = parse_mysql_gtid(gtid)
        return any(low <= number <= high for low, high in self._intervals.get(source, ()))

    def minus(self, other: GtidSet) -> GtidSet:
        """The GTIDs of this set that ``other`` lacks."""
        left = GtidSet()
        for source, intervals in self._intervals.items():
            for low, high in intervals:
                for a, b in _subtract(low, high, other._intervals.get(source, [])):
                    left.add_interval(source, a, b)
        return left

    def issubset(self, other: GtidSet) -> bool:
        return not self.minus(other)

    def __len__(self) -> int:
        """How many transactions: a transaction's place in the replication stream
        (one more with each commit on any server; server-neutral positions use it)."""
        return sum(high - low + 1 for value in self._intervals.values() for low, high in value)

    def __bool__(self) -> bool:
        return any(self._intervals.values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GtidSet) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def _sources(self) -> Iterator[tuple[Source, list[list[int]]]]:
        for source in sorted(self._intervals):
            if self._intervals[source]:
                yield source, self._intervals[source]

    def __str__(self) -> str:
        """MySQL's own form: by UUID, the untagged intervals first, then each tag's."""
        parts: list[str] = []
        current = ""
        for (server, tag), intervals in self._sources():
            ranges = ":".join(f"{a}" if a == b else f"{a}-{b}" for a, b in intervals)
            piece = f"{tag}:{ranges}" if tag else ranges
            if server == current:
                parts[-1] += f":{piece}"
            else:
                parts.append(f"{server}:{piece}")
                current = server
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"GtidSet({str(self)!r})"

    def encode(self) -> bytes:
        """The binary form of ``COM_BINLOG_DUMP_GTID`` (and ``PREVIOUS_GTIDS``): the
        classic layout, or MySQL 8.3's tagged one when any GTID has a tag."""
        sources = list(self._sources())
        tagged = any(tag for (_, tag), _ in sources)
        count = len(sources)
        out = [struct.pack("<Q", (1 << 56) | (count << 8) | 1 if tagged else count)]
        for (server, tag), intervals in sources:
            out.append(uuids.UUID(server).bytes)
            if tagged:
                out.append(bytes([len(tag) << 1]) + tag.encode())
            out.append(struct.pack("<Q", len(intervals)))
            for low, high in intervals:
                out.append(struct.pack("<QQ", low, high + 1))  # the end is exclusive
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> GtidSet:
        """A set in the binary form ``encode`` writes (a ``PREVIOUS_GTIDS`` event's body)."""
        found = cls()
        (head,) = struct.unpack_from("<Q", data, 0)
        tagged = head >> 56 == 1
        count = (head >> 8) & ((1 << 48) - 1) if tagged else head
        at = 8
        for _ in range(count):
            server = str(uuids.UUID(bytes=bytes(data[at : at + 16])))
            at += 16
            tag = ""
            if tagged:
                length = data[at] >> 1
                tag = bytes(data[at + 1 : at + 1 + length]).decode()
                at += 1 + length
            (intervals,) = struct.unpack_from("<Q", data, at)
            at += 8
            for _ in range(intervals):
                low, high = struct.unpack_from("<QQ", data, at)
                at += 16
                found.add_interval((server, tag), low, high - 1)
        return found


def parse_mysql_gtid(gtid: str) -> tuple[Source, int]:
    """``uuid:n`` or ``uuid:tag:n`` as ((uuid, tag), n)."""
    pieces = gtid.strip().split(":")
    if len(pieces) in (2, 3) and _UUID.match(pieces[0].lower()) and pieces[-1].isdigit():
        tag = pieces[1].lower() if len(pieces) == 3 else ""
        if not tag or _TAG.match(tag):
            return (pieces[0].lower(), tag), int(pieces[-1])
    raise ConfigError(
        f"invalid MySQL GTID {gtid!r}: expected uuid:n or uuid:tag:n "
        "(3e11fa47-71ca-11e1-9e33-c80aa9429562:23)",
        setting="gtid",
    )


def _varlen(data: bytes, at: int) -> tuple[int, int]:
    """An unsigned integer of MySQL's serialization format and where it ends: the
    first byte's trailing one bits count the bytes that follow, and the value is
    the little-endian whole shifted right by that count plus one."""
    first = data[at]
    extra = 0
    while extra < 8 and first >> extra & 1:
        extra += 1
    whole = int.from_bytes(data[at : at + 1 + extra], "little")
    if extra == 8:
        return int.from_bytes(data[at + 1 : at + 9], "little"), at + 9
    return whole >> (extra + 1), at + 1 + extra


_TAGGED_UUID, _TAGGED_GNO, _TAGGED_TAG = 1, 2, 3
"""The fields of a tagged GTID event (MySQL 8.3+) that name its transaction."""


def tagged_gtid(body: bytes) -> str:
    """The GTID of a ``GTID_TAGGED_LOG_EVENT``'s ``body`` (MySQL's serialization
    format: a version, the message size, the last field a reader must know, then
    numbered fields in order; the UUID's 16 bytes and the GNO (zigzag-signed) are
    varlen integers, the tag a length and its bytes)."""
    try:
        _, at = _varlen(body, 0)  # format version
        _, at = _varlen(body, at)  # message size
        _, at = _varlen(body, at)  # last non-ignorable field
        server = tag = ""
        number = 0
        while True:
            field, at = _varlen(body, at)
            if field == 0:  # flags
                _, at = _varlen(body, at)
            elif field == _TAGGED_UUID:
                raw = []
                for _ in range(16):
                    byte, at = _varlen(body, at)
                    raw.append(byte)
                server = str(uuids.UUID(bytes=bytes(raw)))
            elif field == _TAGGED_GNO:
                zigzag, at = _varlen(body, at)
                number = (zigzag >> 1) ^ -(zigzag & 1)
            elif field == _TAGGED_TAG:
                length, at = _varlen(body, at)
                tag = bytes(body[at : at + length]).decode()
                break
            else:
                raise ValueError(f"field {field} before the tag")
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"a tagged GTID event dbus cannot read ({exc})") from None
    if not server or number < 1:
        raise ValueError("a tagged GTID event without its UUID or number")
    return f"{server}:{tag}:{number}" if tag else f"{server}:{number}"


def _subtract(low: int, high: int, others: list[list[int]]) -> Iterator[tuple[int, int]]:
    """The parts of ``[low, high]`` outside every interval of ``others`` (sorted)."""
    for a, b in others:
        if b < low or a > high:
            continue
        if a > low:
            yield low, a - 1
        low = b + 1
        if low > high:
            return
    yield low, high


def _invalid(text: str | None, part: str, what: str) -> ConfigError:
    return ConfigError(
        f"invalid {what} {text!r}: {part!r} is not uuid:interval[:interval...] "
        "(3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100:120, a tag before its intervals: "
        "uuid:etl:1-3)",
        setting="gtid",
    )


__all__ = ["GtidSet", "looks_like_set", "parse_mysql_gtid", "tagged_gtid"]
