"""The cell's steps as spans of time: where each one starts and where its work ends.

A step is what one iteration of the loop costs, host and device together. The host's part
is the step's block on the cell's thread; but a backend that dispatches asynchronously (a
jitted JAX call, torch_xla after a sync) launches the device's work and runs on, so the
device may still run a step's work while the host is in the next step, or after the loop
in a statement that only waits. So a step ends where the later of its two parts ends: the
host's block, or the device's last piece of work that the step launched
(:func:`launched_work`). Steps tile the loop, each starting where the one before ended
(the first at its own start, or at the fetch of its batch just before it), so that a batch
fetched between two iterations belongs to the step it feeds. Work launched after the loop
is the cell's, never the last step's.

The breakdown of each step (:mod:`~xprof_magic._analysis.diagnosis.breakdown`) and the
summary's step times (:class:`~xprof_magic._analysis.model.summary.StepStats`) both take
their spans from :func:`step_spans`, so the two step charts agree on every step.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.model.summary import StepStats
from xprof_magic._analysis.summary import blocks
from xprof_magic._analysis.summary.where import INPUT_PREFIX
from xprof_magic._analysis.timeline.facts import DEVICE_SIDE, LABEL, LAUNCH, STEP, Block, TraceFacts
from xprof_magic._analysis.timeline.intervals import Spans, merge

__all__ = ["STALE_NS", "fetch_spans", "in_order", "launched_work", "step_spans", "steps_from_trace"]

Floats = NDArray[np.float64]
FETCH_GAP_NS = 5e6
"""A step's batch is the fetch that ended less than this before the step began."""
STALE_NS = 10e6
"""A launch that found the device idle starts it within this (a CPU client's thread wakes,
a chip's program loads); one made longer before the device's next work ran none of it."""


def steps_from_trace(facts: TraceFacts, input_pipeline: frozenset[str]) -> StepStats | None:
    """The steps of the cell's thread (:func:`~.blocks.main_line`) as :func:`step_spans`
    measures them; where that thread has none, the most frequent step name's runs on any
    thread, each its block's own span (:func:`~.blocks.steps_from_trace`)."""
    line = blocks.main_line(facts.blocks, input_pipeline)
    mine = [b for b in facts.blocks if b.line == line]
    marked = sorted((b for b in mine if b.kind == STEP), key=lambda b: b.start)
    if not marked:
        return blocks.steps_from_trace(facts)
    spans = step_spans(mine, fetch_spans(mine, input_pipeline), launched_work(facts))
    names = [b.name for b in marked]
    return blocks.step_stats(
        max(set(names), key=names.count),
        "trace",
        [(end - start) / 1e9 for _, start, end in spans],
        tuple(i for i, b in enumerate(marked) if b.holds_compile),
        [start / 1e9 for _, start, _ in spans],
    )


def fetch_spans(mine: list[Block], input_names: frozenset[str]) -> Spans:
    """When the cell's loop fetched its items (``next(…)`` labels) or its data loader's own
    traces ran, on the cell's thread (``mine``: its blocks)."""
    inputs = [
        (b.start, b.end)
        for b in mine
        if (b.kind == LABEL and b.name.startswith(INPUT_PREFIX)) or b.name in input_names
    ]
    return merge([([a for a, _ in inputs], [b for _, b in inputs])])


def launched_work(facts: TraceFacts) -> tuple[Floats, Floats]:
    """The first device's work by launch: for each piece, when the host launched it and
    when the device finished it (ns), sorted by launch.

    Where the device's events name their launch (a GPU's ``correlation_id``), exactly;
    else by the order the device runs launches in (:func:`in_order`)."""
    if facts.device_ids and facts.launch_ids:
        ids = np.concatenate([np.asarray(i, np.float64) for i, _ in facts.device_ids])
        ends = np.concatenate([np.asarray(e, np.float64) for _, e in facts.device_ids])
        launch_ids = np.concatenate([np.asarray(i, np.float64) for i, _ in facts.launch_ids])
        times = np.concatenate([np.asarray(t, np.float64) for _, t in facts.launch_ids])
        order = np.argsort(launch_ids, kind="stable")
        launch_ids, times = launch_ids[order], times[order]
        at = np.minimum(np.searchsorted(launch_ids, ids), len(launch_ids) - 1)
        known = launch_ids[at] == ids
        launched, done = times[at[known]], ends[known]
    else:
        launched, done = _by_order(facts)
    order = np.argsort(launched, kind="stable")
    return launched[order], done[order]


