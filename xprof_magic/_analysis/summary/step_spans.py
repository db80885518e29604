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

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.model.summary import StepStats
from xprof_magic._analysis.summary import blocks
from xprof_magic._analysis.summary.where import INPUT_PREFIX
from xprof_magic._analysis.timeline.facts import (
    DEVICE_SIDE,
    EXECUTION,
    INLINE,
    LABEL,
    LAUNCH,
    READ,
    STAGING,
    STEP,
    Block,
    TraceFacts,
    execution_key,
)
from xprof_magic._analysis.timeline.intervals import (
    NO_SPANS,
    Spans,
    coverage,
    covered,
    measure,
    merge,
)

__all__ = [
    "STALE_NS",
    "StepSpan",
    "Work",
    "by_execution",
    "device_work",
    "fetch_spans",
    "in_order",
    "launched_work",
    "line_step_spans",
    "step_spans",
    "steps_from_trace",
]

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]
FETCH_GAP_NS = 5e6
"""A step's batch is the fetch that ended less than this before the step began."""
STALE_NS = 10e6
"""A launch that found the device idle starts it within this (a CPU client's thread wakes,
a chip's program loads); one made longer before the device's next work ran none of it."""


def steps_from_trace(facts: TraceFacts, input_pipeline: frozenset[str]) -> StepStats | None:
    """The steps of the cell's thread (:func:`~.blocks.main_line`) as :func:`step_spans` measures.

    Where that thread has none, the most frequent step name's runs on any thread, each its block's
    own span (:func:`~.blocks.steps_from_trace`).
    """
    line = blocks.main_line(facts.blocks, input_pipeline)
    mine = [b for b in facts.blocks if b.line == line]
    marked = sorted((b for b in mine if b.kind == STEP), key=lambda b: b.start)
    if not marked:
        return blocks.steps_from_trace(facts)
    spans = line_step_spans(facts, line, input_pipeline)
    names = [b.name for b in marked]
    return blocks.step_stats(
        max(set(names), key=names.count),
        "trace",
        [(span.end - span.start) / 1e9 for span in spans],
        tuple(i for i, b in enumerate(marked) if b.holds_compile),
        [span.start / 1e9 for span in spans],
        tuple(i for i, span in enumerate(spans) if span.estimated),
        [b.start / 1e9 for b in marked],
    )


def line_step_spans(facts: TraceFacts, line: str, input_names: frozenset[str]) -> list[StepSpan]:
    """:func:`step_spans` of the steps on thread ``line``, worked out once for these facts.

    ``input_names`` names the data loader's traces. Kept in :attr:`~.facts.TraceFacts.derived`:
    the summary's steps and the diagnosis's breakdown both ask. Read, never changed.
    """
    key = ("step_spans", line, input_names)
    found: list[StepSpan] | None = facts.derived.get(key)
    if found is None:
        mine = [b for b in facts.blocks if b.line == line]
        found = step_spans(
            mine, fetch_spans(mine, input_names), launched_work(facts), device_work(facts)
        )
        facts.derived[key] = found
    return found


def fetch_spans(mine: list[Block], input_names: frozenset[str]) -> Spans:
    """When the cell's loop fetched its items or its data loader's own traces ran.

    Fetches are ``next(…)`` labels, on the cell's thread (``mine``: its blocks).
    """
    inputs = [
        (b.start, b.end)
        for b in mine
        if (b.kind == LABEL and b.name.startswith(INPUT_PREFIX)) or b.name in input_names
    ]
    return merge([([a for a, _ in inputs], [b for _, b in inputs])])


class Work(NamedTuple):
    """The first device's work by launch, sorted by launch.

    When the host launched each piece, when the device finished it (ns), and whether that end is
    shared out rather than seen (:func:`in_order`).
    """

    launched: Floats
    done: Floats
    shared: Bools


def launched_work(facts: TraceFacts) -> Work:
    """The first device's work by launch (:class:`Work`).

    Where the device's events name their launch (a GPU's ``correlation_id``), exactly; where
    the timeline shows each execution whole (:data:`~.facts.EXECUTION`: the CPU client's,
    a chip's modules), each launch is its execution in turn (:func:`by_execution`), exactly;
    else by the order the device runs launches in (:func:`in_order`), an estimate."""
    shared = np.zeros(0, bool)
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
        shared = np.zeros(len(launched), bool)
    else:
        launched, done, shared = _by_order(facts)
    order = np.argsort(launched, kind="stable")
    return Work(launched[order], done[order], shared[order])


