from __future__ import annotations

import re
from pathlib import Path

import pytest
from fn_modules import make_module

import dbus_fn as fn
from dbus_fn.decorators import function_info, globs_overlap
from dbus_fn.errors import FunctionValidationError
from dbus_fn.events import Operation


def _raises(tmp_path: Path, source: str) -> FunctionValidationError:
    with pytest.raises(FunctionValidationError) as caught:
        make_module(tmp_path, "import dbus_fn as fn\n" + source)
    return caught.value


def _names_function(error: FunctionValidationError, qualname: str, line: int) -> None:
    text = str(error)
    assert re.search(rf"fns_\w+:{qualname} \(\S*fns_\w+\.py:{line}\)", text), text
    assert error.function.endswith(f":{qualname}")
    assert error.location.endswith(f".py:{line}")


def test_decorated_function_is_returned_unchanged_and_recorded() -> None:
    @fn.filter(tables=["shop.orders", "shop.items"], operations="insert", order=3)
    def keep(event: fn.RowChange) -> bool:
        return True

    info = function_info(keep)
    assert info is not None
    assert keep(None) is True  # type: ignore[arg-type]
    assert info.kind == "filter"
    assert (
        info.name
        == f"{__name__}:test_decorated_function_is_returned_unchanged_and_recorded.<locals>.keep"
    )
    assert info.selector.tables == ("shop.orders", "shop.items")
    assert info.selector.operations == {Operation.INSERT}
    assert info.order == 3
    assert not info.takes_context
    assert info.location.endswith(f"test_decorators.py:{keep.__code__.co_firstlineno}")


def test_context_taking_function_is_recognised() -> None:
    @fn.route(tables="shop.*")
    def where(event: fn.RowChange, context: fn.FunctionContext) -> str | None:
        return None

    info = function_info(where)
    assert info is not None and info.takes_context


def test_selector_matches_globs_and_operations() -> None:
    @fn.projection(tables="shop.*", operations=["update", "delete"])
    def same(event: fn.RowChange) -> dict[str, object]:
        return dict(event.row)

    selector = function_info(same).selector  # type: ignore[union-attr]
    assert selector.matches("shop", "orders", Operation.UPDATE)
    assert not selector.matches("shop", "orders", Operation.INSERT)
    assert not selector.matches("crm", "orders", Operation.UPDATE)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("shop.orders", "shop.*", True),
        ("*.orders", "shop.*", True),
        ("shop.orders", "shop.users", False),
        ("crm.*", "shop.*", False),
    ],
)
def test_globs_overlap(a: str, b: str, expected: bool) -> None:
    assert globs_overlap(a, b) is expected


def test_filter_annotated_str_is_refused_naming_function_and_line(tmp_path: Path) -> None:
    error = _raises(
        tmp_path, '@fn.filter(tables="shop.orders")\ndef keep(event) -> str:\n    return "yes"\n'
    )
    _names_function(error, "keep", 2)
    assert "expected a return annotation of bool, got str" in str(error)


def test_projection_annotated_list_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path, '@fn.projection(tables="shop.orders")\ndef p(event) -> list:\n    return []\n'
    )
    _names_function(error, "p", 2)
    assert "expected a return annotation of dict (or a Mapping), got list" in str(error)


def test_route_annotated_int_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path, '@fn.route(tables="shop.orders")\ndef r(event) -> int | None:\n    return 1\n'
    )
    assert "expected a return annotation of str, a list of str, or None, got int | None" in str(
        error
    )


def test_route_with_three_parameters_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path,
        '@fn.route(tables="shop.orders")\ndef r(event, context, extra):\n    return None\n',
    )
    _names_function(error, "r", 2)
    assert "expected a signature (event) or (event, context), got 3 required parameters" in str(
        error
    )


def test_function_without_parameters_is_refused(tmp_path: Path) -> None:
    error = _raises(tmp_path, '@fn.filter(tables="shop.orders")\ndef f():\n    return True\n')
    assert "got no parameters ()" in str(error)


@pytest.mark.parametrize("tables", ["[]", '""', '"orders"', "None", '["shop.orders", 3]'])
def test_selector_naming_no_table_is_refused(tmp_path: Path, tables: str) -> None:
    error = _raises(tmp_path, f"@fn.filter(tables={tables})\ndef f(event):\n    return True\n")
    _names_function(error, "f", 2)
    assert "expected tables=" in str(error)
    assert f"got {eval(tables)!r}" in str(error) or "got " in str(error)


def test_selector_with_empty_list_says_what_arrived(tmp_path: Path) -> None:
    error = _raises(tmp_path, "@fn.filter(tables=[])\ndef f(event):\n    return True\n")
    assert 'expected tables= naming at least one "db.table" glob, got []' in str(error)


def test_unknown_operation_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path, '@fn.filter(tables="a.b", operations="upsert")\ndef f(event):\n    return True\n'
    )
    assert "expected operations= insert, update, delete and/or snapshot, got 'upsert'" in str(error)


def test_decorator_without_parentheses_is_refused(tmp_path: Path) -> None:
    error = _raises(tmp_path, "@fn.filter\ndef f(event):\n    return True\n")
    assert 'expected @fn.filter(tables="db.table"), got @fn.filter without arguments' in str(error)


def test_second_decorator_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path,
        '@fn.filter(tables="a.b")\n@fn.route(tables="a.b")\ndef f(event):\n    return True\n',
    )
    assert "got a function already decorated as route" in str(error)


def test_unresolvable_annotation_is_not_guessed_at(tmp_path: Path) -> None:
    module = make_module(
        tmp_path,
        "from __future__ import annotations\nimport dbus_fn as fn\n"
        '@fn.projection(tables="a.b")\ndef p(event) -> Missing:\n    return {}\n',
    )
    assert function_info(module.p) is not None


def test_explicit_name_is_used() -> None:
    @fn.filter(tables="a.b", name="keep-everything")
    def f(event: fn.RowChange) -> bool:
        return True

    assert function_info(f).name == "keep-everything"  # type: ignore[union-attr]


def test_method_is_refused(tmp_path: Path) -> None:
    error = _raises(
        tmp_path,
        'class Holder:\n    @fn.filter(tables="a.b")\n'
        "    def f(self, event):\n        return True\n",
    )
    _names_function(error, "Holder.f", 3)
    assert "expected a module-level function, got a method of Holder" in str(error)


def test_async_function_is_refused(tmp_path: Path) -> None:
    error = _raises(tmp_path, '@fn.route(tables="a.b")\nasync def r(event):\n    return None\n')
    assert "expected a plain function, got an async or generator function" in str(error)
