"""A loop's steps recorded in Python: stamped one by one, or counted and spread between looks.

The step tracker (:mod:`xprof_magic._cell.step_tracker`) keeps one :class:`Fast` while a loop of
tiny steps runs without a marker per step, and one :class:`Run` for each such loop once it
ended; a counted loop's steps get their times here (:func:`spread_starts`). Standard library
only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Fast", "Run", "interpolate", "knots", "spread_starts"]


@dataclass(slots=True)
class Fast:
    """Steps recorded in Python: the first one's number, and where each started.

    Stamped: the loop's iterator appends each step's start (wall-clock ns) to ``stamps``,
    nothing else per step. Counted (``taken``: how many items the loop's iterator of a built-in
    container has given, read without touching it): nothing at all per step; the sampler's
    looks (``StepTracker.look``) keep ``(time, steps started)`` in ``looks``, between which
    the steps are spread evenly once the loop ends (:func:`spread_starts`).
    """

    first: int
    stamps: list[int]
    done: bool = False
    taken: Callable[[], int] | None = None
    base: int = 0
    start_ns: int = 0
    looks: list[tuple[int, int]] | None = None

    def started(self) -> int:
        """How many of its steps have started (never fewer than a look saw: a list that shrank)."""
        taken = self.taken
        if taken is None:
            return len(self.stamps)
        seen = self.looks[-1][1] if self.looks else 0
        try:
            return max(taken() - self.base, seen)
        except Exception:  # the iterator cannot say: what the last look saw
            return seen


@dataclass(slots=True)
class Run:
    """A loop's steps recorded in Python, once it ended.

    Where they come among the marked steps' durations, the first one's number, the starts (the
    first ``held``), and the end of the last (None: it was still running, so it is no step).
    ``looks``: the steps were counted, not stamped (:class:`Fast`): their starts are spread
    between the fast path's start (``start_ns``), the sampler's looks and ``stop_ns``, where
    the loop ended or its recording stopped (:func:`spread_starts`).
    """

    position: int
    first: int
    stamps: list[int]
    held: int
    end_ns: int | None
    looks: list[tuple[int, int]] | None = None
    start_ns: int = 0
    stop_ns: int = 0

    def bounds(self) -> tuple[list[int], list[int]]:
        """Each step's start and end (wall-clock ns)."""
        if self.looks is None:
            starts = self.stamps[: self.held]
        else:
            starts = spread_starts(self.start_ns, self.looks, self.held, self.stop_ns)[: self.held]
        ends = starts[1:] if self.end_ns is None else [*starts[1:], self.end_ns]
        return starts[: len(ends)], ends

    def knots(self) -> list[tuple[float, int]]:
        """A counted run's :func:`knots` (none for a stamped one)."""
        if self.looks is None:
            return []
        return knots(self.start_ns, self.looks, self.held, self.stop_ns)


def spread_starts(
    start_ns: int, looks: list[tuple[int, int]], count: int, stop_ns: int
) -> list[int]:
    """Where each of ``count`` counted steps started, and where the last ended (wall-clock ns).

    Spread evenly between the :func:`knots` that the loop's start and end and the sampler's
    looks make, so that the times are monotone and within the loop.
    """
    # From the start: a wall-clock ns (1.8e18) as a float is a multiple of 256.
    points = [(place, t - start_ns) for place, t in knots(start_ns, looks, count, stop_ns)]
    return [start_ns + round(t) for t in interpolate(points, count + 1)]


def knots(
    start_ns: int, looks: list[tuple[int, int]], count: int, stop_ns: int
) -> list[tuple[float, int]]:
    """Where the counted steps are known to have been: (steps started, wall-clock ns), in order.

    The steps ran from ``start_ns`` (0 started) to ``stop_ns`` (``count``); each look (its time,
    the steps started by then) landed inside the step running then: half-way through it for one
    look, a quarter from each end for the first and last of several looks at the same step (a
    long one).
    """
    found: list[tuple[float, int]] = [(0.0, start_ns)]
    at = start_ns
    k = 0
    while k < len(looks):
        started = looks[k][1]
        first = k
        while k + 1 < len(looks) and looks[k + 1][1] == started:
            k += 1
        k += 1
        if not 0 < started <= count:
            continue
        times = [looks[first][0]] if k - first == 1 else [looks[first][0], looks[k - 1][0]]
        places = [started - 0.5] if len(times) == 1 else [started - 0.75, started - 0.25]
        for place, t in zip(places, times, strict=True):
            at = max(min(t, stop_ns), at)
            found.append((place, at))
    found.append((float(count), max(stop_ns, at)))
    return found


def interpolate(points: Sequence[tuple[float, float]], count: int) -> list[float]:
    """The values at 0, 1 … ``count - 1`` of the line through ``points`` (x increasing)."""
    out: list[float] = []
    j = 0
    for n in range(count):
        while j + 2 < len(points) and points[j + 1][0] <= n:
            j += 1
        (p0, t0), (p1, t1) = points[j], points[j + 1]
        out.append(t0 + (t1 - t0) * (n - p0) / (p1 - p0) if p1 > p0 else t1)
    return out
