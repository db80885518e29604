"""Frozen dataclasses to plain JSON values and back, every type checked on the way back.

The model's JSON form (:meth:`~.summary.Summary.to_json`): a field missing from the data
takes its default, so a summary saved before a field existed still loads; a value of the
wrong type fails (``ValueError``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, Union

__all__ = ["from_plain", "to_plain"]


def to_plain(value: Any) -> Any:
    """Dataclasses to dicts and tuples to lists, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    return value


T = TypeVar("T")
_hints_cache: dict[type, dict[str, Any]] = {}


def from_plain(cls: type[T], data: Any) -> T:
    """Rebuild dataclass ``cls`` from :func:`to_plain`'s output, checking every type."""
    if not isinstance(data, dict):
        raise ValueError(f"{cls.__name__}: expected an object, got {type(data).__name__}")
    hints = _hints_cache.get(cls)
    if hints is None:
        hints = _hints_cache[cls] = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{cls.__name__}.{f.name}")
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"{cls.__name__}: {error}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Union or origin is types.UnionType:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {value!r} does not fit {hint}")
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], item, where) for item in value)
        if len(args) != len(value):
            raise ValueError(f"{where}: expected {len(args)} items")
        return tuple(_convert(a, item, where) for a, item in zip(args, value, strict=True))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_plain(hint, value)
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint in (str, bool):
        if isinstance(value, hint):
            return value
    elif hint is Any:
        return value
    raise ValueError(f"{where}: {value!r} is not a {getattr(hint, '__name__', hint)}")
