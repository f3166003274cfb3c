"""What a runtime API's token may be: one an ``Authorization: Bearer`` header can carry.

The runtime checks the token it is started with (``dbus_spark.interfaces.api.server``), and every
command that asks a runtime checks the one it would send (``api_token_option``), with
the same one-line refusals; this module is light enough for a command to load at once.
"""

from __future__ import annotations

import re

from dbus_fn.errors import ConfigError


def check_token(token: str, *, unset: str = "then the API serves loopback only") -> None:
    """Refuse a token no ``Authorization: Bearer`` header can match: empty, blank, or
    holding a space or a line break (often one read from a file with its newline),
    whether a runtime is started with it or a command sends it. ``unset``: what
    leaving the option out means. The token itself is never shown."""
    if not token.strip():
        problem = "is empty" if not token else "is only whitespace"
        raise ConfigError(
            f"--api-token (or DBUS_API_TOKEN) {problem}, so no request could ever carry it: "
            f"give a token of visible characters, or leave the option out for no token "
            f"({unset})",
            setting="api_token",
        )
    if not _TOKEN.fullmatch(token):
        raise ConfigError(
            "--api-token (or DBUS_API_TOKEN) holds a space, a line break or a character "
            "beyond ASCII, which an Authorization header cannot carry: give it without them "
            "(a token read from a file: strip its trailing newline)",
            setting="api_token",
        )


_TOKEN = re.compile(r"[\x21-\x7e]+")
"""Visible ASCII: what a Bearer token can be sent as."""
