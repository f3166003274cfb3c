"""The hook specifications of dbus functions.

Each kind of function is one pluggy hook, named with the project prefix. The
decorators in ``dbus_fn.decorators`` turn a user's function into an
implementation of one of these hooks; the registry registers it with a
``PluginManager`` built here, so pluggy checks at registration time that the
implementation asks only for arguments the spec offers (``event`` and, if it
wants one, ``context``).

The pipeline does not call functions through ``pm.hook``: it resolves, per
table and operation, the chain of matching functions once, and calls them
directly. Pluggy is the discovery and validation step, not the per-event path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from dbus_fn.context import FunctionContext
    from dbus_fn.events import RowChange

PROJECT = "dbus"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class FunctionSpecs:
    """The three kinds of function a deployment may contain."""

    @hookspec
    def dbus_filter(self, event: RowChange, context: FunctionContext) -> bool:
        """Return ``True`` to keep the event, ``False`` to drop it.

        Every filter that matches the event's table and operation must pass.
        """
        raise NotImplementedError

    @hookspec
    def dbus_projection(self, event: RowChange, context: FunctionContext) -> Mapping[str, Any]:
        """Return the row to deliver, as a new dict; never mutate the input.

        Projections apply in order; each sees the previous one's result as the
        event's row.
        """
        raise NotImplementedError

    @hookspec
    def dbus_route(self, event: RowChange, context: FunctionContext) -> str | list[str] | None:
        """Return one or more destinations (``kafka://topic``, ``es://index``).

        ``None`` leaves the choice to the deployment's default route.
        """
        raise NotImplementedError


HOOK_NAMES = {
    "filter": "dbus_filter",
    "projection": "dbus_projection",
    "route": "dbus_route",
}
"""The hook each function kind implements."""


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager that knows the dbus hook specs."""
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(FunctionSpecs)
    return manager
