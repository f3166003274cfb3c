"""The decorators a function author uses: ``filter``, ``projection``, ``route``.

``@fn.filter(tables="shop.orders")`` checks the function's signature and return
annotation at once (so a mistake fails at import, naming the file and line),
records its selector, and attaches a pluggy hook implementation for the
registry to register. The function itself is returned unchanged: an author's
test calls it like any other function.
"""

from __future__ import annotations

import collections.abc
import inspect
import os
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal, TypeVar

from dbus_fn.errors import FunctionValidationError
from dbus_fn.events import Operation
from dbus_fn.hooks import HOOK_NAMES, hookimpl
from dbus_fn.manifest import TABLE_GLOBS, Destination, table_glob_problem

FunctionKind = Literal["filter", "projection", "route"]

F = TypeVar("F", bound=Callable[..., Any])

ATTRIBUTE = "__dbus_function__"
"""The attribute of a decorated function that holds its ``FunctionInfo``."""


_EXPECTED_RETURN = {
    "filter": "bool",
    "projection": "dict (or a Mapping)",
    "route": "str, a list of str, or None",
}


@dataclass(frozen=True, slots=True)
class Selector:
    """Which row changes a function sees: tables by glob, and operations."""

    tables: tuple[str, ...]
    operations: frozenset[Operation]

    def matches(self, database: str, table: str, op: Operation) -> bool:
        if op not in self.operations:
            return False
        qualified = f"{database}.{table}"
        return any(fnmatchcase(qualified, pattern) for pattern in self.tables)


def globs_overlap(a: str, b: str) -> bool:
    """Whether some ``db.table`` could match both globs ``a`` and ``b``.

    Decided part by part (database, then table): two parts overlap when either
    matches the other. Exact for literal names and for ``*``; for two partial
    globs (``o*`` and ``*s``) it may say yes where no real name fits both, which
    errs on the side of not refusing a deployment.
    """
    a_db, _, a_table = a.partition(".")
    b_db, _, b_table = b.partition(".")
    return _parts_overlap(a_db, b_db) and _parts_overlap(a_table, b_table)


def _parts_overlap(a: str, b: str) -> bool:
    return fnmatchcase(a, b) or fnmatchcase(b, a)


@dataclass(frozen=True, slots=True, eq=False)
class FunctionInfo:
    """A decorated function and what the framework knows about it."""

    kind: FunctionKind
    function: Callable[..., Any]
    name: str
    """``module:qualname``, unless the decorator was given ``name=``."""
    selector: Selector
    order: int
    takes_context: bool
    file: str
    line: int

    @property
    def location(self) -> str:
        return f"{_display_path(self.file)}:{self.line}"

    @property
    def hook_name(self) -> str:
        return HOOK_NAMES[self.kind]

    def describe(self) -> str:
        """``filter orders:skip_tests (orders.py:7)``, for messages."""
        return f"{self.kind} {self.name} ({self.location})"

    def as_plugin(self) -> object:
        """A pluggy plugin holding this function's hook implementation.

        The implementation asks for ``event``, or ``event`` and ``context``, so
        pluggy's own check (an implementation may take any subset of the spec's
        arguments) applies, whatever the author named the parameters.
        """
        func = self.function
        if self.takes_context:

            def implementation(event: Any, context: Any) -> Any:
                return func(event, context)

        else:

            def implementation(event: Any) -> Any:  # type: ignore[misc]
                return func(event)

        plugin = types.SimpleNamespace()
        setattr(plugin, self.hook_name, hookimpl(specname=self.hook_name)(implementation))
        return plugin


def filter(
    tables: str | Iterable[str],
    *,
    operations: str | Iterable[str] | None = None,
    order: int = 0,
    name: str | None = None,
) -> Callable[[F], F]:
    """Keep an event only if the function returns ``True``.

    ``tables`` is a ``db.table`` glob or a list of them; ``operations`` limits
    the function to some of ``insert``, ``update``, ``delete`` (default: all);
    functions of one kind run by ``order``, then in definition order.
    """
    return _decorator("filter", tables, operations, order, name)


