"""The JSON form of the values the runtime writes down and reads back: pydantic's, one
way for all of them.

A value kept beside the checkpoint, carried in a micro-batch's offset or a task's
counts, or saved in the configuration file is a pydantic dataclass that inherits
``JsonForm``: ``to_json`` gives its JSON values, ``from_json`` reads them back with
each field checked and every key an older runtime did not write at its default. Those
texts outlive the runtime that wrote them (a new runtime reads an older one's files,
and the other way round), so a field's name and default, once written, stay; a value
whose JSON is not simply its fields (a list, an older form, a default that depends on
other keys) says so with pydantic's own validators and serializers, beside its fields.

A dataclass, not a ``BaseModel``: values keep their positional construction and
``dataclasses.replace``, and a field is assigned at a plain attribute's cost (the
stage counts one per change).
"""

from __future__ import annotations

from typing import Any, Self, TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

from dbus_fn.errors import DbusError

JSON_FORM = ConfigDict(hide_input_in_errors=True)
"""The settings of every such dataclass: an error does not quote the value it refuses
(the configuration's source DSNs carry their passwords)."""

Value = TypeVar("Value")

_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}
"""Each class's validator and serializer, made once (it takes milliseconds)."""


def _adapter(cls: type[Value]) -> TypeAdapter[Value]:
    found = _ADAPTERS.get(cls)
    if found is None:
        found = _ADAPTERS[cls] = TypeAdapter(cls)
    return found


class JsonForm:
    """A pydantic dataclass's JSON (module docstring)."""

    __slots__ = ()

    def to_json(self) -> Any:
        """As JSON values: dicts, lists, strings, numbers, booleans and None."""
        return _adapter(type(self)).dump_python(self, mode="json")

    def to_bytes(self) -> bytes:
        """As JSON text, encoded by pydantic at once, without ``to_json``'s values
        between (the form of what travels most often, a task's counts)."""
        return _adapter(type(self)).dump_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        """``data`` as ``to_json`` wrote it, in this runtime or an older one.

        A ``ValueError`` (pydantic's, naming each field it refuses) when it is none;
        where a type of ``dbus_fn`` refuses a field's value (a DSN, a position), that
        type's own error, with its message and exit code.
        """
        return _read(cls, data, text=False)

    @classmethod
    def from_bytes(cls, data: bytes | str) -> Self:
        """What ``to_bytes`` wrote (or JSON text): as ``from_json``."""
        return _read(cls, data, text=True)


def _read(cls: type[Value], data: Any, *, text: bool) -> Value:
    adapter = _adapter(cls)
    try:
        return adapter.validate_json(data) if text else adapter.validate_python(data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            cause = error.get("ctx", {}).get("error")
            if isinstance(cause, DbusError):
                raise cause from None
        raise


__all__ = ["JSON_FORM", "JsonForm"]