def device_work(facts: TraceFacts) -> Spans:
    """When the first device worked for the host's launches.

    Its own busy time, its waits and copies (:data:`~.facts.DEVICE_SIDE`) and the host's staging
    of copies.
    """
    return merge(p for key in ("device", *DEVICE_SIDE, STAGING) for p in facts.spans.get(key, []))


def _by_order(facts: TraceFacts) -> tuple[Floats, Floats, Bools]:
    busy = device_work(facts)
    keys = [key for key in facts.spans if key.startswith(LAUNCH)]
    if not len(busy[0]) or not keys:
        return np.empty(0), np.empty(0), np.zeros(0, bool)
    if any(key.startswith(EXECUTION) for key in facts.spans):
        return _by_program(facts, keys, busy)
    made = [np.asarray(a, np.float64) for k in keys for a, _ in facts.spans[k]]
    weight = [
        np.full(len(a), _cost(facts, k[len(LAUNCH) :])) for k in keys for a, _ in facts.spans[k]
    ]
    order = np.argsort(np.concatenate(made), kind="stable")
    at, weights = np.concatenate(made)[order], np.concatenate(weight)[order]
    waits = merge(facts.spans.get(READ, []))
    made_, done = in_order(at, busy, waits, weights)
    return made_, done, np.ones(len(made_), bool)


def _by_program(facts: TraceFacts, keys: list[str], busy: Spans) -> tuple[Floats, Floats, Bools]:
    """Each program's launches paired with its executions in turn (:func:`by_execution`).

    A launch that names its program (``PjitFunction(train_step)``) pairs with that program's
    (``jit_train_step``), one that names none (torch_xla's syncs) with any. A launch whose program
    the CPU client ran on the calling thread is done when it returns: it takes no execution of
    the client's threads.
    """
    inline = merge(facts.spans.get(INLINE, []))
    every = _spans_of(facts, *(k for k in facts.spans if k.startswith(EXECUTION)))
    made: list[Floats] = []
    done: list[Floats] = []
    for key in keys:
        at = np.concatenate([np.asarray(a, np.float64) for a, _ in facts.spans[key]])
        back = np.concatenate([np.asarray(b, np.float64) for _, b in facts.spans[key]])
        order = np.argsort(at, kind="stable")
        at, back = at[order], back[order]
        at = at[~(measure(inline, at, back) > 0)]
        module = _module(key[len(LAUNCH) :])
        runs = _spans_of(facts, execution_key(module)) if module else every
        made_, done_ = by_execution(at, runs, busy)
        made.append(made_)
        done.append(done_)
    made_all, done_all = np.concatenate(made), np.concatenate(done)
    return made_all, done_all, np.zeros(len(made_all), bool)


def _module(program: str) -> str:
    """The compiled module a launch names, "" where it names none.

    ``PjitFunction(train_step)`` → ``jit_train_step``.
    """
    inner = program.partition("(")[2].rpartition(")")[0].rpartition(".")[2]
    return f"jit_{inner}" if inner else ""


def _spans_of(facts: TraceFacts, *keys: str) -> Spans:
    """The spans of ``keys`` as they are, one each (not merged), sorted by start."""
    pieces = [p for key in keys for p in facts.spans.get(key, [])]
    lo = np.concatenate([np.asarray(a, np.float64) for a, _ in pieces]) if pieces else np.empty(0)
    hi = np.concatenate([np.asarray(b, np.float64) for _, b in pieces]) if pieces else np.empty(0)
    order = np.argsort(lo, kind="stable")
    return lo[order], hi[order]


