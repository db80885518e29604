"""Frozen dataclasses to plain JSON values and back: the one codec of the files saved beside a run.

The files are ``xprof_magic.json`` and ``xprof_magic_summary.json``.

Written: a dataclass as an object of its fields (a field whose ``metadata`` says ``saved=False`` is
left out; one whose class sets ``SAVED_AS_ROW`` as the list of its fields in order, a compact row),
tuples as lists, dicts by their values. Read back by the dataclasses' type hints, each value
checked: a field missing from the data takes its default, so a file saved before a field existed
still loads, and a dataclass may also come as the list of its fields in order (how earlier versions
wrote some rows).

- :func:`from_plain` is strict: a value of the wrong type fails (``ValueError``), as a summary is
  read (one that fails is read again from its timeline).
- :func:`read_plain` is lenient, as a run's metadata is read (it may come from an older version,
  another tool or a damaged disk): a value that does not fit takes its default, a list or dict keeps
  the items that fit, and the fields where anything was left out are named.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, TypeVar, Union

__all__ = ["from_plain", "read_plain", "to_plain"]

T = TypeVar("T")
_hints_cache: dict[type, dict[str, Any]] = {}
_MISS = object()
"""What a quick reading (:func:`_quick`) gives for a value it does not take as it is."""
_quick_cache: dict[Any, Callable[[Any], Any] | None] = {}


def to_plain(value: Any) -> Any:
    """Dataclasses to dicts, tuples to lists, recursively."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if getattr(value, "SAVED_AS_ROW", False):
            return [to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)]
        return {
            f.name: to_plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.metadata.get("saved", True)
        }
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value


def from_plain(cls: type[T], data: Any) -> T:
    """Rebuild dataclass ``cls`` from :func:`to_plain`'s output, checking every type."""
    return _Reader(lenient=False).dataclass(cls, data, cls.__name__)


def read_plain(cls: type[T], data: Any) -> tuple[T, tuple[str, ...]]:
    """Rebuild dataclass ``cls`` from ``data`` as far as it fits, and the fields where it did not.

    The names are of its top-level fields where something did not fit (taken as its default, or left
    out of a list). Data that is not an object gives the defaults and names no field.
    """
    reader = _Reader(lenient=True)
    if not isinstance(data, dict):
        return cls(), ()
    return reader.dataclass(cls, data, ""), tuple(sorted(reader.bad))