def _by_order(facts: TraceFacts) -> tuple[Floats, Floats]:
    pieces = [p for key in ("device", *DEVICE_SIDE) for p in facts.spans.get(key, [])]
    keys = [key for key in facts.spans if key.startswith(LAUNCH)]
    if not pieces or not keys:
        return np.empty(0), np.empty(0)
    lo, hi = merge(pieces)
    at = np.sort(
        np.concatenate([np.asarray(a, np.float64) for k in keys for a, _ in facts.spans[k]])
    )
    return in_order(at, lo, hi)


def in_order(at: Floats, lo: Floats, hi: Floats) -> tuple[Floats, Floats]:
    """The device's busy time ``[lo[k], hi[k])`` (disjoint, sorted) shared among the
    launches made at ``at`` (sorted): for each launch that ran, when it was made and when
    its work ended.

    The device runs launches in order, so its busy time divides into runs: a run starts when
    a launch finds the device idle and lasts while queued work remains, through the small
    gaps between one op and the next; a gap in which a launch arrives is the device
    waiting for the host, and ends a run. A run serves the launches made before it ended and
    not served yet, each its equal share of the run in turn (a loop's launches run the same
    program), none ending before it was made; but not those made :data:`STALE_NS` or more
    before it began, while the device sat idle: they ran nothing the timeline shows (an op
    the host ran itself, a sync with nothing to run)."""
    if not len(lo) or not len(at):
        return np.empty(0), np.empty(0)
    waited = np.searchsorted(at, lo[1:], side="right") > np.searchsorted(at, hi[:-1], side="left")
    cut = np.concatenate(([0], np.flatnonzero(waited) + 1))
    run_lo, run_hi = lo[cut], np.maximum.reduceat(hi, cut)
    made: list[float] = []
    ended: list[float] = []
    served = 0
    for start, end in zip(run_lo.tolist(), run_hi.tolist(), strict=True):
        served = max(served, int(np.searchsorted(at, start - STALE_NS, side="left")))
        last = int(np.searchsorted(at, end, side="left"))
        if last > served:
            share = (end - start) / (last - served)
            for j, k in enumerate(range(served, last), 1):
                made.append(float(at[k]))
                ended.append(max(float(at[k]), start + j * share))
            served = last
    return np.asarray(made, np.float64), np.asarray(ended, np.float64)


def step_spans(
    mine: list[Block], fetches: Spans, work: tuple[Floats, Floats]
) -> list[tuple[int, float, float]]:
    """Each step of the cell's thread (``mine``: its blocks) as its number, start and end
    (ns): tiling the loop, each ending where its host block or the device's work it
    launched (``work``: :func:`launched_work`) ends, whichever is later."""
    marked = sorted((b for b in mine if b.kind == STEP), key=lambda b: b.start)
    launched, done = work
    out: list[tuple[int, float, float]] = []
    previous: float | None = None
    ended: float | None = None
    for i, b in enumerate(marked):
        start = b.start
        if previous is not None and previous <= b.start and b.start - previous < FETCH_GAP_NS:
            start = previous
        elif previous is None or previous > b.start:
            start = _fetch_before(fetches, b.start)
        else:
            start = max(previous, _fetch_before(fetches, b.start))
        # The step's launches are those its host part made; the device may finish them
        # after the step before it ended, so the step's own span starts no earlier.
        lo, hi = np.searchsorted(launched, [start, b.end], side="left")
        finished = float(done[lo:hi].max()) if hi > lo else b.end
        if ended is not None:
            start = max(start, ended)
        end = max(b.end, start, finished)
        out.append((b.step_num if b.step_num is not None else i, start, end))
        previous, ended = b.end, end
    return out


def _fetch_before(fetches: Spans, at: float) -> float:
    """The start of the fetch that ended just before ``at`` (its batch's), else ``at``."""
    starts, ends = fetches
    i = int(np.searchsorted(ends, at, side="right")) - 1
    if i >= 0 and at - ends[i] < FETCH_GAP_NS:
        return float(starts[i])
    return at
