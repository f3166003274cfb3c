"""The one exception tree of dbus.

Every error a user can cause is a ``DbusError``. Leaves also inherit the matching
builtin, so ``except ValueError`` keeps working for callers that do not know us,
and carry the facts of the failure as fields. ``exit_code`` is what the CLI exits
with when the error reaches it; the message is one line that says what was
expected, what arrived, where, and what to do.
"""

from __future__ import annotations


class DbusError(Exception):
    """Root of every error dbus raises on purpose."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(DbusError, ValueError):
    """A configuration value, flag or environment variable is invalid."""

    exit_code = 2

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class ServiceError(DbusError, RuntimeError):
    """A service dbus depends on is missing, unreachable or misconfigured."""

    def __init__(self, message: str, *, service: str | None = None) -> None:
        super().__init__(message)
        self.service = service


class ReadOnlyRowError(DbusError, TypeError):
    """Code tried to change a row image of a ``RowChange``; rows are read-only."""

    def __init__(self, message: str, *, column: str | None = None, action: str) -> None:
        super().__init__(message)
        self.column = column
        self.action = action


class UnsupportedColumnTypeError(DbusError, ValueError):
    """A MySQL column type string that dbus has no JSON mapping for, or cannot parse."""

    def __init__(self, message: str, *, column_type: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column_type = column_type
        self.column = column


class ColumnValueError(DbusError, ValueError):
    """A column value does not fit its column type (in Python or in its JSON form)."""

    def __init__(
        self,
        message: str,
        *,
        column_type: str,
        expected: str,
        received: str,
        column: str | None = None,
    ) -> None:
        super().__init__(message)
        self.column_type = column_type
        self.expected = expected
        self.received = received
        self.column = column


class EventFormatError(DbusError, ValueError):
    """A CloudEvent (or its JSON / Kafka form) is not a valid dbus event.

    ``problems`` lists every problem found, not only the first; ``where`` names the
    place it was read from (a file and line, a Kafka message) when known.
    """

    def __init__(
        self,
        message: str,
        *,
        problems: tuple[str, ...] = (),
        event_id: str | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(message)
        self.problems = problems
        self.event_id = event_id
        self.where = where


class FunctionValidationError(DbusError, TypeError):
    """A decorated function is not what its decorator expects.

    Raised at registration (decoration or load) time, never per event.
    ``function`` is ``module:qualname`` and ``location`` is ``file:line``.
    """

    def __init__(self, message: str, *, function: str, location: str) -> None:
        super().__init__(message)
        self.function = function
        self.location = location


class RegistryError(DbusError, ValueError):
    """The functions of a deployment do not fit together or with its manifest:
    a duplicate function name, or a selector that matches none of the tables the
    deployment subscribes to."""

    def __init__(self, message: str, *, function: str | None = None) -> None:
        super().__init__(message)
        self.function = function


class ManifestError(DbusError, ValueError):
    """A deployment manifest (``dbus.toml``) is missing or invalid.

    ``problems`` lists every problem found, not just the first.
    """

    def __init__(
        self, message: str, *, path: str | None = None, problems: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.path = path
        self.problems = problems


class ModuleLoadError(DbusError, ImportError):
    """A function module could not be found or raised while being imported."""

    def __init__(self, message: str, *, target: str) -> None:
        super().__init__(message)
        self.target = target


class FunctionError(DbusError, RuntimeError):
    """A user's function failed on an event: it raised, returned the wrong type,
    or tried to mutate its input. The user's exception, if any, is the cause.

    These are user errors: the pipeline counts them apart from its own failures
    and sends the event to the dead-letter destination.
    """

    def __init__(self, message: str, *, function: str, location: str, stage: str) -> None:
        super().__init__(message)
        self.function = function
        self.location = location
        self.stage = stage


class FunctionTimeoutError(FunctionError):
    """A user's function ran past its time budget."""

    def __init__(
        self, message: str, *, function: str, location: str, stage: str, budget: float
    ) -> None:
        super().__init__(message, function=function, location=location, stage=stage)
        self.budget = budget


class DsnError(ConfigError):
    """A source DSN cannot be parsed; ``problem`` names what is wrong with it."""

    def __init__(self, message: str, *, problem: str) -> None:
        super().__init__(message, setting="dsn")
        self.problem = problem


