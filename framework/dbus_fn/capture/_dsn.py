"""Source DSNs (``mysql://user:password@host:port``) and source specs.

A DSN may list several servers of one replication topology
(``mysql://user:password@db1:3306,db2:3306``): a primary and the replicas that may
take its place. The reader follows a failover from one to the next by GTID
(``_failover``); every server shares the DSN's user and password.

The password lives only inside ``ConnectionSettings.password`` and the DSN
string; neither is ever part of a ``repr``, ``str``, log line or error message.
``redact_dsn`` is how a message shows any DSN or URL (a Kafka source's, an
Elasticsearch address): with its password masked and its query left out.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from dbus_fn.capture._helper_tables import is_helper_table
from dbus_fn.errors import ConfigError, DsnError
from dbus_fn.manifest import table_glob_problem

SCHEMES = ("mysql", "mariadb")
DEFAULT_PORT = 3306
_EXAMPLE = "mysql://user:password@127.0.0.1:3306"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A login's end: an '@' that hosts follow (no '=', '&' or '@' before the path, query
# or end), which an '@' in a password or in a query's value is not.
_LOGIN_END = re.compile(r"@[^/?#=&@]*(?=[/?#]|$)")
_QUERY = re.compile(r"[?#]")


_CLIENT_SSL = 1 << 11  # the server-capability flag for TLS in the MySQL protocol
_TLS: dict[tuple[str, int], Any] = {}
"""Per server seen by this process: False (no TLS), or the shared TLS context."""


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Where and as whom to connect; built by ``parse_dsn``."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    scheme: str = "mysql"

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``): how messages name this server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def redacted(self) -> str:
        """The DSN with the password masked: safe to print and log."""
        secret = ":***" if self.password else ""
        return f"{self.scheme}://{self.user}{secret}@{self.address}"

    def pymysql_kwargs(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``.

        PyMySQL prefers TLS and builds a new TLS context (reading the system's
        certificates, ~40 ms) for every connection, even to a server without TLS.
        Once ``remember_tls`` has seen this server, its answer is reused: TLS with
        one shared context where the server offers it, plain where it does not.
        """
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
        }
        tls = _TLS.get((self.host, self.port))
        if tls is False:
            kwargs["ssl_disabled"] = True
        elif tls is not None:
            kwargs["ssl"] = tls
        return {**kwargs, **extra}

    def remember_tls(self, connection: Any) -> None:
        """Note, from an open connection, whether this server speaks TLS."""
        key = (self.host, self.port)
        if key not in _TLS:
            speaks_tls = bool(connection.server_capabilities & _CLIENT_SSL)
            _TLS[key] = connection.ctx if speaks_tls and connection.ssl else False

    def __str__(self) -> str:
        return self.redacted


def _fail(problem: str, hint: str) -> DsnError:
    return DsnError(f"invalid source DSN: {problem}; {hint} (e.g. {_EXAMPLE})", problem=problem)


def parse_servers(dsn: str) -> tuple[ConnectionSettings, ...]:
    """Every server of ``mysql://user:password@host:port[,host:port...]``, in the
    order given (``mariadb://`` too).

    Raises ``DsnError`` with one line naming the problem and the fix. The
    message never contains the DSN itself, which may hold a password.
    """
    if not isinstance(dsn, str) or not dsn.strip():
        raise _fail("the DSN is empty", "give the source's address")
    text = dsn.strip()
    if "://" not in text:
        raise _fail("no scheme", "start it with mysql:// or mariadb://")
    scheme, _, rest = text.partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    if "@" in rest[end:]:
        # The login ends at the last '@'; one after a '/', '?' or '#' means the login
        # holds that character as it is, and the rest would be misread as a path,
        # query or port.
        raise _fail(
            "the password (or user) holds an unencoded '/', '?' or '#'",
            "percent-encode the password's special characters: %2F for /, %3F for ?, "
            "%23 for #, %40 for @, %3A for :, %2C for ,",
        )
    login, at, hosts = rest[:end].rpartition("@")
    if "," not in hosts:
        return (_parse_one(text),)
    servers: list[ConnectionSettings] = []
    for host in hosts.split(","):
        if not host.strip():
            raise _fail("the server list has an empty entry", "separate servers by one comma")
        server = _parse_one(f"{scheme}://{login}{at}{host.strip()}{rest[end:]}")
        if any(s.address == server.address for s in servers):
            raise _fail(
                f"server {server.address} is listed twice", "name each server of the source once"
            )
        servers.append(server)
    return tuple(servers)


def parse_dsn(dsn: str) -> ConnectionSettings:
    """The first server of a DSN (see ``parse_servers``): where a read starts."""
    return parse_servers(dsn)[0]


def redact_servers(servers: tuple[ConnectionSettings, ...]) -> str:
    """A DSN of every server with the password masked: safe to print and log."""
    return ",".join([servers[0].redacted, *(s.address for s in servers[1:])])


