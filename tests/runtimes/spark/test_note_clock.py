"""When a read carried across batches notes how far it delivered (``NoteClock``): a
second after its last note, by the clock or by the commit times it read, whichever
comes first, so a kill sends again about a second of changes however fast it read."""

from __future__ import annotations

import time

from dbus_spark.reads.open_read import NoteClock

COMMITTED = 1_700_000_000.0
"""A commit time (seconds since the epoch), the first the read meets."""


def test_a_backlog_read_fast_is_noted_at_each_second_of_its_commit_times() -> None:
    """Ten seconds of changes read within a moment of the clock: a note at each second
    of them. Noted by the clock alone, none was due, and a kill sent all ten again."""
    clock = NoteClock(1.0)
    due = []
    for tenth in range(101):
        committed = COMMITTED + tenth / 10
        if clock.due(committed):
            clock.tried(committed)
            due.append(round(committed - COMMITTED, 1))
    assert due == [float(second) for second in range(1, 11)]


def test_a_steady_read_is_noted_by_the_clock_when_its_commits_are_old() -> None:
    """Commits whose times do not move (a server's clock set back, or every change
    of a quiet moment in one second) are noted as the clock's second passes."""
    clock = NoteClock(0.2)
    assert not clock.due(COMMITTED)
    assert not clock.due(COMMITTED - 30)  # a commit time that goes back waits
    time.sleep(0.25)
    assert clock.due(COMMITTED - 30)
    clock.tried(COMMITTED - 30)
    assert not clock.due(COMMITTED - 30), "the clock starts again at a note"
    assert clock.due(COMMITTED - 29), "and the commit times from the noted one"