def by_execution(at: Floats, runs: Spans, busy: Spans) -> tuple[Floats, Floats]:
    """Pair launches made at ``at`` with the device's executions ``runs``, in turn.

    Both are sorted, ``runs`` one span each. The device runs launches in the order they were
    made, so each execution is the oldest launch not yet run that was made before it ended. A
    launch after which the device sat idle (``busy``: :func:`device_work`) for :data:`STALE_NS`
    or more before an execution ended ran nothing the timeline shows and is left out, as is an
    execution that no launch in the capture made (launched before the trace began). Returns, for
    each launch that ran, when it was made and when its execution ended (ns).
    """
    made: list[float] = []
    ended: list[float] = []
    ends = np.sort(runs[1])
    # The device's busy time before each launch and each end: idle = time less busy time.
    made_at, busy_at = at.tolist(), covered(busy, at).tolist()
    busy_end = covered(busy, ends).tolist()
    j, n = 0, len(made_at)
    for end, worked in zip(ends.tolist(), busy_end, strict=True):
        while j < n and made_at[j] <= end:
            if (end - made_at[j]) - (worked - busy_at[j]) < STALE_NS:
                break
            j += 1
        if j < n and made_at[j] <= end:
            made.append(made_at[j])
            ended.append(end)
            j += 1
    return np.asarray(made, np.float64), np.asarray(ended, np.float64)


def _cost(facts: TraceFacts, program: str) -> float:
    """What one launch of ``program`` (``PjitFunction(evaluate)``) costs the device.

    Its compiled program's time (``jit_evaluate(16)``'s, :attr:`~.facts.TraceFacts.programs_ran`)
    over its launches; NaN where the timeline does not tell.
    """
    module = _module(program)
    if not module:
        return np.nan
    spent = sum(ns for name, ns in facts.programs_ran.items() if name.partition("(")[0] == module)
    launches = sum(len(a) for a, _ in facts.spans.get(LAUNCH + program, []))
    return spent / launches if spent > 0 and launches else np.nan


def in_order(
    at: Floats, busy: Spans, waits: Spans = NO_SPANS, weights: Floats | None = None
) -> tuple[Floats, Floats]:
    """The device's ``busy`` time shared among the launches made at ``at`` (sorted).

    Returns, for each launch that ran, when it was made and when its work ended.

    The device runs launches in order. Where the host waited for it (``waits``: a value read
    back), every launch made before the wait began was
    done when it ended; so was every launch made before the device sat idle for
    :data:`STALE_NS` or more waiting for a new one (the host compiling the next program).
    Between two such points the device's busy time is shared among the launches made in
    between, in turn, each its part: ``weights`` (what each launch's program costs, where
    the timeline tells; NaN where not, then the others' median), else equal parts (a loop's
    launches run the same program). The busy time is the device's own, so its idle moments
    are nobody's, and no launch ends before it was made. A launch made :data:`STALE_NS` or
    more before the device next worked, while it sat idle, ran nothing the timeline shows
    (an op the host ran itself, a sync with nothing to run) and is left out.
    """
    lo, hi = busy
    if not len(lo) or not len(at):
        return np.empty(0), np.empty(0)
    total = np.concatenate(([0.0], np.cumsum(hi - lo)))
    working = np.searchsorted(lo, at, side="right") - 1
    during = (working >= 0) & (at < hi[np.maximum(working, 0)])
    after = np.minimum(np.searchsorted(lo, at, side="left"), len(lo) - 1)
    waited = np.where(during, 0.0, lo[after] - at)
    live = during | ((waited >= 0) & (waited < STALE_NS))
    at = at[live]
    cost = np.ones(len(at)) if weights is None else np.asarray(weights, np.float64)[live]
    known = cost[np.isfinite(cost) & (cost > 0)]
    cost = np.where(np.isfinite(cost) & (cost > 0), cost, np.median(known) if len(known) else 1.0)
    made: list[float] = []
    ended: list[float] = []
    served = 0
    idle = np.flatnonzero(lo[1:] - hi[:-1] >= STALE_NS)
    came = np.searchsorted(at, hi[idle], side="right")
    waited_for = [
        (float(at[k]), float(hi[i]))
        for i, k in zip(idle.tolist(), came.tolist(), strict=True)
        if k < len(at) and at[k] < lo[i + 1]
    ]
    points = sorted([*zip(waits[0].tolist(), waits[1].tolist(), strict=True), *waited_for])
    # How long the device had been busy at each launch and at each point's end, and in all
    # after the last point (covered grows with time: at the later of two times, the larger).
    busy_at_launch = covered(busy, at).tolist()
    ends = np.asarray([end for _, end in points], np.float64)
    busy_at_end = [*covered(busy, ends).tolist(), float(total[-1])]
    since = 0.0
    for start, last in zip([*(s for s, _ in points), np.inf], busy_at_end, strict=True):
        upto = int(np.searchsorted(at, start, side="left"))
        if upto <= served:
            continue
        first = max(since, busy_at_launch[served])
        parts = np.cumsum(cost[served:upto])
        parts = parts / parts[-1] * max(0.0, last - first)
        for k, part in zip(range(served, upto), parts.tolist(), strict=True):
            made.append(float(at[k]))
            ended.append(max(float(at[k]), _when(busy, total, first + part)))
        served, since = upto, last
    return np.asarray(made, np.float64), np.asarray(ended, np.float64)


