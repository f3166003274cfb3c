"""The bootstrap gate orders keys holding zero or partial dates as the server does:
a change of such a key is held or let through by the chunk that holds it, never a
TypeError between a date and a zero date's text."""

from __future__ import annotations

from datetime import date, datetime

from dbus_fn.capture import key_to_json
from dbus_fn.events import BinlogPosition
from dbus_fn.testing import row_change
from dbus_spark.state.history.gate import Gate
from dbus_spark.state.records import document_version

TABLE = "shop.legacy"
LATER = BinlogPosition("mysql-bin.000009", 900)


def change(id_: int, day: object, moment: object) -> object:
    return row_change(
        "update", TABLE, {"id": id_, "d": day, "dt": moment}, {"id": id_, "d": day, "dt": moment},
        primary_key=["id", "d", "dt"], position=LATER,
        column_types={"id": "int", "d": "date", "dt": "datetime"},
    )  # fmt: skip


def test_keys_with_zero_dates_find_their_chunk() -> None:
    # Two chunks read (at an earlier position), bounded as capture gives boundaries.
    uppers = [(1, "0000-00-00", "2015-05-00T00:00:00"), (1, date(2016, 1, 1), datetime(2016, 1, 1))]
    since = document_version(BinlogPosition("mysql-bin.000001", 4), 0)
    gate = Gate.from_json({
        "tasks": [["d", TABLE, ["id", "d", "dt"], [key_to_json(u) for u in uppers],
                   [since, since]]],
        "considered": None,
    })  # fmt: skip
    read = [
        change(1, "0000-00-00", "0000-00-00T00:00:00"),  # first chunk
        change(1, "2015-00-21", datetime(2015, 1, 1)),  # second: after 0000-00-00
        change(1, date(2015, 12, 31), "2015-05-00T00:00:00"),  # second
    ]
    unread = [
        change(1, date(2016, 1, 1), datetime(2016, 1, 1, 0, 0, 1)),  # past every chunk
        change(2, "0000-00-00", "0000-00-00T00:00:00"),
    ]
    assert [gate.admits("d", c) for c in read] == [True, True, True]  # type: ignore[arg-type]
    assert [gate.admits("d", c) for c in unread] == [False, False]  # type: ignore[arg-type]
    again = Gate.from_json(gate.to_json())
    assert [again.admits("d", c) for c in read + unread] == [True] * 3 + [False] * 2  # type: ignore[arg-type]
