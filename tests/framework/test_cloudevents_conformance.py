"""The CloudEvents JSON reader against the conformance data: every valid event is
read, every invalid one is refused with an EventFormatError that says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dbus_fn.errors import EventFormatError
from dbus_fn.json_format import event_from_json, read_jsonl

DATA = Path(__file__).parent / "data" / "cloudevents"


def cases(kind: str) -> list[Any]:
    tests = json.loads((DATA / f"conformance-{kind}-events.json").read_text())["tests"]
    return [pytest.param(test["event"], id=test["id"]) for test in tests]


@pytest.mark.parametrize("event", cases("valid"))
def test_every_valid_event_is_read(event: dict[str, Any]) -> None:
    read = event_from_json(json.dumps(event))
    assert read.get_id() == event["id"]
    assert read.get_type() == event["type"]
    # null is an absent attribute: the event reads as if the attribute were not there.
    absent = event_from_json(json.dumps({k: v for k, v in event.items() if v is not None}))
    attributes, expected = read.get_attributes(), absent.get_attributes()
    assert attributes.keys() == expected.keys()
    for name in attributes.keys() - {"time"}:  # a missing time is filled in when read
        assert attributes[name] == expected[name]


@pytest.mark.parametrize("event", cases("invalid"))
def test_every_invalid_event_is_refused_with_a_reason(event: dict[str, Any]) -> None:
    with pytest.raises(EventFormatError) as refused:
        event_from_json(json.dumps(event))
    message = str(refused.value)
    assert "\n" not in message
    assert "NoneType" not in message and "has no len" not in message


@pytest.mark.parametrize(
    ("attribute", "value", "says"),
    [
        ("time", "2018-04-05T18:31Z", "not an RFC 3339 timestamp"),
        ("time", "2018-04-05T18:31:00+05", "not an RFC 3339 timestamp"),
        ("datacontenttype", "xyz", "not an RFC 2046 media type"),
    ],
)
def test_the_reason_names_the_attribute_and_the_form_it_needs(
    tmp_path: Path, attribute: str, value: str, says: str
) -> None:
    event = {"specversion": "1.0", "id": "x", "type": "t", "source": "/s", attribute: value}
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps(event) + "\n")
    with pytest.raises(EventFormatError, match=says) as refused:
        list(read_jsonl(events))
    assert repr(value) in str(refused.value)
    assert "events.jsonl" in str(refused.value)
