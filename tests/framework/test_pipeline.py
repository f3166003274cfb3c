from __future__ import annotations

import re
import time
from pathlib import Path
from types import ModuleType

import pytest
from fn_modules import make_module

from dbus_fn.manifest import Destination
from dbus_fn.outcomes import LATENCY_BOUNDS
from dbus_fn.pipeline import Outcome, Pipeline
from dbus_fn.registry import LoadedDeployment, deployment_from_module
from dbus_fn.testing import delete, insert, update

ORDERS = """
import time
import dbus_fn as fn

@fn.filter(tables="shop.orders")
def not_test(event):
    return not event.row.get("is_test", False)

@fn.projection(tables="shop.orders")
def public(event) -> dict:
    return {k: event.row[k] for k in ("id", "status")}

@fn.route(tables="shop.orders")
def by_status(event) -> str:
    return f"kafka://orders.{event.row['status']}"
"""


def _deployment(tmp_path: Path, source: str, **options: object) -> LoadedDeployment:
    module: ModuleType = make_module(tmp_path, "import dbus_fn as fn\n" + source)
    options.setdefault("default_route", "kafka://fallback")
    return deployment_from_module(module, **options)  # type: ignore[arg-type]


def _run(tmp_path: Path, source: str, *changes: object, **options: object) -> list[Outcome]:
    with Pipeline(_deployment(tmp_path, source, **options)) as pipeline:
        return list(pipeline.process_many(changes))  # type: ignore[arg-type]


def _only_dead(outcome: Outcome) -> str:
    assert not outcome.deliveries and not outcome.filtered
    (dead,) = outcome.dead_letters
    return dead.error


def test_filter_projection_route(tmp_path: Path) -> None:
    kept, dropped = _run(
        tmp_path,
        ORDERS,
        insert("shop.orders", id=1, status="paid", total="9.99"),
        insert("shop.orders", id=2, status="paid", is_test=True),
    )
    assert kept.destinations == ["kafka://orders.paid"]
    (delivery,) = kept.deliveries
    assert delivery.payload == {"id": 1, "status": "paid"}
    assert delivery.destination == Destination("kafka", "orders.paid")
    assert delivery.change.after == {"id": 1, "status": "paid", "total": "9.99"}
    assert dropped.filtered and not dropped.deliveries and not dropped.dead_letters


def test_every_matching_filter_must_pass(tmp_path: Path) -> None:
    source = """
@fn.filter(tables="shop.*")
def a(event) -> bool:
    return event.row["a"]

@fn.filter(tables="shop.orders")
def b(event) -> bool:
    return event.row["b"]
"""
    outcomes = _run(
        tmp_path,
        source,
        insert("shop.orders", id=1, a=True, b=True),
        insert("shop.orders", id=2, a=True, b=False),
        insert("shop.orders", id=3, a=False, b=True),
        insert("shop.items", id=4, a=True, b=False),  # b does not apply to items
    )
    assert [o.filtered for o in outcomes] == [False, True, True, False]


def test_projections_apply_in_order_each_seeing_the_previous_result(tmp_path: Path) -> None:
    source = """
@fn.projection(tables="shop.orders", order=2)
def second(event) -> dict:
    return {**event.row, "trail": event.row["trail"] + ["second"]}

@fn.projection(tables="shop.orders", order=1)
def first(event) -> dict:
    return {**event.row, "trail": ["first"]}
"""
    (outcome,) = _run(tmp_path, source, update("shop.orders", {"id": 1}, {"id": 1, "x": 2}))
    assert outcome.deliveries[0].payload == {"id": 1, "x": 2, "trail": ["first", "second"]}


def test_delete_payload_is_the_before_image(tmp_path: Path) -> None:
    (outcome,) = _run(tmp_path, "", delete("shop.orders", id=7, status="gone"), tables=["shop.*"])
    assert outcome.deliveries[0].payload == {"id": 7, "status": "gone"}
    assert outcome.destinations == ["kafka://fallback"]


