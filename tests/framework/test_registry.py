from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from fn_modules import make_module, write_module

from dbus_fn.errors import FunctionValidationError, ModuleLoadError, RegistryError
from dbus_fn.events import Operation
from dbus_fn.registry import FunctionRegistry, deployment_from_module, load_deployment, load_module

MODULE = """
import dbus_fn as fn

@fn.route(tables="shop.orders")
def by_status(event) -> str:
    return "kafka://x"

@fn.filter(tables="shop.*", order=2)
def late(event) -> bool:
    return True

@fn.filter(tables="shop.orders", order=1)
def early(event) -> bool:
    return True

@fn.projection(tables="shop.orders", operations="delete")
def on_delete(event) -> dict:
    return {}

alias = early
"""


def _folder(tmp_path: Path, manifest: str, module: str, *, stem: str) -> Path:
    (tmp_path / f"{stem}.py").write_text(textwrap.dedent(module))
    (tmp_path / "dbus.toml").write_text(textwrap.dedent(manifest))
    return tmp_path


def test_load_deployment_lists_functions_in_run_order(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        'name = "orders"\nversion = "1"\nmodule = "reg_orders.py"\ntables = ["shop.*"]\n',
        MODULE,
        stem="reg_orders",
    )
    deployment = load_deployment(folder)
    assert [f.name for f in deployment.functions] == [
        "reg_orders:early",
        "reg_orders:late",
        "reg_orders:on_delete",
        "reg_orders:by_status",
    ]
    filters, projections, routes = deployment.chain("shop", "orders", Operation.INSERT)
    assert [f.name for f in filters] == ["reg_orders:early", "reg_orders:late"]
    assert projections == ()
    assert [f.name for f in routes] == ["reg_orders:by_status"]
    assert deployment.subscribes("shop.users") and not deployment.subscribes("crm.users")


def test_dotted_module_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "reg_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "fns.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = load_module("reg_pkg")
    deployment = deployment_from_module(module, tables=["shop.*"])
    assert len(deployment.functions) == 4
    assert deployment.functions[0].name == "reg_pkg.fns:early"


def test_package_folder_by_path(tmp_path: Path) -> None:
    package = tmp_path / "reg_folder_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .impl import *\n")
    (package / "impl.py").write_text(textwrap.dedent(MODULE))
    deployment = deployment_from_module(load_module(package), tables=["shop.*"])
    assert {f.name for f in deployment.functions} == {
        "reg_folder_pkg.impl:early",
        "reg_folder_pkg.impl:late",
        "reg_folder_pkg.impl:on_delete",
        "reg_folder_pkg.impl:by_status",
    }


def test_duplicate_names_are_refused(tmp_path: Path) -> None:
    source = """
import dbus_fn as fn

@fn.filter(tables="a.b", name="same")
def one(event):
    return True

@fn.route(tables="a.b", name="same")
def two(event):
    return None
"""
    module = make_module(tmp_path, source)
    with pytest.raises(RegistryError) as caught:
        FunctionRegistry().register_module(module)
    message = str(caught.value)
    assert "duplicate function name 'same': filter same (" in message
    assert ":4) and route same (" in message and ":8)" in message
    assert "expected unique names, give one of them name=..." in message


def test_selector_matching_no_subscribed_table_is_refused(tmp_path: Path) -> None:
    source = (
        '\nimport dbus_fn as fn\n\n@fn.filter(tables=["shop.orders", "shop.ordres"])\n'
        "def f(event):\n    return True\n"
    )
    module = make_module(tmp_path, source)
    with pytest.raises(RegistryError) as caught:
        deployment_from_module(module, tables=["shop.orders", "shop.users"])
    message = str(caught.value)
    assert f"filter {module.__name__}:f (" in message and ".py:4)" in message
    assert (
        "selector table 'shop.ordres' matches none of the tables the deployment subscribes to"
        in message
    )
    assert "(shop.orders, shop.users)" in message