def projection(
    tables: str | Iterable[str],
    *,
    operations: str | Iterable[str] | None = None,
    order: int = 0,
    name: str | None = None,
) -> Callable[[F], F]:
    """Replace the event's row by what the function returns (a new dict)."""
    return _decorator("projection", tables, operations, order, name)


def route(
    tables: str | Iterable[str],
    *,
    operations: str | Iterable[str] | None = None,
    order: int = 0,
    name: str | None = None,
) -> Callable[[F], F]:
    """Send the event where the function says: ``kafka://topic``, ``es://index``,
    a list of them, or ``None`` for the deployment's default route."""
    return _decorator("route", tables, operations, order, name)


def function_info(obj: object) -> FunctionInfo | None:
    """The ``FunctionInfo`` of a decorated function, or ``None``."""
    info = getattr(obj, ATTRIBUTE, None)
    return info if isinstance(info, FunctionInfo) else None


def _decorator(
    kind: FunctionKind,
    tables: object,
    operations: object,
    order: object,
    name: object,
) -> Callable[[F], F]:
    if callable(tables) and not isinstance(tables, str):
        # `@fn.filter` without parentheses hands us the function itself.
        function, location = _identify(tables)
        raise FunctionValidationError(
            f'{kind} {function} ({location}): expected @fn.{kind}(tables="db.table"), '
            f"got @fn.{kind} without arguments; name the tables the {kind} applies to",
            function=function,
            location=location,
        )

    def decorate(func: F) -> F:
        info = _inspect(kind, func, tables, operations, order, name)
        setattr(func, ATTRIBUTE, info)
        return func

    return decorate


def _identify(func: object) -> tuple[str, str]:
    module = getattr(func, "__module__", None) or "?"
    qualname = getattr(func, "__qualname__", None) or repr(func)
    code = getattr(func, "__code__", None)
    if code is None:
        return f"{module}:{qualname}", "?"
    return f"{module}:{qualname}", f"{_display_path(code.co_filename)}:{code.co_firstlineno}"


def _display_path(path: str) -> str:
    """A path relative to the working directory when it is under it: shorter messages."""
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return path
    return path if relative.startswith("..") else relative


def _inspect(
    kind: FunctionKind,
    func: object,
    tables: object,
    operations: object,
    order: object,
    name: object,
) -> FunctionInfo:
    function, location = _identify(func)

    def fail(expected: str, got: str, hint: str = "") -> FunctionValidationError:
        message = f"{kind} {function} ({location}): expected {expected}, got {got}"
        return FunctionValidationError(
            message + (f"; {hint}" if hint else ""), function=function, location=location
        )

    if not inspect.isfunction(func):
        raise fail("a plain function (def ...)", f"{type(func).__name__} {func!r}")
    if getattr(func, ATTRIBUTE, None) is not None:
        previous: FunctionInfo = getattr(func, ATTRIBUTE)
        raise fail(
            "one decorator per function",
            f"a function already decorated as {previous.kind}",
            "write a second function for the second role",
        )
    qualname = func.__qualname__
    if "." in qualname and "<locals>" not in qualname.rpartition(".")[0].rpartition(".")[2]:
        raise fail(
            "a module-level function",
            f"a method of {qualname.rpartition('.')[0]}",
            "the registry finds functions among a module's names, not in classes",
        )
    if inspect.iscoroutinefunction(func) or inspect.isgeneratorfunction(func):
        raise fail("a plain function", "an async or generator function")

    selector = Selector(_tables(tables, fail), _operations(operations, fail))
    if not isinstance(order, int) or isinstance(order, bool):
        raise fail("order= an int", repr(order))
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise fail("name= a non-empty str", repr(name))

    takes_context = _arity(func, fail) == 2
    _check_return(kind, func, fail)

    code = func.__code__
    return FunctionInfo(
        kind=kind,
        function=func,
        name=name if isinstance(name, str) else function,
        selector=selector,
        order=order,
        takes_context=takes_context,
        file=code.co_filename,
        line=code.co_firstlineno,
    )