def _parse_one(text: str) -> ConnectionSettings:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        reason = (
            "the port is not a number from 1 to 65535" if "port" in str(exc).lower() else str(exc)
        )
        raise _fail(reason, "write it as host:port") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise _fail(f"unsupported scheme {scheme!r}", "use mysql:// or mariadb://")
    if parts.path not in ("", "/"):
        raise _fail(
            "a database path is not supported",
            "drop the /path and choose tables with the source's table patterns",
        )
    if parts.query or parts.fragment:
        raise _fail("query strings and fragments are not supported", "remove the ?... part")
    if not parts.hostname:
        raise _fail("no host", "write user:password@host:port")
    if not parts.username:
        raise _fail("no user", "write user:password@ before the host")
    if port == 0:
        raise _fail("the port is not a number from 1 to 65535", "write it as host:port")
    return ConnectionSettings(
        host=parts.hostname,
        port=port or DEFAULT_PORT,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
        scheme=scheme,
    )


def redact_dsn(dsn: str) -> str:
    """The DSN or URL with its password masked and its query left out
    (``kafka://user:***@host:9092/topic``): safe to print and log, whatever its scheme
    and whether it parses or not.

    A source DSN that parses is shown as ``redact_servers`` shows it. Anything else is
    masked as text: the login ends at the last ``@`` that hosts follow, so a password
    holding an unencoded ``@``, ``/`` or ``?`` is masked whole; the query (``?...``),
    whose settings may hold secrets too, is never shown.
    """
    try:
        return redact_servers(parse_servers(dsn))
    except DsnError:
        pass
    scheme, separator, rest = dsn.partition("://")
    if not separator:
        scheme, rest = "", dsn
    head = _QUERY.split(rest, maxsplit=1)[0]
    ends = [match.start() for match in _LOGIN_END.finditer(rest)]
    if not ends and "@" in head:
        ends = [head.rindex("@")]  # a login before what are no hosts
    if not ends:
        return scheme + separator + head
    user, colon, _ = rest[: ends[-1]].partition(":")
    after = _QUERY.split(rest[ends[-1] + 1 :], maxsplit=1)[0]
    return f"{scheme}{separator}{user}{':***' if colon else ''}@{after}"


def table_matches(patterns: tuple[str, ...], database: str, table: str) -> bool:
    """Whether ``database.table`` matches one of the ``db.table`` glob patterns."""
    name = f"{database}.{table}"
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def database_matches(patterns: tuple[str, ...], database: str) -> bool:
    """Whether some pattern could match a table of ``database``."""
    return any(fnmatch.fnmatchcase(database, pattern.split(".", 1)[0]) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """A named binlog source: where it is and which tables to capture.

    ``tables`` are ``db.table`` glob patterns (``shop.*``, ``*.*``). The helper
    tables of online schema change tools (``_t_new``, ``_t_gho``...; see
    ``_helper_tables``) are left out even where a pattern matches them, unless
    ``keep_helper_tables``. The DSN is validated on construction and kept out of
    ``repr``; use ``redacted_dsn`` to show it.
    """

    name: str
    dsn: str = field(repr=False)
    tables: tuple[str, ...] = ("*.*",)
    keep_helper_tables: bool = False
    servers: tuple[ConnectionSettings, ...] = field(init=False, repr=False, compare=False)
    """Every server the DSN lists, parsed once: the first, then those a failover may
    move to."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ConfigError(
                f"invalid source name {self.name!r}: use letters, digits, '_', '-' or '.', "
                "starting with a letter or digit (at most 64)",
                setting="name",
            )
        if isinstance(self.tables, str):
            object.__setattr__(self, "tables", (self.tables,))
        bad = [p for p in self.tables if table_glob_problem(p) is not None]
        if not self.tables or bad:
            raise ConfigError(
                f"invalid table pattern(s) {bad or '(none)'} for source {self.name!r}: "
                "write each as db.table, globs allowed (shop.*, *.orders, a set of "
                "characters closed: shop.order_[ab]*)",
                setting="tables",
            )
        object.__setattr__(self, "servers", parse_servers(self.dsn))

    @property
    def fails_over(self) -> bool:
        """Whether the DSN lists several servers: read by GTID, across a failover."""
        return len(self.servers) > 1

    @property
    def connection(self) -> ConnectionSettings:
        """The first server."""
        return self.servers[0]

    @property
    def redacted_dsn(self) -> str:
        return redact_servers(self.servers)

    def matches(self, database: str, table: str) -> bool:
        """Whether ``database.table`` is captured (a pattern matches it, and it is no
        schema change tool's helper table unless those are kept)."""
        if not self.keep_helper_tables and is_helper_table(table):
            return False
        return table_matches(self.tables, database, table)

    def __repr__(self) -> str:
        kept = ", keep_helper_tables=True" if self.keep_helper_tables else ""
        return (
            f"SourceSpec(name={self.name!r}, dsn={self.redacted_dsn!r}, "
            f"tables={self.tables!r}{kept})"
        )
