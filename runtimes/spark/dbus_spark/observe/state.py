"""What a runtime shows of itself at one moment: the one snapshot that ``/metrics``
and the JSON API are both made from (``RuntimeMetrics.state``). ``dbus ui`` shows
a whole cluster in the same shape, its runtimes' snapshots merged
(``dbus_spark.interfaces.api.cluster``), with ``cluster`` added."""

from __future__ import annotations

from dataclasses import dataclass, field

HANDING_OFF = "handing off"
"""A cluster source's ``owner`` while it waits out its handoff, owned by none."""


@dataclass
class SourceState:
    """A binlog source this runtime reads."""

    name: str
    up: bool
    """Whether the server answered this time."""
    position: str | None
    """The committed position (``file:pos (gtid)``): the sinks hold everything before it."""
    server_position: str | None
    """The server's current position."""
    lag_bytes: int | None
    """Binlog bytes from ``position`` to ``server_position``."""
    lag_seconds: float | None
    """0 when ``position`` is the server's; else how long ago the newest change the
    sinks hold was committed (at most the lag)."""
    rows: int
    """Row changes read so far."""
    read_bytes: int
    """Binlog bytes the committed position moved over so far."""
    epoch: int
    """The ownership epoch it is read at (0 alone)."""
    last_change: float | None
    """Commit time (epoch seconds) of the newest change the sinks hold."""
    binlog_file: int | None = None
    binlog_offset: int | None = None
    owner: str | None = None
    """In a cluster view: the runtime reading it, or why none is (``HANDING_OFF``,
    ``unassigned``, ``rt-1 (not answering)``, ``rt-1 (gone)``)."""


@dataclass
class ErrorState:
    """A function's latest failure: when, the dead letter's one-line error, and where."""

    at: float
    """Epoch seconds."""
    error: str
    error_type: str
    table: str
    position: str


@dataclass
class FunctionState:
    """One function of a deployment, summed over the runtime's workers."""

    name: str
    """``module:function``."""
    kind: str
    calls: int
    filtered: int
    dead_letters: int
    timeouts: int
    seconds: float
    """Time spent in its calls."""
    latency: list[int] = field(default_factory=list)
    """Calls per ``dbus_fn.outcomes.LATENCY_BOUNDS`` bucket (then slower ones)."""
    last_error: ErrorState | None = None
    """Why its latest dead letter was sent, in any of the runtime's workers."""
    recent_errors: list[ErrorState] = field(default_factory=list)
    """Why its latest dead letters were sent, newest first (at most
    ``dbus_fn.outcomes.RECENT_ERRORS``)."""


@dataclass
class DeploymentState:
    """A deployment this runtime runs, and what became of its events."""

    name: str
    version: str
    events: int
    delivered: int
    filtered: int
    dead_letters: int
    held: int
    """Binlog changes a bootstrap chunk held back (the chunk sends the row)."""
    snapshot_rows: int
    functions: list[FunctionState] = field(default_factory=list)
    pace: list[PaceState] = field(default_factory=list)
    """Per source it reads, whether it is with the stream (``dbus_spark.state.progress``)."""
    state: str = "with-stream"
    """The furthest from the stream of ``pace``: ``with-stream``, ``catching-up``,
    ``detached`` or ``paused``."""
    lag_seconds: float | None = None
    """The most, over its sources, that the newest change its sinks lack was committed
    ago (its sources' lag while with the stream)."""


@dataclass
class PaceState:
    """Where a deployment stands in one source's stream."""

    source: str
    state: str
    """``with-stream``, ``catching-up``, ``detached`` or ``paused``."""
    reason: str | None
    """Why it is not with the stream (the sink's or the function's trouble)."""
    position: str | None
    """Its own position, when not the stream's: its sinks hold everything before it."""
    since: float | None
    """Epoch seconds it left the stream."""
    lag_seconds: float | None
    lag_bytes: int | None


@dataclass
class SinkState:
    """A sink of the runtime's workers: what it delivered, retried, holds."""

    name: str
    messages: dict[str, int]
    """Per destination (topic or index), messages acknowledged."""
    bytes: dict[str, int]
    retries: int
    errors: int
    in_flight: int


@dataclass
class HistoryState:
    """One history read: a table of a deployment, read in chunks."""

    source: str
    deployment: str
    table: str
    kind: str
    """``bootstrap``, ``backfill`` or ``repair``."""
    rows: int
    estimated_rows: int
    chunks: int
    done: bool


@dataclass
class NodeState:
    """A node of the dataflow: a source, a table, a deployment or a destination."""

    id: str
    """``source:NAME``, ``table:SOURCE/DB.TABLE``, ``deployment:NAME`` or
    ``destination:kafka://TOPIC`` (``es://INDEX``)."""
    kind: str
    label: str


@dataclass
class EdgeState:
    """What flowed from one node to the next: rows read from a source's table, events a
    table offered a deployment, records a deployment sent a destination."""

    source: str
    target: str
    count: int
    """Since the runtime started."""
    rate: float | None
    """Per second over the last seconds asked about (None: asked once only)."""


@dataclass
class TopologyState:
    nodes: list[NodeState]
    edges: list[EdgeState]


@dataclass
class MemberState:
    """A runtime of a cluster, as ZooKeeper and its own API show it."""

    id: str
    host: str
    pid: int
    api: str
    """Where it serves its API ("" when it serves none)."""
    answered: bool
    """Whether its API answered this time."""
    problem: str | None
    """Why it did not, in one line."""
    sources: list[str]
    """The sources ZooKeeper assigns it."""
    batches: int
    last_batch: float | None


@dataclass
class ClusterState:
    """A cluster as ``dbus ui`` sees it: ZooKeeper's view of who reads what."""

    name: str
    leader: str | None
    epoch: int
    """The assignment epoch: it grows with every change of who reads what."""
    runtimes: list[MemberState]
    functions: dict[str, str]
    """The active version of each deployed function."""


@dataclass
class RuntimeState:
    runtime: str
    started: float
    batches: int
    last_batch: float | None
    sources: list[SourceState]
    deployments: list[DeploymentState]
    sinks: list[SinkState]
    history: list[HistoryState]
    topology: TopologyState
    cluster: ClusterState | None = None
    """Only in ``dbus ui``'s view of a cluster."""
