"""The HTTP server of a runtime: an ASGI app (FastAPI) run by uvicorn on a thread.

``/metrics`` is for Prometheus; ``/api/v1/...`` answers JSON (its OpenAPI document
is ``/openapi.json``); ``/`` is the dashboard, a page that polls the API. All are
made from one snapshot of the runtime (``dbus_spark.observe.state``). It is also
the one way to ask a running runtime for something: ``POST /api/v1/requests``
(``dbus_spark.interfaces.api.desk``), which the `dbus fn` commands use (``api.client``). ``dbus ui``
serves the same app for a whole cluster (``dbus_spark.interfaces.api.cluster``).

It binds to 127.0.0.1 unless told otherwise. Binding to any other address needs
a token, and then every request must carry it (``Authorization: Bearer TOKEN``):
what a runtime shows names its sources, tables and functions. The dashboard's
page and script hold no data and load without it; the page sends the token it is
given as ``#token=...`` in its URL.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import uvicorn
from fastapi import FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dbus_fn.errors import ConfigError, DbusError, FunctionNotFoundError
from dbus_fn.preview import DEFAULT_EVENTS
from dbus_spark.config.runtime import DEFAULT_API_ADDRESS
from dbus_spark.interfaces.api.desk import LONGEST_WAIT, RequestDesk
from dbus_spark.interfaces.api.token import check_token
from dbus_spark.interfaces.preview.service import Previewer
from dbus_spark.observe.state import (
    ClusterState,
    DeploymentState,
    HistoryState,
    RuntimeState,
    SinkState,
    SourceState,
    TopologyState,
)
from dbus_spark.planning.request_models import Answer, RequestId
from dbus_spark.planning.request_models import Request as AskedRequest

DASHBOARD = Path(__file__).with_name("dashboard")
"""The dashboard's page, script and style: served as they are, no build step."""


@dataclass(frozen=True)
class ApiSettings:
    host: str
    port: int
    token: str | None = None

    @classmethod
    def parse(cls, address: str, token: str | None = None) -> ApiSettings | None:
        """``HOST:PORT`` (``off``: no server). A host beyond loopback needs ``token``;
        a token given must be one a request can carry (``ConfigError`` otherwise)."""
        if token is not None:
            check_token(token)
        if address.strip().lower() == "off":
            return None
        host, sep, port = address.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ConfigError(
                f"invalid API address {address!r}: expected HOST:PORT such as "
                f"{DEFAULT_API_ADDRESS} (port 0: any free one), or off",
                setting="api",
            )
        if not _loopback(host) and not token:
            raise ConfigError(
                f"the API address {address} is beyond loopback: set a token with --api-token "
                "(or DBUS_API_TOKEN), which every request must then carry, or bind to "
                "127.0.0.1",
                setting="api_token",
            )
        return cls(host, int(port), token)



def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class View(Protocol):
    """What the app shows: a runtime (``RuntimeMetrics``) or a cluster (``ClusterView``)."""

    registry: CollectorRegistry

    def state(self) -> RuntimeState | None:
        """Now's snapshot; None before there is one. Raises ``DbusError`` when what it
        is made from cannot be read (ZooKeeper, for a cluster)."""
        ...


