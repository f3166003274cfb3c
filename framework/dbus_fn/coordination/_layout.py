"""Where everything lives under a cluster root in ZooKeeper.

One cluster is one znode tree, ``/dbus/<cluster>`` unless told otherwise (the
ZooKeeper address may carry a chroot too: ``127.0.0.1:2181/team-a``)::

    <root>                                  {"cluster": ..., "layout": 1}
      functions                             {"changes": n}  bumped by every registry write
        <name>
          versions/<version>                manifest, content hash, size, files, created
            bundle                          the zip itself (immutable)
          active                            "<version>"
      runtimes/<runtime-id>                 ephemeral: host, pid, capacity, handoff, started, api?
      election/member-<seq>                 ephemeral sequential; the lowest is the leader
      leader                                {"runtime", "term", "since"}
      sources/<name>                        {"dsn_env" | "dsn_file", "tables", "added"}
      assignments                           {"epoch", "leader", "term"}  bumped per decision
        <source>                            {"runtime", "epoch", "handoff"}; released:
                                            {"runtime": "", "epoch", "handoff", "released"}
      positions/<source>                    {"position", "epoch", "runtime", "committed",
                                             "history"}
      server_ids/<id>                       ephemeral {"runtime", "source"}: a claimed
                                            replication server id
      plans/<source>                        {"runtime", "epoch", "plans"}: the history reads
                                            its owner planned and may have sent, not
                                            yet committed with a position
      requests/<id>                         {"body", "sources", "posted"}: a history
                                            command (backfill, replay) for the sources
        <source>                            the answer of the source's owner

Names are plain data (a function, source or runtime name); secrets are never a
name or a value anywhere in the tree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dbus_fn.errors import ConfigError

LAYOUT_VERSION = 1
DEFAULT_CLUSTER = "default"
DEFAULT_ZOOKEEPER = "127.0.0.1:2181"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def check_name(value: str, what: str) -> str:
    """A name that is safe as one znode path segment; refuse anything else."""
    if not isinstance(value, str) or not _NAME.match(value) or value in (".", ".."):
        raise ConfigError(
            f"invalid {what} {value!r}: expected letters, digits, '_', '.' and '-' "
            "(at most 128, starting with a letter or digit)",
            setting=what,
        )
    return value


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """The paths of one cluster; ``root`` is absolute within the client's chroot."""

    cluster: str
    root: str

    @classmethod
    def for_cluster(cls, cluster: str, root: str | None = None) -> ClusterLayout:
        check_name(cluster, "cluster")
        path = root if root is not None else f"/dbus/{cluster}"
        if not path.startswith("/") or (path.endswith("/") and path != "/") or "//" in path:
            raise ConfigError(
                f"invalid cluster root {path!r}: expected an absolute znode path "
                "such as /dbus/default",
                setting="root",
            )
        return cls(cluster, path.rstrip("/") or "/")

    def _join(self, *parts: str) -> str:
        base = "" if self.root == "/" else self.root
        return "/".join([base, *parts])

    @property
    def functions(self) -> str:
        return self._join("functions")

    def function(self, name: str) -> str:
        return self._join("functions", name)

    def versions(self, name: str) -> str:
        return self._join("functions", name, "versions")

    def version(self, name: str, version: str) -> str:
        return self._join("functions", name, "versions", version)

    def bundle(self, name: str, version: str) -> str:
        return self._join("functions", name, "versions", version, "bundle")

    def active(self, name: str) -> str:
        return self._join("functions", name, "active")

    @property
    def runtimes(self) -> str:
        return self._join("runtimes")

    def runtime(self, runtime_id: str) -> str:
        return self._join("runtimes", runtime_id)

    @property
    def election(self) -> str:
        return self._join("election")

    @property
    def leader(self) -> str:
        return self._join("leader")

    @property
    def sources(self) -> str:
        return self._join("sources")

    def source(self, name: str) -> str:
        return self._join("sources", name)

    @property
    def assignments(self) -> str:
        return self._join("assignments")

    def assignment(self, source: str) -> str:
        return self._join("assignments", source)

    @property
    def positions(self) -> str:
        return self._join("positions")

    def position(self, source: str) -> str:
        return self._join("positions", source)

    @property
    def server_ids(self) -> str:
        return self._join("server_ids")

    def replica_id(self, replica_id: int) -> str:
        return self._join("server_ids", str(replica_id))

    def plans(self, source: str) -> str:
        return self._join("plans", source)

    @property
    def requests(self) -> str:
        return self._join("requests")

    def request(self, request_id: str) -> str:
        return self._join("requests", request_id)

    def answer(self, request_id: str, source: str) -> str:
        return self._join("requests", request_id, source)

    @property
    def containers(self) -> tuple[str, ...]:
        """The persistent folders a cluster is made with."""
        return (
            self.functions,
            self.runtimes,
            self.election,
            self.sources,
            self.assignments,
            self.positions,
            self.server_ids,
        )
