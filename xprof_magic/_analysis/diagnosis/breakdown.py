"""Where the time of each step, and of the cell, went: the step-time breakdown.

Each instant of a step is given to the first of these that holds it (:data:`PRIORITY`; the
chip's own waits, :data:`~xprof_magic._analysis.timeline.facts.DEVICE_SIDE`, come before
``device``):

- ``input``: the cell's loop waits in ``next()`` for its next item to be produced (the
  rewriter times each one as a label ``next(…)``, :func:`xprof_magic._cell.labels.inputs`), or
  a data loader's own traces on the cell's thread; on a TPU also the chip's ``infeed`` ops.
  The part of a ``next()`` that the device is busy, or that the runtime spends in its waits
  and step ends on the Python threads (:func:`waiting_for_data`), is not input: a loader
  that syncs for the step it hands on (MpDeviceLoader) waits there for the device;
- ``compile``: a compilation on the Python thread (the vocabulary's compile events);
- ``device``: the device computes. On a TPU, a chip's ``XLA Modules`` less its waits below
  (the first chip's timeline; every chip runs the same program); on the CPU, the top-level
  events of the XLA CPU client's threads, launch to completion (their XLA op events cover
  only part of each execution);
- ``collective``: on a TPU, the chip's XLA ops whose ``hlo_category`` is a collective
  (all-reduce, all-gather, reduce-scatter, all-to-all, collective-permute, send/recv, in any
  ``-start``/``-done``/fusion form); none is measured apart on the CPU;
- ``transfer``: a host-device copy, on the Python thread or the CPU client's threads; on a
  TPU also the chip's ``outfeed`` and host send/recv ops and its host-offload copies
  (``copy-start``/``copy-done`` to or from host memory, ``S(5)`` in their layout), which
  :attr:`Breakdown.offload_s` counts apart;
- ``sync``: the Python thread waits for the device (a barrier, ``Wait for …``) while the
  device runs nothing of it;
- ``host``: the rest of the step: Python and the framework's graph building and dispatch;
- ``idle``: in the cell's breakdown, the time outside every top-level block of the cell.

:attr:`Breakdown.on_device` keeps, per category, the cell's seconds that the chip's own ops
held (the waits above), so the verdict tells a chip waiting on its copies from a host
copying. A capture without them (the CPU) leaves it empty and splits as before.

Steps tile the loop, each ending where its host block or the device's work it launched
ends, whichever is later (:mod:`~xprof_magic._analysis.summary.step_spans`): a host that runs
ahead of the device leaves the device busy with the steps' work after the loop, and that
work is theirs; what the cell launches after the loop is not. Each step, and the cell, also
keep the device's busy time whichever category holds it
(:attr:`StepBreakdown.busy_s`): the least a step could take, which the gain estimate needs.
"""

from __future__ import annotations

import bisect

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.model.categories import BREAKDOWN
from xprof_magic._analysis.model.diagnosis import Aside, Breakdown, StepBreakdown
from xprof_magic._analysis.summary.blocks import main_line
from xprof_magic._analysis.summary.step_spans import (
    StepSpan,
    fetch_spans,
    line_step_spans,
)
from xprof_magic._analysis.summary.where import INPUT_PREFIX
from xprof_magic._analysis.timeline.facts import (
    DEVICE_SIDE,
    LAUNCH,
    OFFLOAD,
    STEP,
    STEP_END,
    Block,
    TraceFacts,
)
from xprof_magic._analysis.timeline.intervals import NO_SPANS, Spans, measure, merge, subtract
from xprof_magic._backends import Vocabulary
from xprof_magic._runs.metadata import RunMetadata

__all__ = [
    "BREAKDOWN_CATEGORIES",
    "INPUT_PREFIX",
    "PRIORITY",
    "breakdown",
    "from_metrics",
    "of_metadata",
    "of_trace",
    "waiting_for_data",
]

BREAKDOWN_CATEGORIES = BREAKDOWN
"""The breakdown's columns (:data:`~xprof_magic._analysis.model.categories.BREAKDOWN`)."""
PRIORITY = ("input", "compile", *DEVICE_SIDE, "device", "transfer", "sync")
"""The span keys (:attr:`TraceFacts.spans`) in the order they take an instant."""
_COLUMN = {key: BREAKDOWN_CATEGORIES.index(DEVICE_SIDE.get(key, key)) for key in PRIORITY}
MAX_STEPS = 10_000


