"""Where the time of each step, and of the cell, went: the step-time breakdown.

Each instant of a step is given to the first of these that holds it (:data:`PRIORITY`):

- ``input``: the cell's loop waits in ``next()`` for its next item (the rewriter times each
  one as a label ``next(…)``, :func:`xprof_magic._labels.inputs`), or a data loader's own
  traces on the cell's thread;
- ``compile``: a compilation on the Python thread (the vocabulary's compile events);
- ``device``: the device runs an execution. On a TPU, a chip's ``XLA Modules``; on the CPU,
  the top-level events of the XLA CPU client's threads, launch to completion (their XLA op
  events cover only part of each execution);
- ``collective``: all-reduce and the like (none is measured apart on the CPU);
- ``transfer``: a host-device copy, on the Python thread or the CPU client's threads;
- ``sync``: the Python thread waits for the device (a barrier, ``Wait for …``) while the
  device runs nothing of it;
- ``host``: the rest of the step: Python and the framework's graph building and dispatch;
- ``idle``: in the cell's breakdown, the time outside every top-level block of the cell.

Steps tile the loop: a step runs from the previous one's end (the first from its own start,
or from the fetch of its batch just before it), so that a fetch made between two
iterations belongs to the step it feeds. The last step runs until the device has finished
the work the loop queued: a host that runs ahead of the device leaves it busy after the loop.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from xprof_magic._analysis.facts import LABEL, STEP, Block, TraceFacts
from xprof_magic._analysis.model import Breakdown, StepBreakdown

__all__ = [
    "BREAKDOWN_CATEGORIES",
    "INPUT_PREFIX",
    "PRIORITY",
    "Spans",
    "breakdown",
    "busy_ns",
    "from_metrics",
    "merge",
]

BREAKDOWN_CATEGORIES = (
    "input",
    "host",
    "compile",
    "transfer",
    "sync",
    "device",
    "collective",
    "idle",
)
PRIORITY = ("input", "compile", "device", "collective", "transfer", "sync")
INPUT_PREFIX = "next("
MAX_STEPS = 10_000
_FETCH_GAP_NS = 5e6

Spans = tuple[list[float], list[float]]
"""Disjoint intervals, sorted: their starts and their ends."""


def merge(pieces: Iterable[tuple[Sequence[float], Sequence[float]]]) -> Spans:
    """The union of intervals given in pieces, as sorted disjoint intervals."""
    pairs = sorted((a, b) for lo, hi in pieces for a, b in zip(lo, hi, strict=True) if b > a)
    starts: list[float] = []
    ends: list[float] = []
    for a, b in pairs:
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def _clip(spans: Spans, lo: float, hi: float) -> list[tuple[float, float]]:
    starts, ends = spans
    i = max(0, bisect.bisect_right(ends, lo))
    out = []
    while i < len(starts) and starts[i] < hi:
        a, b = max(starts[i], lo), min(ends[i], hi)
        if b > a:
            out.append((a, b))
        i += 1
    return out


def _measure(parts: list[list[tuple[float, float]]]) -> float:
    pairs = sorted(p for part in parts for p in part)
    total, end = 0.0, float("-inf")
    for a, b in pairs:
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def busy_ns(facts: TraceFacts) -> float | None:
    """How long the device ran executions in the window (None: no execution seen)."""
    pieces = facts.spans.get("device")
    if not pieces:
        return None
    lo, hi = facts.window or (float("-inf"), float("inf"))
    return _measure([_clip(merge(pieces), lo, hi)])


def _split(
    cover: dict[str, Spans], lo: float, hi: float, busy: list[tuple[float, float]] | None
) -> tuple[float, ...]:
    """Seconds per category of :data:`BREAKDOWN_CATEGORIES` in ``[lo, hi)``; ``busy`` is
    where the cell's thread ran (the rest is idle), None: all of it."""
    seconds = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    taken: list[list[tuple[float, float]]] = []
    done = 0.0
    for category in PRIORITY:
        spans = cover.get(category)
        if spans is None:
            continue
        taken.append(_clip(spans, lo, hi))
        now = _measure(taken)
        seconds[category] = (now - done) / 1e9
        done = now
    span = hi - lo
    if busy is None:
        seconds["host"] = max(0.0, span - done) / 1e9
    else:
        with_host = _measure([*taken, busy])
        seconds["host"] = max(0.0, with_host - done) / 1e9
        seconds["idle"] = max(0.0, span - with_host) / 1e9
    return tuple(round(seconds[c], 9) for c in BREAKDOWN_CATEGORIES)


