"""Asking a running runtime, over its API: the one way commands reach it.

`dbus fn status` asks for the runtime's state, `dbus fn backfill`, `replay`,
`redrive`, `verify --repair`, `pause` and `resume` post a request and wait for
the answer, and `dbus ui` asks every runtime of a cluster for its state. A
runtime on this host is found by its checkpoint: it writes its API's address
beside it (``address_path``). What goes wrong is one line naming the fix.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Any

from pydantic import TypeAdapter

from dbus_fn.errors import ConfigError, DbusError, HistoryError, ServiceUnreachableError
from dbus_spark.observe.state import RuntimeState
from dbus_spark.planning.request_models import (
    Answer,
    Request,
    answer_from_json,
    request_to_json,
)
from dbus_spark.state.checkpoint import address_path

ASK_SECONDS = 2.0
"""How long a runtime's API has to answer a question about its state."""
SLACK_SECONDS = 15.0
"""How much longer than the planner's wait a request's answer may take to arrive."""

_STATE = TypeAdapter(RuntimeState)


class NoState(Exception):
    """Why a runtime's API at ``api`` gave no answer: ``code`` its HTTP status and
    ``detail`` what it said, or 0 and why nothing answered."""

    def __init__(self, api: str, code: int, detail: object) -> None:
        super().__init__(f"{code} {detail}" if code else f"not answering at {api} ({detail})")
        self.code = code
        self.detail = detail


def call(api: str, path: str, *, method: str = "GET", body: Any = None,
         token: str | None = None, timeout: float = ASK_SECONDS) -> tuple[int, Any]:  # fmt: skip
    """``method path`` of the API at ``api``: its HTTP status and JSON (None when it
    sent none); ``NoState`` for an error status or no answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{api.rstrip('/')}{path}", data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            text = answer.read()
            return answer.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        detail: object = exc.reason
        with contextlib.suppress(ValueError):
            detail = json.loads(exc.read()).get("detail", detail)
        exc.close()
        raise NoState(api, exc.code, detail) from None
    except (OSError, ValueError) as exc:
        raise NoState(api, 0, getattr(exc, "reason", exc)) from None


def fetch_state(api: str, token: str | None = None, timeout: float = ASK_SECONDS) -> RuntimeState:
    """A runtime's state from its API at ``api`` (``/api/v1/state``); ``NoState`` says
    in one line why it could not be had."""
    _, data = call(api, "/api/v1/state", token=token, timeout=timeout)
    try:
        return _STATE.validate_python(data)
    except ValueError as exc:
        raise NoState(api, 0, exc) from None


def ask_state(api: str, token: str | None = None) -> RuntimeState | str:
    """A runtime's state from its API at ``api``, or why it could not be had (one line)."""
    try:
        return fetch_state(api, token)
    except NoState as exc:
        return str(exc)


def runtime_url(folder: str) -> str:
    """The API address of the runtime running at checkpoint ``folder``."""
    address = address_path(folder)
    try:
        return address.read_text().strip()
    except OSError:
        raise ServiceUnreachableError(
            f"no runtime serves its API at checkpoint {folder} ({address} is missing); start "
            "it with `dbus runtime start`, with its API on (--api)",
            service="runtime",
        ) from None


def unanswered(folder: str, url: str, exc: NoState, token: str | None = None) -> DbusError:
    """The one line saying why the runtime at ``folder`` did not answer (``token``: the
    API token the command sent, if any)."""
    if exc.code == 401 and token:
        return ConfigError(
            f"the runtime at {url} refused the API token given (--api-token or "
            "DBUS_API_TOKEN); give the token it was started with",
            setting="--api-token",
        )
    if exc.code == 401:
        return ConfigError(
            f"the runtime at {url} wants its API token; pass --api-token or set DBUS_API_TOKEN",
            setting="--api-token",
        )
    if exc.code == 503:
        return ServiceUnreachableError(
            f"the runtime at checkpoint {folder} is not running its query yet ({exc.detail})",
            service="runtime",
        )
    said = f"answered {exc}" if exc.code else f"does not answer at {url} ({exc.detail})"
    return ServiceUnreachableError(
        f"the runtime at checkpoint {folder} {said}; is it running?", service="runtime"
    )


def runtime_state(folder: str, token: str | None, timeout: float) -> RuntimeState:
    """The state of the runtime running at checkpoint ``folder``."""
    url = runtime_url(folder)
    try:
        return fetch_state(url, token, timeout=timeout)
    except NoState as exc:
        raise unanswered(folder, url, exc, token) from None


def ask_runtime(folder: str, request: Request, *, token: str | None, timeout: float) -> Answer:
    """Post ``request`` to the runtime running at checkpoint ``folder``; its answer,
    accepted or refused. ``ServiceUnreachableError`` when its planner did not take it
    within ``timeout`` seconds (the runtime then withdrew it: nothing of it runs)."""
    url = runtime_url(folder)
    try:
        _, data = call(url, f"/api/v1/requests?wait={timeout:g}", method="POST",
                       body=request_to_json(request), token=token,
                       timeout=timeout + SLACK_SECONDS)  # fmt: skip
    except NoState as exc:
        if exc.code == 504:
            raise ServiceUnreachableError(
                f"no runtime took the request within {timeout:.0f}s at checkpoint {folder} "
                "(it is withdrawn); is its query running? ask again once it is",
                service="runtime",
            ) from None
        if exc.code in (400, 404, 422):
            raise HistoryError(f"the runtime at {url} refused the request: {exc.detail}") from None
        raise unanswered(folder, url, exc, token) from None
    return answer_from_json(data)


def withdraw_at(folder: str, request_id: str, *, token: str | None) -> Answer | None:
    """Take back a request from the runtime at checkpoint ``folder``: None when its
    planner had not taken it (nothing of it runs), else the planner's answer."""
    url = runtime_url(folder)
    try:
        code, data = call(url, f"/api/v1/requests/{request_id}", method="DELETE",
                          token=token, timeout=SLACK_SECONDS)  # fmt: skip
    except NoState as exc:
        raise unanswered(folder, url, exc, token) from None
    return None if code == 204 or data is None else answer_from_json(data)


__all__ = [
    "ASK_SECONDS",
    "NoState",
    "ask_runtime",
    "ask_state",
    "call",
    "fetch_state",
    "runtime_state",
    "runtime_url",
    "unanswered",
    "withdraw_at",
]