def _split(
    cover: dict[str, Spans], lo: NDArray[np.float64], hi: NDArray[np.float64], busy: Spans | None
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Seconds per category in each interval, and the chip's own waits alone.

    First, seconds per category of :data:`BREAKDOWN_CATEGORIES` (columns) in each interval
    ``[lo[k], hi[k])`` (rows); ``busy`` is where the cell's thread ran (the rest is idle), None: all
    of it. Second, the same of the chip's own waits alone (:data:`DEVICE_SIDE`), with the
    host-offload copies' seconds in a last column.
    """
    out = np.zeros((len(lo), len(BREAKDOWN_CATEGORIES)))
    side = np.zeros((len(lo), len(BREAKDOWN_CATEGORIES) + 1))
    taken = NO_SPANS
    done = np.zeros(len(lo))
    for key in PRIORITY:
        spans = cover.get(key)
        if spans is None or not len(spans[0]):
            continue
        taken = merge([taken, spans])
        now = measure(taken, lo, hi)
        out[:, _COLUMN[key]] += now - done
        if key in DEVICE_SIDE:
            side[:, _COLUMN[key]] += now - done
            if key == OFFLOAD:
                side[:, -1] += now - done
        done = now
    length = hi - lo
    if busy is None:
        out[:, _HOST] = np.maximum(0.0, length - done)
    else:
        with_host = measure(merge([taken, busy]), lo, hi)
        out[:, _HOST] = np.maximum(0.0, with_host - done)
        out[:, _IDLE] = np.maximum(0.0, length - with_host)
    return np.round(np.maximum(out, 0.0) / 1e9, 9), np.round(np.maximum(side, 0.0) / 1e9, 9)


def breakdown(
    facts: TraceFacts, main_line: str, input_names: frozenset[str], untimed_copy_s: float = 0.0
) -> Breakdown:
    """The breakdown of the cell (its window) and of each step on ``main_line``, the cell's thread.

    Args:
        input_names: the data loader's own trace names, counted as input.
        untimed_copy_s: host time spent copying to the device that the timeline shows no event for
            (the backend's metric): it moves from host to transfer, spread over the steps by their
            host time.
    """
    cover = {
        key: merge(pieces) for key, pieces in facts.spans.items() if not key.startswith(LAUNCH)
    }
    mine = [b for b in facts.blocks if b.line == main_line]
    fetches = fetch_spans(mine, input_names)
    cover["input"] = waiting_for_data(fetches, cover)
    top = [(b.start, b.end) for b in mine if b.parent < 0]
    if facts.window is not None:
        lo, hi = facts.window
    elif top:
        lo, hi = min(a for a, _ in top), max(b for _, b in top)
    else:
        return Breakdown(categories=BREAKDOWN_CATEGORIES)
    busy = merge([([a for a, _ in top], [b for _, b in top])])
    whole, side = _split(cover, np.array([lo]), np.array([hi]), busy)
    cell = _as_tuple(whole[0])
    waits = any(cover.get(key) is not None and len(cover[key][0]) for key in DEVICE_SIDE)
    steps = line_step_spans(facts, main_line, input_names)
    outside = _outside(cover, mine, steps, input_names, hi - lo)
    starts, ends = np.array([s.start for s in steps]), np.array([s.end for s in steps])
    table, _ = _split(_in_the_loop(cover, mine, starts, ends), starts, ends, None)
    split = [_as_tuple(row) for row in table]
    device_busy = _device_busy(cover)
    step_busy = measure(device_busy, starts, ends) / 1e9 if steps else np.zeros(0)
    if untimed_copy_s > 0:
        cell = _moved(cell, untimed_copy_s, cell[_HOST])
        host_s = sum(parts[_HOST] for parts in split)
        split = [_moved(parts, untimed_copy_s, host_s) for parts in split]
    rows = tuple(
        StepBreakdown(number, round((b - a) / 1e9, 9), parts, round(float(busy), 9))
        for (number, a, b, _), parts, busy in zip(steps[:MAX_STEPS], split, step_busy, strict=False)
    )
    return Breakdown(
        categories=BREAKDOWN_CATEGORIES,
        cell=cell,
        cell_s=round((hi - lo) / 1e9, 9),
        steps=rows,
        step_count=len(steps),
        on_device=_as_tuple(side[0, :-1]) if waits else (),
        offload_s=float(side[0, -1]),
        busy_s=round(float(measure(device_busy, np.array([lo]), np.array([hi]))[0]) / 1e9, 9),
        outside=outside,
    )


HOST_SIDE = ("input", "compile", "sync")
"""The span keys of what the cell's thread itself does: the steps hold them only while the
loop runs, not while the device finishes the steps' work after the loop moved on."""


def _in_the_loop(
    cover: dict[str, Spans],
    mine: list[Block],
    starts: NDArray[np.float64],
    ends: NDArray[np.float64],
) -> dict[str, Spans]:
    """``cover`` with the cell thread's own spans (:data:`HOST_SIDE`) kept only while the loop ran.

    The loop ran from the first step's start to the last step's block's end. After that the steps
    last only for the device's work they launched; what the thread does meanwhile (a statement after
    the loop compiling) is not theirs.
    """
    blocks = [b for b in mine if b.kind == STEP]
    if not blocks or not len(starts):
        return cover
    loop = (np.array([starts[0]]), np.array([max(b.end for b in blocks)]))
    kept = dict(cover)
    for key in HOST_SIDE:
        if key in cover:
            kept[key] = subtract(cover[key], subtract(cover[key], loop))
    return kept


OUTSIDE_KEPT = 0.05
"""The share of the cell a statement's time outside the steps needs to be kept."""


def _outside(
    cover: dict[str, Spans],
    mine: list[Block],
    steps: list[StepSpan],
    aside: frozenset[str],
    cell_ns: float,
) -> tuple[Aside, ...]:
    """The cell's statements by their time outside the steps they hold, split by category.

    Statements are the outermost blocks of its thread; those holding at least :data:`OUTSIDE_KEPT`
    of the cell are kept. A statement's time is its block's, as the labels table has it, less only
    the steps it runs itself (a loop's): the device finishing the steps before it, while it runs, is
    not taken from it (one block, one time).
    """
    marked = sorted(b.start for b in mine if b.kind == STEP)[: len(steps)]
    los: list[NDArray[np.float64]] = []
    his: list[NDArray[np.float64]] = []
    names: list[str] = []
    for b in mine:
        if b.parent >= 0 or b.kind == STEP or b.name in aside:
            continue
        # The steps it holds: those marked inside it (a search: a capture of another thread's
        # loop may hold tens of thousands of top-level blocks).
        own = steps[bisect.bisect_left(marked, b.start) : bisect.bisect_left(marked, b.end)]
        lo, hi = np.array([b.start], np.float64), np.array([b.end], np.float64)
        if own:
            lo, hi = subtract((lo, hi), merge([([s.start for s in own], [s.end for s in own])]))
        if len(lo):
            los.append(lo)
            his.append(hi)
            names += [b.name] * len(lo)
    if not los:
        return ()
    # Every statement's time split at once: the cover merged once, not once a statement.
    rows, _ = _split(cover, np.concatenate(los), np.concatenate(his), None)
    found: dict[str, NDArray[np.float64]] = {}
    for name, row in zip(names, rows, strict=True):
        found[name] = found[name] + row if name in found else row.copy()
    out = []
    for name, row in found.items():
        total = float(row.sum())
        if cell_ns <= 0 or total * 1e9 < OUTSIDE_KEPT * cell_ns:
            continue
        at = int(np.argmax(row))
        out.append(Aside(round(total, 9), BREAKDOWN_CATEGORIES[at], float(row[at]), path=(name,)))
    return tuple(sorted(out, key=lambda a: -a.seconds))


NOT_DATA = ("sync", STEP_END, "device")
"""The span keys whose time inside a ``next()`` is not waiting for data: the runtime's waits
for the device (its barriers, ``Wait for …``, the vocabulary's ``waits``) and step ends
(the vocabulary's ``step_ends``: a sync, whole) on the Python threads, and the device's
busy time."""


def waiting_for_data(fetches: Spans, cover: dict[str, Spans]) -> Spans:
    """The part of the loop's fetches (``next()``) spent waiting for data to be produced.

    Their time less that of :data:`NOT_DATA` in ``cover`` (the merged span keys). A ``next()`` that
    waits on a barrier or for the device (MpDeviceLoader's step-end sync, an iterator reading device
    arrays) is sync or device time; one that waits on a loader's empty queue, or runs the loader's
    Python, is input.
    """
    for key in NOT_DATA:
        if key in cover and len(fetches[0]):
            fetches = subtract(fetches, cover[key])
    return fetches


def _device_busy(cover: dict[str, Spans]) -> Spans:
    """When the device was busy: its executions or modules and the chip's own waits."""
    return merge(cover[key] for key in ("device", *DEVICE_SIDE) if key in cover)


def from_metrics(wall_s: float, measured: dict[str, float]) -> Breakdown:
    """The cell's breakdown before its timeline is read, from the backend's measured seconds.

    ``measured`` seconds of device, input (the ``next()`` labels' timers), compile and transfer (the
    backend's metrics), each capped, in that order, by what the others left of ``wall_s``; the rest
    is host. Device first: a ``next()`` may wait for the device (:func:`waiting_for_data`), and
    without the timeline the executions' time is all that says so. No steps: the metrics are the
    cell's totals.
    """
    left = wall_s
    seconds = dict.fromkeys(BREAKDOWN_CATEGORIES, 0.0)
    for category in ("device", "input", "compile", "transfer"):
        take = min(max(0.0, measured.get(category, 0.0)), left)
        seconds[category] = take
        left -= take
    seconds["host"] = left
    return Breakdown(
        categories=BREAKDOWN_CATEGORIES,
        cell=tuple(round(seconds[c], 9) for c in BREAKDOWN_CATEGORIES),
        cell_s=round(wall_s, 9),
    )


def of_trace(facts: TraceFacts, meta: RunMetadata, words: Vocabulary) -> Breakdown:
    """The cell thread's breakdown (:func:`breakdown`), with untimed host copies moved to transfer.

    The untimed copies are the backend's ``host_copy_ns`` metric.
    """
    pipeline = words.timeline.input_pipeline
    name = words.metrics.host_copy_ns
    copy = meta.metrics.metrics.get(name) if name else None
    return breakdown(
        facts,
        main_line(facts.blocks, pipeline),
        pipeline,
        untimed_copy_s=copy.total_s / 1e9 if copy else 0.0,
    )


def of_metadata(meta: RunMetadata, words: Vocabulary) -> Breakdown:
    """The breakdown from the metadata alone, while the timeline waits (a pending summary).

    It uses the ``next()`` timers and the backend's compile, execute and transfer metrics.
    """
    timers, names = meta.metrics.metrics, words.metrics

    def total(name: str) -> float:
        entry = timers.get(name) if name else None
        return entry.total_s if entry else 0.0

    copy = total(names.host_copy_ns) / 1e9
    measured = {
        "input": sum(
            label.total_s for label in meta.labels if label.path[-1].startswith(INPUT_PREFIX)
        ),
        "compile": total(names.compile_time),
        "device": total(names.execute_time),
        "transfer": total(names.to_device_time) + total(names.from_device_time) + copy,
    }
    return from_metrics(meta.wall_s or 0.0, measured)


_HOST = BREAKDOWN_CATEGORIES.index("host")
_TRANSFER = BREAKDOWN_CATEGORIES.index("transfer")
_IDLE = BREAKDOWN_CATEGORIES.index("idle")


def _as_tuple(row: NDArray[np.float64]) -> tuple[float, ...]:
    return tuple(float(v) for v in row.tolist())


def _moved(parts: tuple[float, ...], copy_s: float, host_s: float) -> tuple[float, ...]:
    """``parts`` with its share of ``copy_s`` moved from host to transfer.

    Its share is by host time, of ``host_s``; never more than its host time moves.
    """
    if host_s <= 0:
        return parts
    move = min(parts[_HOST], copy_s * parts[_HOST] / host_s)
    out = list(parts)
    out[_HOST] = round(out[_HOST] - move, 9)
    out[_TRANSFER] = round(out[_TRANSFER] + move, 9)
    return tuple(out)