def test_routes_union_their_destinations_none_means_default(tmp_path: Path) -> None:
    source = """
@fn.route(tables="shop.*")
def everywhere(event):
    return ["kafka://all", "es://all"] if event.row["id"] == 1 else None

@fn.route(tables="shop.*")
def again(event):
    return "kafka://all" if event.row["id"] == 1 else None
"""
    both, neither = _run(tmp_path, source, insert("shop.a", id=1), insert("shop.a", id=2))
    assert both.destinations == ["kafka://all", "es://all"]
    assert neither.destinations == ["kafka://fallback"]


def test_no_route_and_no_default_route_is_a_dead_letter(tmp_path: Path) -> None:
    (outcome,) = _run(
        tmp_path,
        '@fn.route(tables="shop.a")\ndef r(event):\n    return None\n',
        insert("shop.a", id=1),
        default_route=None,
    )
    error = _only_dead(outcome)
    assert "no destination for shop.a: expected a route to return one, or a default_route" in error


def test_unsubscribed_tables_and_operations(tmp_path: Path) -> None:
    source = '@fn.filter(tables="shop.a", operations="delete")\ndef no(event):\n    return False\n'
    deployment = _deployment(tmp_path, source)
    with Pipeline(deployment) as pipeline:
        other_table = pipeline.process(insert("shop.zzz", id=1))
        insert_passes = pipeline.process(insert("shop.a", id=1))
        delete_dropped = pipeline.process(delete("shop.a", id=1))
        stats = pipeline.stats()
    assert other_table.filtered and not other_table.deliveries
    assert insert_passes.destinations == ["kafka://fallback"]
    assert delete_dropped.filtered
    assert (stats.events_in, stats.ignored, stats.filtered, stats.delivered) == (3, 1, 1, 1)


FUNCTION = r"fns_\w+:(?P<q>\w+) \(\S*fns_\w+\.py:(?P<line>\d+)\)"


def _names(error: str, kind: str, qualname: str, line: int) -> None:
    match = re.search(f"{kind} {FUNCTION}", error)
    assert match, error
    assert match["q"] == qualname and int(match["line"]) == line, error


def test_filter_returning_non_bool_goes_to_dead_letter(tmp_path: Path) -> None:
    (outcome,) = _run(
        tmp_path,
        '@fn.filter(tables="shop.a")\ndef f(event):\n    return "yes"\n',
        insert("shop.a", id=1),
    )
    error = _only_dead(outcome)
    _names(error, "filter", "f", 2)
    assert "returned str 'yes'; expected bool (True keeps the event)" in error
    dead = outcome.dead_letters[0]
    assert dead.stage == "filter" and dead.user_error and dead.error_type == "FunctionError"


def test_projection_returning_non_dict_goes_to_dead_letter(tmp_path: Path) -> None:
    source = '@fn.projection(tables="shop.a")\ndef p(event):\n    return [1, 2]\n'
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    error = _only_dead(outcome)
    _names(error, "projection", "p", 2)
    assert "returned list [1, 2]; expected a dict of column values" in error


def test_projection_returning_a_non_string_key_goes_to_dead_letter(tmp_path: Path) -> None:
    source = '@fn.projection(tables="shop.a")\ndef p(event):\n    return {1: "x", "id": 1}\n'
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    error = _only_dead(outcome)
    _names(error, "projection", "p", 2)
    assert "expected a dict whose keys are column names (str)" in error
    assert "1 would become a column named by its text" in error


@pytest.mark.parametrize(
    "body",
    [
        'event.after["id"] = 2',
        "event.after.update(id=2)",
        'del event.after["id"]',
        "event.after.pop('id')",
    ],
)
def test_projection_mutating_its_input_goes_to_dead_letter(tmp_path: Path, body: str) -> None:
    source = f'@fn.projection(tables="shop.a")\ndef p(event):\n    {body}\n    return {{}}\n'
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    error = _only_dead(outcome)
    _names(error, "projection", "p", 2)
    assert "tried to change its input" in error
    assert "expected a new dict, e.g. {**event.row, 'x': 1}, got an in-place change" in error
    assert outcome.dead_letters[0].change.after == {"id": 1}


