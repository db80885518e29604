"""Nesting by time on one timeline line, with array operations.

A line's events nest: sorted by start (longer first at equal starts), each event's parent is
the innermost earlier event still open. The former reader found it with a stack, event by
event; :func:`nest` finds the same parents, depths and closing order with numpy, and falls
back to that walk (:func:`walk`) on a line where a child outlasts its parent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline.line_arrays import EndTimes, Floats, Index, Ints, Line

__all__ = ["Nesting", "nest", "time_order", "union_ns", "walk"]


def time_order(line: Line) -> tuple[Index, Floats, Floats, Ints]:
    """The walk's order, and the line's start, duration and name in that order.

    The order is by start, longer first at equal starts, else as stored. No copies when
    already in order (the order then in int32: half the memory of a big line's).
    """
    start, dur = line.start, line.dur
    step, longer = np.diff(start), np.diff(dur)
    if np.all((step > 0) | ((step == 0) & (longer <= 0))):
        return np.arange(len(start), dtype=np.int32), start, dur, line.name_id
    order = np.lexsort((-dur, start))
    return order, start[order], dur[order], line.name_id[order]


def union_ns(lo: Floats, hi: Floats, window: tuple[float, float] | None) -> float:
    """Total length covered by the spans ``lo[i]..hi[i]`` (clipped to ``window``), once.

    Walks the spans as the former reader did, from a running span ``(0, -1)``, so a span
    starting before 0 (no window) counts from 0 as it did there.
    """
    if window is not None:
        lo, hi = np.maximum(lo, window[0]), np.minimum(hi, window[1])
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    order = np.lexsort((hi, lo))
    lo = np.concatenate(([0.0], lo[order]))
    hi = np.concatenate(([-1.0], hi[order]))
    reach = np.maximum.accumulate(hi)
    first = np.flatnonzero(np.concatenate(([True], lo[1:] > reach[:-1])))
    last = np.concatenate((first[1:] - 1, [len(lo) - 1]))
    return float(np.maximum(0.0, reach[last] - lo[first]).sum())


@dataclass
class Nesting:
    """Where each event of a sorted line sits: parent (-1: none), depth, closing order."""

    parent: Index
    depth: Index
    closed: Index
    """Positions of the pushed events in the order they close (children before parents)."""


def nest(start: Floats, end: EndTimes, pushed: NDArray[np.bool_]) -> Nesting:
    """Parents by time, as a stack walk in (start, -duration) order finds them.

    The walk pops every open event that ends at or before the next start, then pushes the
    next event if it is ``pushed``. When every child ends inside its parent, the open events
    at an event are exactly the pushed ones before it that end after its start, so the depth
    is a count and the parent is the last pushed event one level up: array operations.
    A line where a child outlasts its parent gets the walk itself.
    """
    n = len(start)
    # Depths and parents in int32: a big line's nesting keeps two arrays as long as it.
    is_pushed = pushed.astype(np.int32)
    depth = np.cumsum(is_pushed, dtype=np.int32)
    depth -= is_pushed
    del is_pushed
    ends = end[pushed]
    by_end = np.argsort(ends, kind="stable")  # nearly in order: few runs
    ends = ends[by_end]  # the unsorted ones let go before the search's answer is made
    # Where each pushed event closes: the first start at or after its end (``before[k]``
    # starts come before the ``k``-th end, in order). The ends at or before start ``i``
    # are then those with ``before`` at most ``i``: counted, not searched (one search of
    # the pushed events' ends, fewer than the line's starts).
    before = _before(start, ends)
    del ends
    closing = np.bincount(before, minlength=n + 1)[:n]
    np.cumsum(closing, out=closing)  # in place: one array as long as the line, not two
    np.subtract(depth, closing, out=depth, casting="unsafe")  # at most n: fits
    del closing
    close_at = np.empty(len(by_end), np.int64)
    close_at[by_end] = before
    del by_end, before
    levels = int(depth.max(initial=0)) + 1
    # Each event's parent: the last pushed event one level up before it. The events sorted
    # by level, then position: each level's events are found among the pushed ones of the
    # level above by one search (no keys of level and position as long as the line).
    small = np.int16 if levels < 1 << 15 else np.int64
    every = np.argsort(depth.astype(small), kind="stable").astype(np.int32)
    bounds = np.concatenate(([0], np.cumsum(np.bincount(depth, minlength=levels)))).tolist()
    parent = np.full(n, -1, np.int32)
    for level in range(1, levels):
        up = every[bounds[level - 1] : bounds[level]]
        up = up[pushed[up]]
        here = every[bounds[level] : bounds[level + 1]]
        at = np.searchsorted(up, here)
        at -= 1
        if len(here) and int(at.min()) < 0:  # no pushed event a level up before it
            return walk(start, end, pushed)
        parent[here] = up[at]
    del every
    positions = np.flatnonzero(pushed)
    if _outlasts(positions, parent, end):
        return walk(start, end, pushed)
    # By closing position, deeper first (a child closes before its parent): one key, made
    # in place of the closing positions, and the order in place of the key.
    order = close_at
    order *= levels
    order += levels - 1 - depth[positions]
    closed = np.argsort(order, kind="stable")
    del order, close_at
    np.take(positions, closed, out=closed, mode="clip")  # unbuffered: in place
    return Nesting(parent, depth, closed)


_CHECK_CHUNK = 1 << 16
"""Pushed events whose ends are compared with their parents' together (a big line's
comparison took four arrays as long as its pushed events at once)."""


def _outlasts(positions: Ints, parent: Index, end: EndTimes) -> bool:
    """Whether any of the pushed events at ``positions`` ends after its parent."""
    for lo in range(0, len(positions), _CHECK_CHUNK):
        here = positions[lo : lo + _CHECK_CHUNK]
        kids = here[parent[here] >= 0]
        if np.any(end[kids] > end[parent[kids]]):
            return True
    return False


def _before(starts: Floats, ends: Floats) -> Ints:
    """For each of ``ends`` (sorted), how many of ``starts`` (sorted) are before it.

    A search, not a merge of the two runs by a stable sort: that sort's order and ranks
    took four arrays of twice the line's length (64 MB for a line of a million events),
    and numpy's search of sorted keys is as fast.
    """
    found: Ints = np.searchsorted(starts, ends, side="left")
    return found


def walk(start: Floats, end: EndTimes, pushed: NDArray[np.bool_]) -> Nesting:
    n = len(start)
    parent = np.full(n, -1, np.int64)
    depth = np.zeros(n, np.int64)
    closed: list[int] = []
    stack: list[int] = []
    ends = end[:].tolist()
    for i, (begin, push) in enumerate(zip(start.tolist(), pushed.tolist(), strict=True)):
        while stack and begin >= ends[stack[-1]]:
            closed.append(stack.pop())
        if stack:
            parent[i] = stack[-1]
        depth[i] = len(stack)
        if push:
            stack.append(i)
    closed.extend(reversed(stack))
    return Nesting(parent, depth, np.array(closed, np.int64))
