"""Intervals as arrays: merged into disjoint intervals, cut, measured over windows.

The reader keeps, per kind, the start and end times of what the breakdown and the device's
busy time are made of (:attr:`~xprof_magic._analysis.timeline.facts.TraceFacts.spans`);
this is the interval arithmetic the device planes' readers and the later stages measure
them with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["NO_SPANS", "Spans", "covered", "measure", "merge", "subtract"]

Spans = tuple[NDArray[np.float64], NDArray[np.float64]]
"""Disjoint intervals, sorted: their starts and their ends (ns)."""
NO_SPANS: Spans = (np.empty(0), np.empty(0))


_Times = Sequence[float] | NDArray[np.float64]


def merge(pieces: Iterable[tuple[_Times, _Times]]) -> Spans:
    """The union of intervals given in pieces, as sorted disjoint intervals."""
    parts = [(np.asarray(lo, np.float64), np.asarray(hi, np.float64)) for lo, hi in pieces]
    if not parts:
        return NO_SPANS
    lo = np.concatenate([a for a, _ in parts])
    hi = np.concatenate([b for _, b in parts])
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if not len(lo):
        return NO_SPANS
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], np.maximum.accumulate(hi[order])
    first = np.ones(len(lo), bool)
    first[1:] = lo[1:] > hi[:-1]
    at = np.flatnonzero(first)
    return lo[at], hi[np.r_[at[1:] - 1, len(lo) - 1]]


def subtract(spans: Spans, cut: Spans) -> Spans:
    """What of ``spans`` that ``cut`` does not cover (both disjoint and sorted)."""
    starts, ends = spans
    if not len(starts) or not len(cut[0]):
        return spans
    # Only the cut's intervals that meet a span matter (the first span ending after one
    # starts before it ends).
    at = np.minimum(np.searchsorted(ends, cut[0], side="right"), len(starts) - 1)
    meets = starts[at] < cut[1]
    meets &= ends[at] > cut[0]
    cut_lo, cut_hi = cut[0][meets], cut[1][meets]
    if not len(cut_lo):
        return spans
    # Every piece's edges: the spans' own and the cut's; keep the pieces that lie in a span
    # and outside every cut.
    edges = _distinct_sorted(
        np.stack((starts, ends), axis=1).ravel(), np.stack((cut_lo, cut_hi), axis=1).ravel()
    )
    lo, hi = edges[:-1], edges[1:]
    mid = (lo + hi) / 2
    inside = np.searchsorted(starts, mid, side="right") - 1
    kept = (inside >= 0) & (mid < ends[np.maximum(inside, 0)])
    at = np.searchsorted(cut_lo, mid, side="right") - 1
    kept &= ~((at >= 0) & (mid < cut_hi[np.maximum(at, 0)]))
    return merge([(lo[kept], hi[kept])])


def _distinct_sorted(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """``np.unique`` of both together.

    Each is sorted where its spans are disjoint (a start, its end, the next start...), and a
    stable sort merges two sorted runs in one pass.
    """
    both = np.sort(np.concatenate((a, b)), kind="stable")
    if not len(both):
        return both
    keep = np.ones(len(both), bool)
    np.not_equal(both[1:], both[:-1], out=keep[1:])
    found: NDArray[np.float64] = both[keep]
    return found


def covered(spans: Spans, t: NDArray[np.float64]) -> NDArray[np.float64]:
    """For each time in ``t``, how long ``spans`` covered before it."""
    return coverage(spans)(t)


def coverage(spans: Spans) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """:func:`covered` for ``spans``, their running total summed once, for many calls."""
    starts, ends = spans
    if not len(starts):
        return lambda t: np.zeros(len(t))
    before = np.concatenate([[0.0], np.cumsum(ends - starts)])

    def at(t: NDArray[np.float64]) -> NDArray[np.float64]:
        i = np.searchsorted(starts, t, side="right")
        over = np.where(i > 0, np.maximum(0.0, ends[np.maximum(i - 1, 0)] - t), 0.0)
        found: NDArray[np.float64] = before[i] - over
        return found

    return at


def measure(spans: Spans, lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.float64]:
    """How long ``spans`` covers each interval ``[lo[k], hi[k])``."""
    return covered(spans, hi) - covered(spans, lo)