def test_route_to_unknown_scheme_goes_to_dead_letter(tmp_path: Path) -> None:
    source = '@fn.route(tables="shop.a")\ndef r(event):\n    return "http://example.com/x"\n'
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    error = _only_dead(outcome)
    _names(error, "route", "r", 2)
    assert (
        "returned 'http://example.com/x': expected a destination kafka://topic or es://index"
        in error
    )
    assert "unknown scheme 'http'" in error


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("42", "returned 42: expected a destination str"),
        ('["kafka://a", 3]', "expected destination strs"),
    ],
)
def test_route_returning_non_str_goes_to_dead_letter(
    tmp_path: Path, value: str, expected: str
) -> None:
    source = f'@fn.route(tables="shop.a")\ndef r(event):\n    return {value}\n'
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    error = _only_dead(outcome)
    _names(error, "route", "r", 2)
    assert expected in error


def test_route_outside_the_declared_sinks_goes_to_dead_letter(tmp_path: Path) -> None:
    source = '@fn.route(tables="shop.a")\ndef r(event):\n    return "es://a"\n'
    deployment = _deployment(tmp_path, source)
    from dataclasses import replace

    manifest = replace(deployment.manifest, sinks={"kafka": {}})
    with Pipeline(LoadedDeployment(manifest, deployment.functions)) as pipeline:
        error = _only_dead(pipeline.process(insert("shop.a", id=1)))
    assert "expected a destination on one of the deployment's sinks (kafka), got 'es://a'" in error


def test_function_that_raises_goes_to_dead_letter_and_the_batch_goes_on(tmp_path: Path) -> None:
    source = """
@fn.projection(tables="shop.a")
def p(event) -> dict:
    return {"ratio": 1 / event.row["n"]}
"""
    first, second, third = _run(
        tmp_path,
        source,
        insert("shop.a", id=1, n=1),
        insert("shop.a", id=2, n=0),
        insert("shop.a", id=3, n=4),
    )
    assert first.deliveries[0].payload == {"ratio": 1.0}
    error = _only_dead(second)
    _names(error, "projection", "p", 3)
    assert (
        "raised ZeroDivisionError: division by zero; expected it to return without raising" in error
    )
    dead = second.dead_letters[0]
    assert dead.function.endswith(":p")
    assert dead.destination == Destination(
        "kafka", f"dbus.dead-letter.{dead.function.split(':')[0].replace('_', '_')}"
    )
    assert 'return {"ratio": 1 / event.row["n"]}' in dead.traceback
    assert dead.traceback.endswith("ZeroDivisionError: division by zero")
    assert dead.change.after == {"id": 2, "n": 0}
    assert third.deliveries[0].payload == {"ratio": 0.25}


def test_busy_function_times_out(tmp_path: Path) -> None:
    source = """
@fn.filter(tables="shop.a")
def spin(event) -> bool:
    while event.row["spin"]:
        pass
    return True
"""
    started = time.monotonic()
    slow, fast = _run(
        tmp_path,
        source,
        insert("shop.a", id=1, spin=True),
        insert("shop.a", id=2, spin=False),
        timeout=0.2,
    )
    assert time.monotonic() - started < 2
    error = _only_dead(slow)
    _names(error, "filter", "spin", 3)
    assert "timed out: expected it to finish within 0.2 s" in error
    assert slow.dead_letters[0].error_type == "FunctionTimeoutError"
    assert fast.destinations == ["kafka://fallback"]


def test_sleeping_function_times_out_when_it_returns(tmp_path: Path) -> None:
    source = """
import time

@fn.route(tables="shop.a")
def nap(event):
    time.sleep(event.row["nap"])
    return "kafka://late"
"""
    slow, fast = _run(
        tmp_path,
        source,
        insert("shop.a", id=1, nap=0.5),
        insert("shop.a", id=2, nap=0),
        timeout=0.1,
    )
    assert "timed out" in _only_dead(slow)
    assert fast.destinations == ["kafka://late"]


STUBBORN = """
import time

@fn.filter(tables="shop.a")
def stubborn(event) -> bool:
    deadline = time.monotonic() + {seconds}
    while time.monotonic() < deadline:
        try:
            while time.monotonic() < deadline:
                pass
        except BaseException:
            pass
    return True
"""
"""A filter that swallows the watchdog's interrupt while it runs for ``seconds``."""