def build_app(
    view: View,
    token: str | None = None,
    desk: RequestDesk | None = None,
    previewer: Previewer | None = None,
) -> FastAPI:
    """The app showing ``view``; with ``desk``, one runtime's, it also takes requests,
    and with ``previewer`` it previews deployments on its recent events."""
    responses: dict[int | str, dict[str, Any]] = {
        503: {"description": "Nothing to show yet (the runtime has not started its query), "
              "or ZooKeeper cannot be read (a cluster)"}
    }  # fmt: skip
    if token:
        responses[401] = {"description": "Missing or wrong token"}
    app = FastAPI(
        title="dbus runtime",
        summary="What one dbus runtime reads, runs and writes.",
        version="1",
        responses=responses,
    )
    if token:
        expected = f"Bearer {token}".encode()

        @app.middleware("http")
        async def require_token(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            given = request.headers.get("authorization", "").encode()
            page = request.url.path == "/" or request.url.path.startswith("/dashboard/")
            if not page and not secrets.compare_digest(given, expected):
                return JSONResponse(
                    {"detail": "missing or wrong token: send Authorization: Bearer TOKEN"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
            return await call_next(request)

    def state() -> RuntimeState:
        try:
            found = view.state()
        except DbusError as exc:
            raise HTTPException(503, str(exc)) from None
        if found is None:
            raise HTTPException(503, "the runtime has not started its query yet; ask again soon")
        return found

    @app.get("/api/v1/state", summary="Everything below at once (what the dashboard polls)")
    def whole_state() -> RuntimeState:
        return state()

    @app.get("/api/v1/sources", summary="Sources: positions, lag, rows read")
    def sources() -> list[SourceState]:
        return state().sources

    @app.get("/api/v1/deployments", summary="Deployments: versions, counts, their functions")
    def deployments() -> list[DeploymentState]:
        return state().deployments

    @app.get(
        "/api/v1/deployments/{name}",
        summary="One deployment",
        responses={404: {"description": "No such deployment runs here"}},
    )
    def deployment(name: str) -> DeploymentState:
        for found in state().deployments:
            if found.name == name:
                return found
        raise HTTPException(
            404, f"no deployment {name!r} runs here; GET /api/v1/deployments lists them"
        )

    @app.get("/api/v1/sinks", summary="Sinks: messages per destination, retries, in flight")
    def sinks() -> list[SinkState]:
        return state().sinks

    @app.get(
        "/api/v1/topology",
        summary="The dataflow: sources → tables → deployments → destinations, with rates",
    )
    def topology() -> TopologyState:
        return state().topology

    @app.get(
        "/api/v1/cluster",
        summary="The cluster: its runtimes, leader, assignment epoch and functions",
        responses={404: {"description": "This is one runtime's API, not a cluster's"}},
    )
    def cluster() -> ClusterState:
        found = state().cluster
        if found is None:
            raise HTTPException(
                404, "this is one runtime's API; `dbus ui --cluster NAME` serves a cluster's"
            )
        return found

    @app.get("/api/v1/history", summary="History reads: bootstraps, backfills, repairs")
    def history() -> list[HistoryState]:
        return state().history

    def open_desk() -> RequestDesk:
        if desk is None:
            raise HTTPException(
                404, "this API shows a cluster; ask with `dbus fn ... --cluster NAME`, which "
                "reaches each source's runtime through ZooKeeper",
            )  # fmt: skip
        if desk.folder is None:
            raise HTTPException(503, "the runtime has not started its query yet; ask again soon")
        return desk

    @app.post(
        "/api/v1/requests",
        summary="Ask the runtime to backfill, replay, repair, pause or resume a deployment",
        responses={
            404: {"description": "This API shows a cluster, which takes no requests here"},
            504: {"description": "The runtime's planner did not take the request within "
                  "`wait` seconds; it is withdrawn and never runs"},
        },
    )  # fmt: skip
    def ask(
        body: AskedRequest,
        wait: Annotated[float, Query(ge=1, le=LONGEST_WAIT, description="Seconds to wait "
                                     "for the answer (the planner answers between two "
                                     "micro-batches)")] = 30.0,
    ) -> Answer:  # fmt: skip
        reply = open_desk().ask(body, wait)
        if reply is None:
            raise HTTPException(
                504, f"the runtime's planner did not take the request within {wait:.0f}s "
                "(it plans between micro-batches); it is withdrawn, so nothing of it runs",
            )  # fmt: skip
        return reply

    @app.delete(
        "/api/v1/requests/{request_id}",
        summary="Withdraw a request the planner has not taken (its answer if it had)",
        status_code=200,
        responses={
            204: {"description": "Withdrawn before the planner took it: nothing of it runs"},
            404: {"description": "This API shows a cluster, which takes no requests here"},
        },
    )  # fmt: skip
    def withdraw_request(request_id: RequestId) -> Any:
        reply = open_desk().withdraw(request_id)
        if reply is None:
            return Response(status_code=204)
        return reply

    @app.get(
        "/api/v1/preview/{name}",
        summary="A deployment over the runtime's recent events: what it does with each "
        "(nothing is written), beside its previous version with against=previous",
        responses={404: {"description": "No such deployment runs here, or this API shows "
                         "a cluster"}},
    )  # fmt: skip
    def preview(
        name: str,
        table: Annotated[list[str] | None, Query(description="db.table or table; default: "
                                                 "the tables it subscribes to")] = None,
        since: Annotated[float | None, Query(description="Epoch seconds: only changes "
                                             "committed since")] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = DEFAULT_EVENTS,
        against: Annotated[str | None, Query(pattern="^previous$")] = None,
    ) -> dict[str, Any]:  # fmt: skip
        if previewer is None:
            raise HTTPException(
                404, "this API shows a cluster; preview with `dbus fn preview PATH --cluster "
                "NAME`, or on one runtime's dashboard",
            )  # fmt: skip
        try:
            return previewer.preview(name, tables=table, since=since, limit=limit,
                                     against_previous=against == "previous")  # fmt: skip
        except FunctionNotFoundError as exc:
            raise HTTPException(404, str(exc)) from None
        except DbusError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(DASHBOARD / "index.html")

    app.mount("/dashboard", StaticFiles(directory=DASHBOARD), name="dashboard")

    @app.get(
        "/metrics",
        response_class=Response,
        summary="Prometheus metrics",
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
    )
    def prometheus_metrics() -> Response:
        return Response(generate_latest(view.registry), media_type=CONTENT_TYPE_LATEST)

    return app


class ApiServer:
    """``app`` served on ``settings``' address from a daemon thread."""

    def __init__(self, app: FastAPI, settings: ApiSettings, *, may_be_off: bool = True) -> None:
        """Bind at once (a taken port fails here); ``may_be_off``: whether the command
        accepts ``--api off``, which the error then offers."""
        self._settings = settings
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((settings.host, settings.port))
        except OSError as exc:
            self._socket.close()
            raise ConfigError(
                f"cannot serve the API on {settings.host}:{settings.port}: {exc.strerror}; "
                "pass another --api HOST:PORT (port 0: any free one)"
                + (", or --api off" if may_be_off else ""),
                setting="api",
            ) from None
        self._socket.listen(64)
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="dbus-api",
            daemon=True,
        )  # fmt: skip

    @property
    def url(self) -> str:
        host, port = self._socket.getsockname()[:2]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def start(self, timeout: float = 10.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.should_exit = True
            self._thread.join(5.0)
        self._socket.close()
