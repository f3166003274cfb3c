"""Events as JSON and as JSON lines (what `dbus source record` writes)."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest
from event_samples import assert_same_change, row_change, schema_change, transaction_commit

from dbus_fn import (
    EventFormatError,
    Operation,
    event_from_json,
    event_to_json,
    from_cloudevent,
    item_from_cloudevent,
    read_jsonl,
    to_cloudevent,
    write_jsonl,
)


def test_jsonl_round_trip_keeps_order_and_every_value(tmp_path: Path) -> None:
    items = [row_change(Operation.INSERT), row_change(Operation.UPDATE, row_index=4),
             schema_change(), row_change(Operation.DELETE, row_index=5), transaction_commit()]
    path = tmp_path / "capture.jsonl"
    assert write_jsonl(path, items) == 5
    lines = path.read_bytes().splitlines()
    assert len(lines) == 5 and all(line.startswith(b"{") for line in lines)
    back = [item_from_cloudevent(event) for event in read_jsonl(path)]
    assert back == items
    assert_same_change(back[1], items[1])  # type: ignore[arg-type]


def test_jsonl_appends_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    write_jsonl(path, [to_cloudevent(row_change())])
    with path.open("ab") as out:
        out.write(b"\n   \n")
    write_jsonl(path, [row_change(row_index=4)], append=True)
    assert [e.get_id()[-1] for e in read_jsonl(path)] == ["3", "4"]


def test_a_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    write_jsonl(path, [row_change()])
    with path.open("ab") as out:
        out.write(b'{"id": "x", "source": "/s", "type": "t"\n')
    events = read_jsonl(path)
    next(events)
    with pytest.raises(EventFormatError) as caught:
        next(events)
    assert caught.value.where == f"{path}:2"
    assert f"{path}:2" in str(caught.value)


def test_utc_commit_times_come_back_as_datetime_utc() -> None:
    back = from_cloudevent(event_from_json(event_to_json(row_change())))
    assert back.commit_time.tzinfo is UTC


def test_json_is_one_line_of_ascii() -> None:
    text = event_to_json(row_change())
    assert b"\n" not in text
    assert text.isascii()
    assert_same_change(from_cloudevent(event_from_json(text)), row_change())
    assert_same_change(from_cloudevent(event_from_json(text.decode())), row_change())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8 text"),
        (b"[1, 2]", "JSON list, expected a JSON object"),
        (b'{"source": "/s", "type": "t", "specversion": "1.0"}', "missing required attribute 'id'"),
        (b'{"id": "1", "source": "/s", "type": "t"}', "'specversion'"),
        (b'{"id": "1", "source": "/s", "type": "t", "specversion": "2.0"}', "specversion"),
        (b'{"id": "1", "source": "/s", "type": "t", "specversion": "1.0", "time": "soon"}',
         "malformed attribute"),
        (b'{"id": "1", "source": "/s", "type": "t", "specversion": "1.0", "Bad": "x"}',
         "lowercase"),
    ],
)
def test_bad_json_gives_clear_errors(text: bytes, expected: str) -> None:
    with pytest.raises(EventFormatError, match=expected):
        event_from_json(text, where="input")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"\x97\x00\xde\xad\xbe\xef", "input is not UTF-8 text (byte 0x97 at offset 0): expected "
         "a CloudEvent as JSON; record events with `dbus source record`"),
        (b"", "input is empty: expected one CloudEvent as a JSON object"),
        (b"  \n", "input is empty"),
        (b'{"id": "1"}\n{"id": "2"}\n', "input holds more than one JSON value (the next at line "
         "2, column 1): expected one CloudEvent; a JSONL file of events goes to "
         "`dbus fn run-local --events`"),
    ],
)  # fmt: skip
def test_what_is_not_one_json_event_says_what_to_do(text: bytes, expected: str) -> None:
    with pytest.raises(EventFormatError) as caught:
        event_from_json(text, where="input")
    assert expected in str(caught.value)


def test_a_byte_order_mark_is_read_past(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    write_jsonl(path, [row_change(), row_change(row_index=4)])
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert len(list(read_jsonl(path))) == 2
    assert_same_change(
        from_cloudevent(event_from_json("\ufeff" + event_to_json(row_change()).decode())),
        row_change(),
    )


def test_pretty_printed_json_in_a_jsonl_file_says_to_write_one_event_per_line(
    tmp_path: Path,
) -> None:
    import json

    path = tmp_path / "capture.jsonl"
    path.write_text(json.dumps(json.loads(event_to_json(row_change())), indent=2) + "\n")
    with pytest.raises(EventFormatError) as caught:
        list(read_jsonl(path))
    assert str(caught.value) == (
        f"{path}:1 holds part of a JSON value spread over several lines (pretty-printed?): "
        f"JSONL needs each CloudEvent on one line; rewrite the file with `jq -c . {path}`"
    )


def test_binary_data_in_a_jsonl_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    write_jsonl(path, [row_change()])
    with path.open("ab") as out:
        out.write(bytes(range(128, 256)) + b"\n")
    with pytest.raises(EventFormatError, match=rf"{path}:2 is not UTF-8 text \(byte 0x80"):
        list(read_jsonl(path))


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def _insert_with_json_column(value: object) -> str:
    import json

    event = json.loads(event_to_json(row_change(Operation.INSERT)))
    event["data"]["after"]["j"] = value
    return json.dumps(event)


def test_a_json_column_as_deep_as_mysql_allows_is_read() -> None:
    # MySQL refuses a JSON document deeper than 100 levels.
    event = event_from_json(_insert_with_json_column(_nested(100)))
    assert from_cloudevent(event).row["j"] == _nested(100)


@pytest.mark.parametrize(
    "text",
    [b"[" * 200_000, _insert_with_json_column(_nested(200)).encode()],
    ids=["200000-brackets", "a-column-200-deep"],
)
def test_an_event_nested_deeper_than_the_limit_is_refused_naming_where(
    text: bytes, tmp_path: Path
) -> None:
    says = "nests arrays and objects more than 128 levels deep"
    with pytest.raises(EventFormatError) as caught:
        event_from_json(text, where="input")
    assert str(caught.value).startswith(f"input {says}")
    assert "\n" not in str(caught.value)
    path = tmp_path / "capture.jsonl"
    write_jsonl(path, [row_change()])
    with path.open("ab") as out:
        out.write(text + b"\n")
    with pytest.raises(EventFormatError) as caught:
        list(read_jsonl(path))
    assert str(caught.value).startswith(f"{path}:2 {says}")


def test_a_line_over_the_event_limit_is_refused_and_one_at_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbus_fn import json_format

    line = event_to_json(row_change())
    monkeypatch.setattr(json_format, "MAX_EVENT_BYTES", len(line))
    path = tmp_path / "capture.jsonl"
    path.write_bytes(line + b"\r\n" + line + b"\n" + line[:-1] + b" " * 2 + b"}\n")
    events = read_jsonl(path)
    assert next(events).get_id() == next(events).get_id()
    with pytest.raises(EventFormatError) as caught:
        next(events)
    assert str(caught.value).startswith(
        f"{path}:3 holds more than {len(line)} bytes ({len(line) >> 20} MiB), the most one "
        "event may: expected one CloudEvent as a JSON object"
    )