class _Reader:
    """One reading: strict (any misfit raises), or lenient (misfits noted in :attr:`bad`).

    A lenient reading notes each misfit under the top-level field it is in.
    """

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.bad: set[str] = set()

    def _misfit(self, field: str) -> None:
        self.bad.add(field.split(".", 1)[0])

    def dataclass(self, cls: type[T], data: Any, where: str) -> T:
        if isinstance(data, list):  # a row: the fields in order
            names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
            if len(data) > len(names):
                raise ValueError(f"{where or cls.__name__}: {len(data)} values for {len(names)}")
            data = dict(zip(names, data, strict=False))
        if not isinstance(data, dict):
            raise ValueError(f"{where or cls.__name__}: expected an object")
        hints = _hints_cache.get(cls)
        if hints is None:
            hints = _hints_cache[cls] = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data or not f.metadata.get("saved", True):
                continue
            inner = f"{where}.{f.name}" if where else f.name
            try:
                kwargs[f.name] = self.value(hints[f.name], data[f.name], inner)
            except ValueError:
                if not self.lenient:
                    raise
                self._misfit(inner)
        try:
            return cls(**kwargs)
        except TypeError as error:  # a required field missing
            raise ValueError(f"{where or cls.__name__}: {error}") from None

    def value(self, hint: Any, value: Any, where: str) -> Any:
        quick = _quick_cache[hint] if hint in _quick_cache else _quick(hint)
        if quick is not None:
            found = quick(value)
            if found is not _MISS:
                return found
        origin = typing.get_origin(hint)
        if origin is Literal:
            if value in typing.get_args(hint):
                return value
            raise ValueError(f"{where}: {value!r} is not one of {typing.get_args(hint)}")
        if origin is Union or origin is types.UnionType:
            return self._union(hint, value, where)
        if origin is tuple:
            return self._tuple(hint, value, where)
        if origin is dict:
            return self._dict(hint, value, where)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self.dataclass(hint, value, where)
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

    def _union(self, hint: Any, value: Any, where: str) -> Any:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _Reader(lenient=False).value(option, value, where)
            except ValueError:
                continue
        raise ValueError(f"{where}: {value!r} does not fit {hint}")

    def _tuple(self, hint: Any, value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        args = typing.get_args(hint)
        if not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise ValueError(f"{where}: expected {len(args)} items")
            return tuple(self.value(a, item, where) for a, item in zip(args, value, strict=True))
        items = []
        for item in value:
            try:
                items.append(_Reader(lenient=False).value(args[0], item, where))
            except ValueError:
                if not self.lenient:
                    raise
                self._misfit(where)
        return tuple(items)

    def _dict(self, hint: Any, value: Any, where: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object")
        key_hint, value_hint = typing.get_args(hint) or (str, Any)
        out = {}
        for key, item in value.items():
            try:
                out[self.value(key_hint, key, where)] = _Reader(lenient=False).value(
                    value_hint, item, where
                )
            except ValueError:
                if not self.lenient:
                    raise
                self._misfit(where)
        return out


def _quick(hint: Any) -> Callable[[Any], Any] | None:
    """A reading of ``hint`` for values that fit it as JSON gives them, made once per hint.

    A number, text, a flag, or a tuple of those: the long fields of a run's metadata (the
    line sampler's looks, the steps' times), tens of thousands of values. It gives
    :data:`_MISS` for any value that does not plainly fit, which :meth:`_Reader.value` then
    reads the long way (and finds what is wrong with it); what it gives is what the long way
    gives. None: no quick reading of this hint.
    """
    quick: Callable[[Any], Any] | None = None
    if hint in _PLAIN:
        quick = _quick_plain(hint)
    elif typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            quick = _quick_items(args[0])
        elif args and all(arg in _EXACT for arg in args):
            quick = _quick_row(args)
    _quick_cache[hint] = quick
    return quick


_EXACT = (int, str, bool)
"""Hints whose values are taken as they are, if of exactly that type (not a flag for an int)."""
_PLAIN = (*_EXACT, float)
"""Hints whose values are read in one step: :data:`_EXACT`, and a float from any number."""
_NUMBERS = frozenset((int, float))


def _quick_plain(hint: type) -> Callable[[Any], Any]:
    if hint is float:
        return lambda value: float(value) if type(value) in _NUMBERS else _MISS
    return lambda value: value if type(value) is hint else _MISS


def _quick_items(hint: Any) -> Callable[[Any], Any] | None:
    """``tuple[hint, ...]``, every item read quickly, or :data:`_MISS` if one is not."""
    if hint in _PLAIN:
        kinds = _NUMBERS if hint is float else frozenset((hint,))

        def plain(value: Any) -> Any:
            if type(value) is not list or not kinds.issuperset(map(type, value)):
                return _MISS
            return tuple(map(float, value)) if hint is float else tuple(value)

        return plain
    item = _quick(hint)
    if item is None:
        return None

    def read(value: Any) -> Any:
        if type(value) is not list:
            return _MISS
        items = tuple(map(item, value))
        return _MISS if _MISS in items else items

    return read


def _quick_row(hints: tuple[Any, ...]) -> Callable[[Any], Any]:
    """``tuple[a, b, ...]`` of :data:`_EXACT` types: a list of exactly those, as a tuple."""

    def read(value: Any) -> Any:
        if type(value) is not list or tuple(map(type, value)) != hints:
            return _MISS
        return tuple(value)

    return read
