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