def test_function_that_swallows_the_interrupt_still_times_out(tmp_path: Path) -> None:
    source = STUBBORN.format(seconds=0.4)
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1), timeout=0.1)
    assert "timed out" in _only_dead(outcome)


def test_timeouts_work_off_the_main_thread(tmp_path: Path) -> None:
    import threading

    source = '@fn.filter(tables="shop.a")\ndef spin(event):\n    while True:\n        pass\n'
    outcomes: list[Outcome] = []
    worker = threading.Thread(
        target=lambda: outcomes.extend(_run(tmp_path, source, insert("shop.a", id=1), timeout=0.1))
    )
    worker.start()
    worker.join(5)
    assert not worker.is_alive()
    assert "timed out" in _only_dead(outcomes[0])


def test_context_is_given_to_functions_that_ask(tmp_path: Path) -> None:
    source = """
@fn.route(tables="shop.a")
def r(event, context):
    context.metrics.increment("seen")
    return f"kafka://{context.deployment}.{context.table}.{context.position.pos}"
"""
    change = insert("shop.a", id=1)
    deployment = _deployment(tmp_path, source, name="ctx")
    with Pipeline(deployment) as pipeline:
        outcome = pipeline.process(change)
        stats = pipeline.stats()
    assert outcome.destinations == [f"kafka://ctx.shop.a.{change.position.pos}"]
    (function,) = stats.functions.values()
    assert function.counters == {"seen": 1}


def test_context_is_read_only(tmp_path: Path) -> None:
    source = (
        '@fn.filter(tables="shop.a")\n'
        'def f(event, context):\n    context.function = "x"\n    return True\n'
    )
    (outcome,) = _run(tmp_path, source, insert("shop.a", id=1))
    assert "raised FrozenInstanceError" in _only_dead(outcome)


def test_stats_count_per_function_and_user_errors_apart(tmp_path: Path) -> None:
    source = """
@fn.filter(tables="shop.a")
def keep(event) -> bool:
    return event.row["id"] != 2

@fn.projection(tables="shop.a")
def boom(event) -> dict:
    if event.row["id"] == 3:
        raise ValueError("no")
    return {}
"""
    deployment = _deployment(tmp_path, source)
    with Pipeline(deployment) as pipeline:
        list(pipeline.process_many([insert("shop.a", id=i) for i in (1, 2, 3, 4)]))
        stats = pipeline.stats()
    assert (stats.events_in, stats.delivered, stats.filtered, stats.dead_lettered) == (4, 2, 1, 1)
    assert (stats.user_errors, stats.framework_errors) == (1, 0)
    keep = next(s for s in stats.functions.values() if s.kind == "filter")
    boom = next(s for s in stats.functions.values() if s.kind == "projection")
    assert (keep.calls, keep.passed, keep.filtered) == (4, 3, 1)
    assert (boom.calls, boom.passed, boom.dead) == (3, 2, 1)


def test_each_call_is_timed_raising_ones_included(tmp_path: Path) -> None:
    source = """
import time

@fn.projection(tables="shop.a")
def slow(event) -> dict:
    time.sleep(0.03)
    if event.row["id"] == 2:
        raise ValueError("no")
    return {}
"""
    with Pipeline(_deployment(tmp_path, source)) as pipeline:
        list(pipeline.process_many([insert("shop.a", id=i) for i in (1, 2, 3)]))
        (slow,) = pipeline.stats().functions.values()
    assert len(slow.latency) == len(LATENCY_BOUNDS) + 1
    assert sum(slow.latency) == slow.calls == 3
    # 30 ms each: in the bucket up to 50 ms (or above, on a slow machine), never below.
    assert sum(slow.latency[: LATENCY_BOUNDS.index(0.025) + 1]) == 0
    assert slow.seconds >= 0.09


