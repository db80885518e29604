"""One timeline line as arrays: what every part of the timeline pass reads.

Made from a capture's bytes by :mod:`.wire` (or, where its layout is unexpected, through
the protobuf runtime by :mod:`.lines`), or from planes shaped like XProf's ``ProfileData``.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import xspace

__all__ = [
    "EndTimes",
    "Ends",
    "Floats",
    "Index",
    "Ints",
    "Line",
    "MetaLookup",
    "as_int",
    "as_number",
    "dense",
    "first_of_each",
    "no_values",
    "packed",
    "stat_readers",
]

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]
Index = NDArray[np.signedinteger[Any]]
"""Positions in a line, int32 where a big line's arrays are kept that way (a line has
fewer than 2**31 events: half an int64's memory), else int64."""
StatLookup = Callable[[int, str], "str | None"]
StatCheck = Callable[[Ints, str], "NDArray[np.bool_]"]
MetaStat = Callable[[str], "list[str | None]"]
MetaLookup = Callable[[int, str], "str | None"]
StatValues = Callable[[Ints, tuple[str, ...]], "dict[str, list[str | None]]"]
StatIntegers = Callable[[Ints, str], "list[int | None]"]


@dataclass
class Line:
    """One timeline line as arrays, in the order its events are stored."""

    name: str
    start: Floats
    dur: Floats
    name_id: Index
    names: list[str]
    stat: StatLookup
    """``stat(i, key)``: the value of event ``i``'s last stat named ``key``, or None."""
    has: StatCheck
    """``has(events, key)``: whether each of those events has a stat named ``key``."""
    text: StatLookup | None = field(default=None, repr=False)
    """``text(i, key)``: as :attr:`stat`, with a reference (``ref_value``: a name XLA
    interns, as ``hlo_module``'s) given as the name it refers to; None: as :attr:`stat`."""
    meta_stat: MetaStat = field(default=lambda key: [], repr=False)
    """``meta_stat(key)``: for each of :attr:`names`, in order, the value of its event
    metadata's stat named ``key``, or None (object planes: the first such stat of an event
    of that name). The default knows none (an empty list)."""
    values: StatValues = field(default=lambda index, keys: no_values(index, keys), repr=False)
    """``values(events, keys)``: by key, each of those events' last stat named so, as
    :attr:`text` gives it (None: none), every stat of an event read once: for the few
    events whose every value matters (a GPU kernel's ``correlation_id``, an allocator's
    figures). The default knows none."""

    integers: StatIntegers | None = field(default=None, repr=False)
    """``integers(events, key)``: as :meth:`ints`, all at once (None: one :attr:`stat` an
    event)."""
    release: Callable[[], None] = field(default=lambda: None, repr=False)
    """Let go of what the stat readers above keep (a big line's stats' places, 10 MB at 100
    MB of capture): none of them may be called after (a decoded line's then raise)."""

    def ints(self, index: Ints, key: str) -> list[int | None]:
        """Each of those events' last stat named ``key`` as a whole number: step numbers.

        None where it has none, or its text is not one.
        """
        if self.integers is not None:
            return self.integers(index, key)
        return [as_int(self.stat(i, key)) for i in index.tolist()]

    def numbers(self, index: Ints, key: str) -> Floats:
        """Each of those events' last stat named ``key`` as a number.

        NaN where it has none, or not a number.
        """
        return np.array([as_number(v) for v in self.values(index, (key,))[key]], np.float64)


class Ends:
    """A line's end times, each computed where it is read: ``start[i] + dur[i]``.

    The same numbers as ``(start + dur)[i]`` (one addition each), without an array of them
    as long as the line kept while it is read (10 MB for a line of 1.3 million events).
    Indexed as an array is (a position, positions, a mask or a slice).
    """

    def __init__(self, start: Floats, dur: Floats):
        self.start = start
        self.dur = dur

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, index: Any) -> Any:  # as an array's indexing is typed
        return self.start[index] + self.dur[index]


EndTimes = Floats | Ends
"""End times: an array, or :class:`Ends` computed from starts and durations."""


def no_values(index: Ints, keys: tuple[str, ...]) -> dict[str, list[str | None]]:
    return {key: [None] * len(index) for key in keys}


def as_number(text: str | None) -> float:
    """A stat's text as a number (NaN: none, or not a number)."""
    try:
        return float(text) if text else np.nan
    except ValueError:
        return np.nan


def as_int(text: str | None) -> int | None:
    """A stat's text as a whole number (None: none, or not one)."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def dense(ids: Ints) -> tuple[Ints, Index]:
    """The distinct ids, and each id's index among them (``np.unique``, without sorting).

    The indices are int32 (a line's names are fewer than 2**31: half the memory of a big
    line's).
    """
    if not len(ids) or ids.min() < 0 or ids.max() > 8 * len(ids) + 1024:
        unique, inverse = np.unique(ids, return_inverse=True)
        return unique, inverse.reshape(-1).astype(np.int32)
    present = np.zeros(int(ids.max()) + 1, bool)
    present[ids] = True
    index = np.cumsum(present, dtype=np.int32)
    index -= 1
    return np.flatnonzero(present), index[ids]


def packed(values: Floats) -> array[float]:
    """Times kept for later stages as ``array('d')``.

    8 bytes each, where a list's Python floats take 32, and compared and pickled as plainly as
    a list.
    """
    return array("d", np.ascontiguousarray(values, np.float64).tobytes())


_FIRST_CHUNK = 1 << 18
"""Positions made together in :func:`first_of_each` (a big line's took 10 MB at once)."""


def first_of_each(ids: Ints) -> tuple[Ints, Ints]:
    """The distinct ids in order and where each first occurs.

    As ``np.unique(ids, return_index=True)``, without sorting the ids when they are small
    numbers.
    """
    if not len(ids) or ids.min() < 0 or ids.max() > 8 * len(ids) + 1024:
        unique, first = np.unique(ids, return_index=True)
        return unique, first.astype(np.int64)
    n = len(ids)
    first = np.full(int(ids.max()) + 1, n, np.int64)
    for lo in range(0, n, _FIRST_CHUNK):  # positions a chunk at a time, not one array of all
        hi = min(n, lo + _FIRST_CHUNK)
        np.minimum.at(first, ids[lo:hi], np.arange(lo, hi))
    present = np.flatnonzero(first < len(ids))
    return present, first[present]


Read = Callable[[int, str], str | None]


def stat_readers(
    last: Callable[[int, str], Any], stat_ids: dict[str, Any]
) -> tuple[Read, Read, Callable[[Any], str]]:
    """A line's ``stat`` and ``text`` (:class:`Line`), and ``as_text``, from its protobuf stats.

    Args:
        last: ``last(event, key)`` is the event's last stat of that name as a protobuf
            ``XStat`` (None: none).
        stat_ids: each stat name's metadata ids.

    Returns:
        ``stat`` and ``text``, then ``as_text``: one ``XStat``'s value with what a
        ``ref_value`` points at named.
    """
    refs: dict[int, str] = {}

    def as_text(found: Any) -> str:
        if found.WhichOneof("value") != "ref_value":
            return xspace.stat_value(found)
        if not refs:
            for name, numbers in stat_ids.items():
                for i in numbers:
                    refs.setdefault(i, name)
        return refs.get(int(found.ref_value), "")

    def stat(index: int, key: str) -> str | None:
        found = last(index, key)
        return None if found is None else xspace.stat_value(found)

    def text(index: int, key: str) -> str | None:
        found = last(index, key)
        return None if found is None else as_text(found)

    return stat, text, as_text