def breakdown(
    facts: TraceFacts, main_line: str, input_names: frozenset[str], untimed_copy_s: float = 0.0
) -> Breakdown:
    """The breakdown of the cell (its window) and of each step on ``main_line``, the cell's
    thread; ``input_names`` are the data loader's own trace names, counted as input.

    ``untimed_copy_s``: host time spent copying to the device that the timeline shows no
    event for (the backend's metric): it moves from host to transfer, spread over the steps
    by their host time."""
    cover = {key: merge(pieces) for key, pieces in facts.spans.items()}
    mine = [b for b in facts.blocks if b.line == main_line]
    inputs = [
        (b.start, b.end)
        for b in mine
        if (b.kind == LABEL and b.name.startswith(INPUT_PREFIX)) or b.name in input_names
    ]
    cover["input"] = merge([([a for a, _ in inputs], [b for _, b in inputs])])
    top = [(b.start, b.end) for b in mine if b.parent < 0]
    if facts.window is not None:
        lo, hi = facts.window
    elif top:
        lo, hi = min(a for a, _ in top), max(b for _, b in top)
    else:
        return Breakdown(categories=BREAKDOWN_CATEGORIES)
    busy = merge([([a for a, _ in top], [b for _, b in top])])
    cell = _split(cover, lo, hi, _clip(busy, lo, hi))
    steps = _step_spans(mine, cover["input"])
    device = cover.get("device")
    if steps and device and device[1] and device[1][-1] > steps[-1][2]:
        # The host ran ahead: the device finishes the work queued by the loop after it.
        number, start, _ = steps[-1]
        steps[-1] = (number, start, device[1][-1])
    split = [_split(cover, a, b, None) for _, a, b in steps]
    if untimed_copy_s > 0:
        cell = _moved(cell, untimed_copy_s, cell[_HOST])
        host_s = sum(parts[_HOST] for parts in split)
        split = [_moved(parts, untimed_copy_s, host_s) for parts in split]
    rows = tuple(
        StepBreakdown(number, round((b - a) / 1e9, 9), parts)
        for (number, a, b), parts in zip(steps[:MAX_STEPS], split, strict=False)
    )
    return Breakdown(
        categories=BREAKDOWN_CATEGORIES,
        cell=cell,
        cell_s=round((hi - lo) / 1e9, 9),
        steps=rows,
        step_count=len(steps),
    )


def from_metrics(wall_s: float, measured: dict[str, float]) -> Breakdown:
    """The cell's breakdown before its timeline is read: ``measured`` seconds of input (the
    ``next()`` labels' timers), compile, device and transfer (the backend's metrics), each
    capped, in :data:`PRIORITY` order, by what the others left of ``wall_s``; the rest is
    host. No steps: the metrics are the cell's totals."""
    left = wall_s
    seconds = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    for category in PRIORITY:
        take = min(max(0.0, measured.get(category, 0.0)), left)
        seconds[category] = take
        left -= take
    seconds["host"] = left
    return Breakdown(
        categories=BREAKDOWN_CATEGORIES,
        cell=tuple(round(seconds[c], 9) for c in BREAKDOWN_CATEGORIES),
        cell_s=round(wall_s, 9),
    )


_HOST = BREAKDOWN_CATEGORIES.index("host")
_TRANSFER = BREAKDOWN_CATEGORIES.index("transfer")


def _moved(parts: tuple[float, ...], copy_s: float, host_s: float) -> tuple[float, ...]:
    """``parts`` with its share (by host time, of ``host_s``) of ``copy_s`` moved from host to
    transfer, never more than its host time."""
    if host_s <= 0:
        return parts
    move = min(parts[_HOST], copy_s * parts[_HOST] / host_s)
    out = list(parts)
    out[_HOST] = round(out[_HOST] - move, 9)
    out[_TRANSFER] = round(out[_TRANSFER] + move, 9)
    return tuple(out)


def _step_spans(blocks: list[Block], inputs: Spans) -> list[tuple[int, float, float]]:
    """Each step's number and span, tiling the loop (see the module's docstring)."""
    marked = sorted((b for b in blocks if b.kind == STEP), key=lambda b: b.start)
    out: list[tuple[int, float, float]] = []
    previous: float | None = None
    for i, b in enumerate(marked):
        start = b.start
        if previous is not None and previous <= b.start and b.start - previous < _FETCH_GAP_NS:
            start = previous
        elif previous is None or previous > b.start:
            start = _fetch_before(inputs, b.start)
        elif previous is not None:
            start = max(previous, _fetch_before(inputs, b.start))
        out.append((b.step_num if b.step_num is not None else i, start, b.end))
        previous = b.end
    return out


def _fetch_before(inputs: Spans, at: float) -> float:
    """The start of the fetch that ended just before ``at`` (its batch's), else ``at``."""
    starts, ends = inputs
    i = bisect.bisect_right(ends, at) - 1
    if i >= 0 and at - ends[i] < _FETCH_GAP_NS:
        return starts[i]
    return at
