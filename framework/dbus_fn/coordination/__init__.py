"""Coordination through ZooKeeper: the function registry, bundles, hot reload,
runtime membership, source assignment (sharding) and epoch-fenced positions.

The tree under a cluster root is documented in ``docs/coordination.md`` and in
``dbus_fn.coordination._layout``. Needs ``dbus-fn[coordination]`` (kazoo).
"""

from __future__ import annotations

from dbus_fn.bundle import (
    Bundle,
    build_bundle,
    content_hash,
    default_cache_dir,
    materialize,
)
from dbus_fn.coordination._assign import Quota, assign_sources, moved_sources, quotas
from dbus_fn.coordination._client import (
    ZooKeeperSettings,
    close,
    cluster_client,
    cluster_incarnation,
    connect,
    ensure_cluster,
    require_cluster,
)
from dbus_fn.coordination._coordinator import Coordinator
from dbus_fn.coordination._hold import HoldCheck
from dbus_fn.coordination._lag import binlog_lag, bytes_behind
from dbus_fn.coordination._layout import ClusterLayout
from dbus_fn.coordination._plans import PlanLog, read_plans
from dbus_fn.coordination._registry import (
    ActiveFunction,
    DeployResult,
    FunctionStore,
    FunctionSummary,
    VersionInfo,
)
from dbus_fn.coordination._requests import PostedRequest, RequestBox
from dbus_fn.coordination._sources import SourceReference, SourceRegistry
from dbus_fn.coordination._state import CommitOutcome, CommittedPosition, Ownership, SessionState
from dbus_fn.coordination._status import (
    ClusterStatus,
    LagProbe,
    RuntimeStatus,
    SourceStatus,
    cluster_status,
    history_progress,
)
from dbus_fn.coordination._watcher import ActiveSet, FunctionWatcher

__all__ = [
    "ActiveFunction",
    "ActiveSet",
    "Bundle",
    "ClusterLayout",
    "ClusterStatus",
    "CommitOutcome",
    "CommittedPosition",
    "Coordinator",
    "DeployResult",
    "FunctionStore",
    "FunctionSummary",
    "FunctionWatcher",
    "HoldCheck",
    "LagProbe",
    "Ownership",
    "PlanLog",
    "PostedRequest",
    "Quota",
    "RequestBox",
    "RuntimeStatus",
    "SessionState",
    "SourceReference",
    "SourceRegistry",
    "SourceStatus",
    "VersionInfo",
    "ZooKeeperSettings",
    "assign_sources",
    "binlog_lag",
    "build_bundle",
    "bytes_behind",
    "close",
    "cluster_client",
    "cluster_incarnation",
    "cluster_status",
    "connect",
    "content_hash",
    "default_cache_dir",
    "ensure_cluster",
    "history_progress",
    "materialize",
    "moved_sources",
    "quotas",
    "read_plans",
    "require_cluster",
]
