"""A running runtime is asked through its API: `POST /api/v1/requests` hands the
request to its planner (the mailbox beside the checkpoint) and answers with the
planner's answer; a request its planner does not take is withdrawn; a body that
is not a request never reaches the planner. The server is the real one, on a free
port; the planner is played by a thread that reads the mailbox as the runtime's
does (``pending``, ``answer``)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import answering_planner, serving_api

from dbus_fn.errors import ConfigError, HistoryError, ServiceUnreachableError
from dbus_spark.interfaces.api.client import ask_runtime, withdraw_at
from dbus_spark.interfaces.history.follow import ask
from dbus_spark.planning.request_models import (
    Answer,
    BackfillRequest,
    Delete,
    PaceRequest,
    RepairItem,
    RepairRequest,
    ReplayRequest,
    answer_to_json,
    request_to_json,
)
from dbus_spark.state.checkpoint import requests_dir


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


@pytest.fixture
def planner(checkpoint: str) -> Iterator[list[Any]]:
    with answering_planner(checkpoint) as asked:
        yield asked


def _post(url: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{url}/api/v1/requests?wait=2", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    "request_",
    [
        BackfillRequest("orders", ("shop.orders",), "id > 3"),
        ReplayRequest("orders", "binlog.000001:4", None, "kafka://shadow", "shop"),
        RepairRequest(
            "orders", (RepairItem("shop", "shop.orders", ([1], [2]), (Delete("es://o", "[3]"),)),)
        ),
        PaceRequest("orders", True),
    ],
    ids=["backfill", "replay", "repair", "pace"],
)
def test_every_kind_of_request_reaches_the_planner_and_its_answer_comes_back(
    checkpoint: str, planner: list[Any], request_: Any
) -> None:
    with serving_api(checkpoint):
        reply = ask(checkpoint, request_, "request", answer_timeout=10)
    assert reply.accepted and reply.tasks == (("shop", "orders:shop.orders"),)
    assert planner == [request_]  # the planner got it whole, as it was asked
    assert not list(requests_dir(checkpoint).iterdir())  # and nothing is left behind


def test_a_refusal_is_raised_with_the_planners_line(checkpoint: str, planner: list[Any]) -> None:
    with serving_api(checkpoint), pytest.raises(HistoryError, match="no deployment 'nope'"):
        ask(checkpoint, PaceRequest("nope", True), "pause", answer_timeout=10)


def test_a_request_no_planner_takes_is_withdrawn_and_said_in_one_line(checkpoint: str) -> None:
    with serving_api(checkpoint), pytest.raises(ServiceUnreachableError) as caught:
        ask_runtime(checkpoint, PaceRequest("orders", True), token=None, timeout=1)
    assert "no runtime took the request within 1s" in str(caught.value)
    assert "withdrawn" in str(caught.value)
    assert not list(requests_dir(checkpoint).glob("*.json"))  # never runs later


def test_a_request_is_withdrawn_before_the_planner_takes_it(checkpoint: str) -> None:
    request = BackfillRequest("orders")
    with serving_api(checkpoint) as url:
        asking = threading.Thread(
            target=lambda: _post(url, request_to_json(request)), daemon=True
        )  # fmt: skip
        asking.start()
        mailbox = requests_dir(checkpoint) / f"{request.id}.json"
        for _ in range(100):
            if mailbox.exists():
                break
            threading.Event().wait(0.02)
        assert mailbox.exists()
        assert withdraw_at(checkpoint, request.id, token=None) is None
        assert not mailbox.exists()
        asking.join(10)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "pace", "id": "../../../x", "deployment": "d", "pause": True}, "id"),
        # It names files: no NUL byte, nor a name past a file name's 255 bytes.
        ({"kind": "pace", "id": "a" * 32 + "-\u0000", "deployment": "d", "pause": True}, "id"),
        ({"kind": "pace", "id": "a" * 32 + "-" + "s" * 200, "deployment": "d", "pause": True},
         "id"),
        ({"kind": "pace", "id": "a" * 32, "deployment": "", "pause": True}, "deployment"),
        ({"kind": "drop", "id": "a" * 32, "deployment": "d"}, "kind"),
        ({"kind": "pace", "id": "a" * 32, "deployment": "d", "pause": True, "only": "s"}, "only"),
        ({"kind": "backfill", "id": "a" * 32, "deployment": "d", "tables": "shop.t"}, "tables"),
        ({"kind": "replay", "id": "a" * 32, "deployment": "d"}, "start"),
    ],
)
def test_a_body_that_is_not_a_request_is_refused_and_never_reaches_the_planner(
    checkpoint: str, planner: list[Any], body: dict[str, Any], field: str
) -> None:
    with serving_api(checkpoint) as url:
        code, said = _post(url, body)
    assert code == 422
    assert any(field in json.dumps(problem) for problem in said["detail"]), said
    assert planner == [] and not requests_dir(checkpoint).exists()


def test_a_runtime_with_a_token_wants_it_and_takes_the_request_with_it(
    checkpoint: str, planner: list[Any]
) -> None:
    with serving_api(checkpoint, token="s3cret"):
        with pytest.raises(ConfigError, match="--api-token"):
            ask(checkpoint, PaceRequest("orders", False), "resume", answer_timeout=5)
        reply = ask(checkpoint, PaceRequest("orders", False), "resume", answer_timeout=5,
                    token="s3cret")  # fmt: skip
    assert reply.accepted and len(planner) == 1


def test_no_runtime_serving_the_checkpoint_is_one_line_at_once(checkpoint: str) -> None:
    with pytest.raises(ServiceUnreachableError, match="no runtime serves its API at checkpoint"):
        ask(checkpoint, PaceRequest("orders", True), "pause", answer_timeout=30)
    assert not requests_dir(checkpoint).exists()


def test_a_clusters_view_takes_no_request_and_says_where_to_ask() -> None:
    from dbus_spark.interfaces.api import ApiServer, ApiSettings, build_app
    from dbus_spark.observe import RuntimeMetrics

    settings = ApiSettings.parse("127.0.0.1:0")
    assert settings is not None
    server = ApiServer(build_app(RuntimeMetrics(runtime_id="view")), settings)
    try:
        code, said = _post(server.start(), request_to_json(PaceRequest("orders", True)))
    finally:
        server.stop()
    assert code == 404 and "--cluster" in said["detail"]


def test_a_request_the_planner_cannot_act_on_is_refused_and_the_next_one_answered(
    checkpoint: str, tmp_path: Path
) -> None:
    """Whatever is posted, the planner (and with it the runtime's query) goes on."""
    from dbus_spark.planning.mailbox import submit
    from dbus_spark.planning.requests import take_requests
    from dbus_spark.state.history import HistoryStore

    def pace(request: PaceRequest, only: str | None) -> Answer:
        if request.deployment == "odd":
            raise TypeError("unhashable type: 'list'")
        return Answer(True, f"paused {request.deployment}")

    odd, fine = PaceRequest("odd", True), PaceRequest("orders", True)
    submit(checkpoint, odd)
    submit(checkpoint, fine)
    take_requests(checkpoint, HistoryStore(tmp_path / "ckpt.progress"), {}, [], pace)
    answers = {
        path.name: json.loads(path.read_text())
        for path in requests_dir(checkpoint).glob("*.answer.json")
    }
    assert answers[f"{odd.id}.answer.json"]["accepted"] is False
    assert "could not act on the request (unhashable type" in answers[f"{odd.id}.answer.json"][
        "message"
    ]
    assert answers[f"{fine.id}.answer.json"] == answer_to_json(Answer(True, "paused orders"))
