from __future__ import annotations

import pytest

from dbus_fn.events import Operation
from dbus_fn.testing import delete, insert, row_change, update

pytest_plugins = ["pytester"]

MODULE = """
import dbus_fn as fn

@fn.route(tables="shop.orders")
def by_status(event: fn.RowChange) -> str:
    return f"kafka://orders.{event.row['status']}"
"""

MANIFEST = """
name = "orders"
version = "1.0.0"
module = "plugin_orders.py"
tables = ["shop.orders"]
"""


def test_authors_test_is_three_lines(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", dbus=MANIFEST)
    pytester.makepyfile(plugin_orders=MODULE)
    pytester.makepyfile(
        test_plugin_orders="""
        from dbus_fn.testing import insert

        def test_paid_orders_go_to_their_topic(dbus_run):
            outcome = dbus_run(insert("shop.orders", id=1, status="paid"))
            assert outcome.destinations == ["kafka://orders.paid"]

        def test_it_can_fail(dbus_run):
            assert dbus_run(insert("shop.orders", id=2, status="new")).destinations == []

        def test_pipeline_fixture(dbus_pipeline, dbus_deployment):
            assert dbus_pipeline.deployment is dbus_deployment
            assert dbus_deployment.manifest.name == "orders"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_it_can_fail*", "*kafka://orders.new*"])


def test_missing_manifest_fails_clearly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_lonely="def test_x(dbus_run):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no dbus.toml at or above*expected the test next to its*"])


def test_builders_fill_in_what_a_test_does_not_care_about() -> None:
    first, second = insert("shop.orders", id=1, status="new"), insert("shop.orders", {"id": 2})
    assert first.database == "shop" and first.table == "orders" and first.op is Operation.INSERT
    assert first.after == {"id": 1, "status": "new"} and first.before is None
    assert first.primary_key == ("id",)
    assert second.position.pos > first.position.pos
    changed = update("shop.orders", {"id": 1, "status": "new"}, status="paid")
    assert changed.before == {"id": 1, "status": "new"}
    assert changed.after == {"id": 1, "status": "paid"}
    gone = delete("shop.orders", sku="a-1")
    assert gone.after is None and gone.primary_key == ("sku",)
    with pytest.raises(ValueError, match=r"expected a table as \"db\.table\", got 'orders'"):
        insert("orders", id=1)
    with pytest.raises(ValueError, match="expected a before or an after image"):
        row_change("insert", "a.b", None, None)