def test_module_that_fails_to_import_is_named_with_its_error_in_one_line(tmp_path: Path) -> None:
    path = write_module(tmp_path, "import dbus_fn as fn\n\nVALUE = undefined_name + 1\n")
    with pytest.raises(ModuleLoadError) as caught:
        load_module(path)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        f"{path.name}:3: importing the function module failed with NameError: "
        "name 'undefined_name' is not defined" in message
    )
    assert caught.value.target == str(path)
    assert path.stem not in sys.modules


@pytest.mark.parametrize(
    ("layout", "taken"),
    [
        ("copy.py", "Python's own copy module"),
        ("json/__init__.py", "Python's own json module"),
        ("pluggy.py", "the installed package pluggy"),
    ],
)
def test_a_module_named_like_one_python_has_is_refused_and_replaces_nothing(
    tmp_path: Path, layout: str, taken: str
) -> None:
    file = tmp_path / layout
    file.parent.mkdir(exist_ok=True)
    file.write_text("import dbus_fn as fn\n")
    target = file.parent if file.name == "__init__.py" else file
    name = target.stem
    modules, path = dict(sys.modules), list(sys.path)
    with pytest.raises(ModuleLoadError) as caught:
        load_module(target)
    message = str(caught.value)
    assert "\n" not in message
    other = f"{name}_functions" + ("" if target.is_dir() else ".py")
    assert message == (
        f"{target}: a function module named {name!r} would hide {taken} from the runtime "
        "and every deployment beside it; rename it (and module = in dbus.toml), such as to "
        f"{other}"
    )
    assert sys.modules.get(name) is modules.get(name)
    assert sys.path == path


def test_module_with_syntax_error(tmp_path: Path) -> None:
    path = write_module(tmp_path, "def broken(:\n")
    with pytest.raises(
        ModuleLoadError,
        match=rf"{path.name}:1: importing the function module failed with SyntaxError",
    ):
        load_module(path)


def test_missing_module(tmp_path: Path) -> None:
    with pytest.raises(
        ModuleLoadError, match=r"no such module; expected a \.py file or a package folder"
    ):
        load_module(tmp_path / "nothing.py")
    with pytest.raises(ModuleLoadError, match="no_such_module_here: no module of that name"):
        load_module("no_such_module_here")


def test_dotted_module_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "reg_broken_dotted.py").write_text("import not_a_real_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleLoadError) as caught:
        load_module("reg_broken_dotted")
    assert (
        "reg_broken_dotted.py:1: importing the function module failed with ModuleNotFoundError: "
        "No module named 'not_a_real_dependency'" in str(caught.value)
    )


def test_decorator_errors_pass_through_unwrapped(tmp_path: Path) -> None:
    path = write_module(
        tmp_path,
        'import dbus_fn as fn\n@fn.filter(tables="a.b")\ndef f(event) -> int:\n    return 1\n',
    )
    with pytest.raises(
        FunctionValidationError, match="expected a return annotation of bool, got int"
    ):
        load_module(path)


def test_manifest_module_relative_to_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _folder(
        tmp_path,
        'name = "rel"\nversion = "1"\nmodule = "reg_rel.py"\ntables = ["shop.*"]\n',
        MODULE,
        stem="reg_rel",
    )
    monkeypatch.chdir("/")
    assert len(load_deployment(folder / "dbus.toml").functions) == 4


def test_a_changed_module_file_is_loaded_again(tmp_path: Path) -> None:
    path = write_module(tmp_path, "import dbus_fn as fn\nVERSION = 1\n")
    first = load_module(path)
    assert load_module(path) is first
    path.write_text("import dbus_fn as fn\nVERSION = 22\n")
    second = load_module(path)
    assert second is not first and second.VERSION == 22


def test_functions_are_real_pluggy_hook_implementations(tmp_path: Path) -> None:
    source = """
import dbus_fn as fn

@fn.filter(tables="a.b")
def plain(e):
    return True

@fn.filter(tables="a.b")
def with_context(e, ctx):
    return ctx == "ctx"
"""
    registry = FunctionRegistry()
    registry.register_module(make_module(tmp_path, source))
    impls = registry.hook.dbus_filter.get_hookimpls()
    assert sorted(impl.argnames for impl in impls) == [("event",), ("event", "context")]
    assert sorted(registry.hook.dbus_filter(event=None, context="ctx")) == [True, True]