class SourceError(DbusError, RuntimeError):
    """A binlog source cannot be read: unreachable, misconfigured or failing."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class SourceUnreachableError(SourceError):
    """The source server cannot be reached (refused, timed out, no route); ``server``
    (without its password) and ``reason``, when known, say which and why."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        server: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, source=source)
        self.server = server
        self.reason = reason


class SourceAccessError(SourceError):
    """The source refused our user; ``grant`` is the privilege to grant, when known.

    Never retried: waiting does not grant a privilege.
    """

    exit_code = 3

    def __init__(
        self, message: str, *, source: str | None = None, grant: str | None = None
    ) -> None:
        super().__init__(message, source=source)
        self.grant = grant


class PositionError(SourceError):
    """A start position is purged, invalid or not at a transaction boundary.

    ``choices`` are the explicit ways on (``--from earliest`` ...); capture never
    jumps to another position on its own.
    """

    exit_code = 4

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        position: str | None = None,
        choices: tuple[str, ...] = ("earliest", "latest", "snapshot"),
    ) -> None:
        super().__init__(message, source=source)
        self.position = position
        self.choices = choices


class DestinationError(DbusError, ValueError):
    """A route names something that is not ``kafka://topic`` or ``es://index``."""

    def __init__(self, message: str, *, destination: str) -> None:
        super().__init__(message)
        self.destination = destination


class CoordinationError(DbusError, RuntimeError):
    """Something about the ZooKeeper cluster state is not as a command expects."""

    def __init__(self, message: str, *, cluster: str | None = None) -> None:
        super().__init__(message)
        self.cluster = cluster


class ZooKeeperUnavailableError(ServiceError):
    """ZooKeeper did not answer at the given address within the time allowed."""

    exit_code = 3

    def __init__(self, message: str, *, hosts: str) -> None:
        super().__init__(message, service="zookeeper")
        self.hosts = hosts


class ServiceUnreachableError(ServiceError):
    """A sink (Kafka, Elasticsearch) or the Spark master does not answer, or refuses
    the login, when a runtime starts."""

    exit_code = 3


class UndeliveredError(DbusError, RuntimeError):
    """A runtime stopped with a micro-batch its sinks never acknowledged; its
    changes are not lost (the next start replays them from the checkpoint)."""

    def __init__(self, message: str, *, batch: int) -> None:
        super().__init__(message)
        self.batch = batch


class ClusterNotFoundError(CoordinationError, LookupError):
    """The cluster root does not exist in ZooKeeper (a typo, or never created)."""

    def __init__(self, message: str, *, cluster: str, root: str) -> None:
        super().__init__(message, cluster=cluster)
        self.root = root


class FunctionNotFoundError(CoordinationError, LookupError):
    """A deployed function, or one version of it, is not in the registry."""

    def __init__(self, message: str, *, function: str, version: str | None = None) -> None:
        super().__init__(message)
        self.function = function
        self.version = version


class VersionConflictError(CoordinationError, ValueError):
    """A version already registered with other content; versions are immutable."""

    def __init__(self, message: str, *, function: str, version: str) -> None:
        super().__init__(message)
        self.function = function
        self.version = version


class BundleError(DbusError, ValueError):
    """A deployment folder cannot be packaged, or a bundle cannot be unpacked."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class SecretLeakError(ConfigError):
    """A value bound for ZooKeeper (a znode's name or data) holds a secret.

    ``where`` names the place (a manifest key, an option), never the value.
    """

    def __init__(self, message: str, *, where: str) -> None:
        super().__init__(message, setting=where)
        self.where = where


class FencedError(CoordinationError, PermissionError):
    """A position commit by a runtime that no longer owns the source at that epoch.

    The commit did not happen; the runtime must stop working on the source.
    """

    exit_code = 5

    def __init__(self, message: str, *, source: str, runtime: str, epoch: int | None) -> None:
        super().__init__(message)
        self.source = source
        self.runtime = runtime
        self.epoch = epoch


class KafkaSinkError(DbusError, RuntimeError):
    """Kafka did not acknowledge a message; the batch must not commit."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


class HistoryError(DbusError, ValueError):
    """A snapshot, backfill, replay or verify was asked of something it cannot read:
    a table with no key to chunk by, an unknown table, a bad ``--where``..."""

    exit_code = 2

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table