def test_the_latest_failure_of_each_function_is_kept(tmp_path: Path) -> None:
    source = """
@fn.filter(tables="shop.a")
def keep(event) -> bool:
    return True

@fn.projection(tables="shop.a")
def boom(event) -> dict:
    if event.row["id"] > 1:
        raise ValueError(f"no {event.row['id']}")
    return {}
"""
    with Pipeline(_deployment(tmp_path, source)) as pipeline:
        list(pipeline.process_many([insert("shop.a", id=i) for i in (1, 2, 3)]))
        functions = pipeline.stats().functions.values()
    keep = next(s for s in functions if s.kind == "filter")
    boom = next(s for s in functions if s.kind == "projection")
    assert keep.last_error is None
    assert boom.last_error is not None
    assert "raised ValueError: no 3" in boom.last_error.error  # the latest of two
    assert boom.last_error.error_type == "FunctionError"
    assert boom.last_error.table == "shop.a" and boom.last_error.position


def test_framework_failure_is_counted_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = _deployment(tmp_path, "", timeout=None, tables=["shop.*"])
    pipeline = Pipeline(deployment)

    def broken(*args: object) -> Outcome:
        raise RuntimeError("bug in dbus")

    monkeypatch.setattr(pipeline, "_run", broken)
    outcome = pipeline.process(insert("shop.a", id=1))
    (dead,) = outcome.dead_letters
    assert dead.stage == "framework" and not dead.user_error
    assert dead.error == "dbus failed on this event: RuntimeError: bug in dbus"
    stats = pipeline.stats()
    assert (stats.user_errors, stats.framework_errors) == (0, 1)


def test_idle_time_between_events_is_not_a_timeout(tmp_path: Path) -> None:
    deployment = _deployment(
        tmp_path, '@fn.filter(tables="shop.a")\ndef f(event):\n    return True\n', timeout=0.05
    )
    with Pipeline(deployment) as pipeline:
        first = pipeline.process(insert("shop.a", id=1))
        time.sleep(0.3)
        second = pipeline.process(insert("shop.a", id=2))
        time.sleep(0.2)
    assert first.destinations == second.destinations == ["kafka://fallback"]
    assert pipeline.stats().timeouts == 0


def test_many_timeouts_leave_no_interrupt_behind(tmp_path: Path) -> None:
    source = STUBBORN.format(seconds=0.15)
    outcomes = _run(tmp_path, source, *(insert("shop.a", id=i) for i in range(3)), timeout=0.03)
    assert all("timed out" in _only_dead(o) for o in outcomes)
    time.sleep(0.2)  # an interrupt left pending would go off in this frame


STYLE_MODULE = '''"""Checkout team: order changes for the search index."""
import dbus_fn as fn

@fn.filter(tables="shop.orders")
def skip_test_accounts(event: fn.RowChange) -> bool:
    return not event.after.get("is_test", False)

@fn.projection(tables="shop.orders")
def public_fields(event: fn.RowChange) -> dict:
    return {k: event.after[k] for k in ("id", "status", "total")}

@fn.route(tables="shop.orders")
def by_status(event: fn.RowChange) -> str:
    return f"kafka://orders.{event.after['status']}"
'''


def test_the_house_style_module_works_unchanged(tmp_path: Path) -> None:
    module = make_module(tmp_path, STYLE_MODULE)
    order = {"id": 1, "status": "paid", "total": "9.99", "email": "a@b.c"}
    with Pipeline(deployment_from_module(module, default_route="kafka://orders")) as pipeline:
        paid = pipeline.process(insert("shop.orders", order))
        shipped = pipeline.process(update("shop.orders", order, status="shipped"))
        test = pipeline.process(insert("shop.orders", order, is_test=True))
        deleted = pipeline.process(delete("shop.orders", order))
    assert paid.destinations == ["kafka://orders.paid"]
    assert paid.deliveries[0].payload == {"id": 1, "status": "paid", "total": "9.99"}
    assert shipped.destinations == ["kafka://orders.shipped"]
    assert test.filtered
    # It reads event.after, which a delete lacks: the message says so.
    error = _only_dead(deleted)
    assert "raised AttributeError: 'NoneType' object has no attribute 'get'" in error
    assert "hint: event.after is None for a delete: read event.row" in error
