"""What a runtime shows of itself at one moment: the one snapshot that ``/metrics``
and the JSON API are both made from (``RuntimeMetrics.state``)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