def _when(busy: Spans, total: Floats, amount: float) -> float:
    """The time at which the device had been busy ``amount`` ns.

    ``total``: the busy time before each span, and in all. The time is the end of its work then,
    not the start of the next.
    """
    lo, hi = busy
    at = max(0, int(np.searchsorted(total, amount, side="left")) - 1)
    if at >= len(lo):
        return float(hi[-1])
    return float(min(hi[at], lo[at] + (amount - total[at])))


class StepSpan(NamedTuple):
    """One step: its number, start and end (ns), and whether that end is an estimate.

    An estimate: the device's work it launched ended there by a share, not as seen
    (:class:`Work`).
    """

    number: int
    start: float
    end: float
    estimated: bool = False


def step_spans(mine: list[Block], fetches: Spans, work: Work, busy: Spans) -> list[StepSpan]:
    """Each step of the cell's thread (``mine``: its blocks) as its number, start and end (ns).

    The steps tile the loop, each ending where its host block or the device's work it launched
    (``work``: :func:`launched_work`) ends, whichever is later. After its host block, a step
    lasts only while the device works (``busy``: :func:`device_work`): where the device sat idle
    before it ran the step's work (a CPU client's thread not yet scheduled) while the host went
    on with the next steps, that wait is nobody's, not the step's with the next steps' host time
    in it.
    """
    marked = sorted((b for b in mine if b.kind == STEP), key=lambda b: b.start)
    launched, done, shared = work
    # Each step's start before the step ahead of it is known, then every search at once.
    fetched = _fetches_before(fetches, np.array([b.start for b in marked], np.float64))
    starts: list[float] = []
    previous: float | None = None
    for b, fetch in zip(marked, fetched, strict=True):
        if previous is not None and previous <= b.start and b.start - previous < FETCH_GAP_NS:
            starts.append(previous)
        elif previous is None or previous > b.start:
            starts.append(fetch)
        else:
            starts.append(max(previous, fetch))
        previous = b.end
    ends = [b.end for b in marked]
    # A step's launches are those its host part made (its span starts no earlier).
    bounds = np.searchsorted(launched, np.array([starts, ends], np.float64).T.ravel())
    done_at, shared_at = done.tolist(), shared.tolist()
    finished, estimated = [], []
    for lo, hi, b_end in zip(bounds[0::2].tolist(), bounds[1::2].tolist(), ends, strict=True):
        last = max(range(lo, hi), key=done_at.__getitem__) if hi > lo else -1
        finished.append(done_at[last] if last >= 0 else b_end)
        estimated.append(last >= 0 and shared_at[last] and finished[-1] > b_end)
    later = [i for i, (f, e) in enumerate(zip(finished, ends, strict=True)) if f > e]
    if later:
        edges = np.array([[ends[i] for i in later], [finished[i] for i in later]], np.float64)
        worked = coverage(busy)(edges.ravel()).reshape(2, -1)
        for i, w in zip(later, (worked[1] - worked[0]).tolist(), strict=True):
            finished[i] = ends[i] + w
    out: list[StepSpan] = []
    ended: float | None = None
    for i, b in enumerate(marked):
        start = starts[i] if ended is None else max(starts[i], ended)
        end = max(b.end, start, finished[i])
        number = b.step_num if b.step_num is not None else i
        out.append(StepSpan(number, start, end, estimated[i] and end == finished[i]))
        ended = end
    return out


def _fetches_before(fetches: Spans, at: Floats) -> list[float]:
    """For each time in ``at``, the start of the fetch that ended just before it, else that time.

    That fetch is its batch's.
    """
    starts, ends = fetches
    if not len(ends):
        return list(at.tolist())
    i = np.searchsorted(ends, at, side="right") - 1
    j = np.maximum(i, 0)
    near = (i >= 0) & (at - ends[j] < FETCH_GAP_NS)
    found: list[float] = np.where(near, starts[j], at).tolist()
    return found