_Fail = Callable[..., FunctionValidationError]


def _tables(tables: object, fail: _Fail) -> tuple[str, ...]:
    items: list[object]
    if isinstance(tables, str):
        items = [tables]
    elif isinstance(tables, Iterable):
        items = list(tables)
    else:
        raise fail('tables= a "db.table" glob or a list of them', repr(tables))
    if not items:
        raise fail(
            'tables= naming at least one "db.table" glob',
            repr(tables),
            'a selector must name the tables it applies to, e.g. tables="shop.*"',
        )
    bad = [item for item in items if table_glob_problem(item) is not None]
    if bad:
        unclosed = [item for item in bad if isinstance(item, str) and "[" in item]
        raise fail(
            f"tables= {TABLE_GLOBS}",
            ", ".join(repr(item) for item in bad),
            "a set of characters is written [abc], a literal [ as [[]" if unclosed else "",
        )
    return tuple(typing.cast(list[str], items))


def _operations(operations: object, fail: _Fail) -> frozenset[Operation]:
    if operations is None:
        return frozenset(Operation)
    items = [operations] if isinstance(operations, str | Operation) else operations
    if not isinstance(items, Iterable):
        raise fail("operations= insert, update, delete and/or snapshot", repr(operations))
    chosen: set[Operation] = set()
    for item in items:
        try:
            chosen.add(Operation(item))
        except ValueError:
            raise fail("operations= insert, update, delete and/or snapshot", repr(item)) from None
    if not chosen:
        raise fail("operations= naming at least one operation", repr(operations))
    return frozenset(chosen)


def _arity(func: Callable[..., Any], fail: _Fail) -> int:
    """1 for ``f(event)``, 2 for ``f(event, context)``."""
    signature = inspect.signature(func)
    parameters = list(signature.parameters.values())
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    required = [p for p in positional if p.default is p.empty]
    required_keyword = [
        p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.default is p.empty
    ]
    expected = "a signature (event) or (event, context)"
    if required_keyword:
        raise fail(expected, f"required keyword-only parameter(s) {', '.join(required_keyword)}")
    if len(required) > 2:
        raise fail(expected, f"{len(required)} required parameters {signature}")
    if not positional and not varargs:
        raise fail(expected, f"no parameters {signature}")
    return 2 if len(positional) >= 2 or varargs else 1


def _check_return(kind: FunctionKind, func: Callable[..., Any], fail: _Fail) -> None:
    """Refuse a return annotation that cannot be right for the kind.

    No annotation is fine. An annotation that does not resolve (a name only
    imported under ``TYPE_CHECKING``) is left alone rather than guessed at.
    """
    if "return" not in func.__annotations__:
        return
    try:
        annotation = typing.get_type_hints(func).get("return", None)
    except Exception:
        return
    if not _return_fits(kind, annotation):
        raise fail(f"a return annotation of {_EXPECTED_RETURN[kind]}", _type_name(annotation))


def _return_fits(kind: FunctionKind, annotation: object) -> bool:
    if annotation is Any:
        return True
    if kind == "filter":
        return annotation is bool
    if kind == "projection":
        origin = typing.get_origin(annotation) or annotation
        return isinstance(origin, type) and issubclass(origin, collections.abc.Mapping)
    return _route_fits(annotation)


def _route_fits(annotation: object) -> bool:
    if annotation in (str, type(None), None, Destination):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return all(_route_fits(arg) for arg in typing.get_args(annotation))
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.Iterable, set, frozenset):
        args = [arg for arg in typing.get_args(annotation) if arg is not Ellipsis]
        return all(arg in (str, Destination) for arg in args)
    return False


def _type_name(annotation: object) -> str:
    if isinstance(annotation, type):
        return annotation.__qualname__
    return str(annotation).replace("typing.", "")
