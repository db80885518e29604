"""Making batches in the user's own Python is the input pipeline: its host time moves to input.

The breakdown (:mod:`.breakdown`) measures ``input`` as the loop's waits in ``next()``; the
rest of the host's time is ``host``. Yet a NumPy ``augment(raw)`` in the step's body, a
tokenizer and collate there, or a list of batches made before the loop, are the input
pipeline too, as the profiling guide counts it ("the part of the workflow responsible for
loading and preprocessing data"), and their fixes are the data path's (precompute,
vectorize, prefetch in a thread), never a compiled step's. The cell's thread sampled during
the capture (:mod:`.own`) says which host instants ran such a line; :func:`as_input` moves
that part of each step's host seconds (and of the cell's, and of a statement outside the
steps) to ``input``, and keeps it as ``made_s``, so that the verdict, the breakdown's table
and its chart say the same thing.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from xprof_magic._analysis.diagnosis.own import MIN_LOOKS, Sampled
from xprof_magic._analysis.model.diagnosis import Aside, Breakdown, StepBreakdown

__all__ = ["MADE_ASIDE", "as_input"]

MADE_ASIDE = 0.5
"""The share of the host's looks outside the steps that must be making batches for a
statement outside them, held mostly by the host, to count as input."""


def as_input(parts: Breakdown, found: Sampled | None) -> Breakdown:
    """``parts`` with the host's seconds that made batches moved to ``input``.

    Per step by the share of its host looks that did (the share over all steps where a step has
    fewer than :data:`MIN_LOOKS`); for the cell by the share of all its host looks.
    """
    if found is None or "input" not in parts.categories or not found.batches().any():
        return parts
    made = found.batches()
    host = found.host
    steps = found.step
    inside = steps >= 0
    pooled = _ratio(int((made & inside).sum()), int((host & inside).sum()))
    rows = []
    counts = np.bincount(steps[host & inside], minlength=len(parts.steps))
    makes = np.bincount(steps[made & inside], minlength=len(parts.steps))
    for at, row in enumerate(parts.steps):
        share = _ratio(int(makes[at]), int(counts[at])) if counts[at] >= MIN_LOOKS else pooled
        rows.append(_moved(row, parts.categories, share))
    whole = _ratio(int(made.sum()), int(host.sum()))
    cell = _moved_cell(parts, whole)
    outside = _ratio(int((made & ~inside).sum()), int((host & ~inside).sum()))
    asides = tuple(_aside(a, outside) for a in parts.outside)
    return replace(cell, steps=tuple(rows), outside=asides)


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole > 0 else 0.0


def _moved(row: StepBreakdown, categories: tuple[str, ...], share: float) -> StepBreakdown:
    if share <= 0:
        return row
    host, put = categories.index("host"), categories.index("input")
    move = round(row.seconds[host] * min(1.0, share), 9)
    seconds = list(row.seconds)
    seconds[host] = round(seconds[host] - move, 9)
    seconds[put] = round(seconds[put] + move, 9)
    return replace(row, seconds=tuple(seconds), made_s=round(row.made_s + move, 9))


def _moved_cell(parts: Breakdown, share: float) -> Breakdown:
    if share <= 0 or not parts.cell:
        return parts
    host, put = parts.categories.index("host"), parts.categories.index("input")
    move = round(parts.cell[host] * min(1.0, share), 9)
    cell = list(parts.cell)
    cell[host] = round(cell[host] - move, 9)
    cell[put] = round(cell[put] + move, 9)
    return replace(parts, cell=tuple(cell), made_s=round(parts.made_s + move, 9))


def _aside(a: Aside, share: float) -> Aside:
    """A statement outside the steps that the host held, now input.

    It is input when most of the host's looks outside the steps made batches.
    """
    if a.category != "host" or share < MADE_ASIDE:
        return a
    return replace(a, category="input", held_s=round(a.held_s * share, 9))
