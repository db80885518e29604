"""The device's memory over the cell: in use at its start and end, the peak and where.

Two sources, the first that has figures:

* the timeline's allocator events (:attr:`~xprof_magic._analysis.timeline.facts.TraceFacts.memory`):
  every allocation and free, with the bytes in use after it. The device's allocator is the
  one not named for the host (``GPU_0_bfc``); pinned host memory (``xla_gpu_host_bfc``) is
  said apart. Only the cell's window counts: the allocators' own peak
  (``peak_bytes_in_use``) is the process's, carried over from earlier cells;
* the backend's live figures (:attr:`~xprof_magic._runs.metadata.RunMetadata.memory`),
  taken at the end of each labelled block: the peak is the highest of them, in the block at
  whose end it was seen.

The peak names its labelled block (the innermost open on the cell's thread then) and line;
each label row gets the peak within its runs; the steps' bytes in use at their ends say
whether the loop leaks (:data:`LEAK_STEPS` or more steps, most of them growing).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from xprof_magic._analysis.model.device_memory import Memory, MemoryUse
from xprof_magic._analysis.model.summary import LabelRow, StepStats
from xprof_magic._analysis.summary.blocks import line_of, main_line
from xprof_magic._analysis.summary.where import own_steps, paths_at
from xprof_magic._analysis.timeline.facts import TraceFacts
from xprof_magic._runs.metadata import RunMetadata

__all__ = ["CURVE_POINTS", "LEAK_STEPS", "memory_of", "with_peaks"]

CURVE_POINTS = 400
"""The most points of the memory curve kept for the chart (each bucket keeps its highest)."""
LEAK_STEPS = 4
"""The fewest steps whose growth can be called a leak."""
LEAK_GROWING = 0.75
"""The share of steps that must end with more memory in use than they started with."""
LEAK_LEAST = 16e6
"""The least growth (bytes, over all the steps) worth calling a leak."""


def memory_of(
    meta: RunMetadata, facts: TraceFacts | None, steps: StepStats | None, pipeline: frozenset[str]
) -> tuple[Memory, dict[tuple[str, ...], float]]:
    """The cell's memory, and the peak within each label path of the cell's thread."""
    if facts is not None and facts.memory:
        return _from_timeline(meta, facts, steps, pipeline)
    if meta.memory:
        return _from_runtime(meta, facts, steps)
    return Memory(), {}


def with_peaks(
    labels: Sequence[LabelRow], peaks: dict[tuple[str, ...], float]
) -> tuple[LabelRow, ...]:
    """The label rows of the cell's thread with their peaks."""
    return tuple(
        replace(row, peak_bytes=peaks[row.path]) if not row.thread and row.path in peaks else row
        for row in labels
    )


def _from_timeline(
    meta: RunMetadata, facts: TraceFacts, steps: StepStats | None, pipeline: frozenset[str]
) -> tuple[Memory, dict[tuple[str, ...], float]]:
    found: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for name, chunks in facts.memory.items():
        t = np.concatenate([np.asarray(a, np.float64) for a, _, _ in chunks])
        used = np.concatenate([np.asarray(b, np.float64) for _, b, _ in chunks])
        limit = np.concatenate([np.asarray(c, np.float64) for _, _, c in chunks])
        order = np.argsort(t, kind="stable")
        found[name] = (t[order], used[order], limit[order])
    host = {n: v for n, v in found.items() if "host" in n.lower()}
    device = {n: v for n, v in found.items() if n not in host}
    line = main_line(facts.blocks, pipeline)
    marks = own_steps(meta.step_rule)
    peaks: dict[tuple[str, ...], float] = {}
    device_use, host_use = None, None
    growth: tuple[float | None, int] = (None, 0)
    if device:
        name = max(device, key=lambda n: float(device[n][1].max()))
        device_use, peaks = _use(name, *device[name], facts, meta, line, marks, with_rows=True)
        growth = _growth(device[name][0], device[name][1], steps)
    if host:
        name = max(host, key=lambda n: float(host[n][1].max()))
        host_use, _ = _use(name, *host[name], facts, meta, line, marks, with_rows=False)
    return Memory(device_use, host_use, "timeline", *growth), peaks


def _use(
    name: str,
    t: np.ndarray,
    used: np.ndarray,
    limit: np.ndarray,
    facts: TraceFacts,
    meta: RunMetadata,
    line: str,
    marks: frozenset[str],
    *,
    with_rows: bool,
) -> tuple[MemoryUse | None, dict[tuple[str, ...], float]]:
    """One allocator's use within the cell's window, and (``with_rows``) each label path's peak."""
    lo, hi = facts.window if facts.window is not None else (float(t[0]), float(t[-1]))
    inside = (t >= lo) & (t <= hi)
    if not inside.any():
        return None, {}
    before = np.flatnonzero(t < lo)
    start = float(used[before[-1]]) if len(before) else float(used[inside][0])
    ti, ui = t[inside], used[inside]
    at = int(np.argmax(ui))
    path = paths_at(facts.blocks, line, marks, [float(ti[at])])[0]
    peaks: dict[tuple[str, ...], float] = {}
    if with_rows:
        for p, value in zip(
            paths_at(facts.blocks, line, marks, ti.tolist()), ui.tolist(), strict=True
        ):
            for k in range(1, len(p) + 1):
                if value > peaks.get(p[:k], -1.0):
                    peaks[p[:k]] = value
    capacity = float(limit.max()) if limit.max() > 0 else None
    use = MemoryUse(
        allocator=name,
        start_bytes=start,
        end_bytes=float(ui[-1]),
        peak_bytes=float(ui[at]),
        peak_s=float(ti[at]) / 1e9,
        peak_path=path,
        peak_line=line_of(meta.numbered_cell, path) if path else 0,
        capacity_bytes=capacity,
        curve=_curve(ti, ui),
    )
    return use, peaks


def _curve(t: np.ndarray, used: np.ndarray) -> tuple[tuple[float, float], ...]:
    """The bytes in use over time (seconds), at most :data:`CURVE_POINTS` points.

    Each bucket of events keeps its highest, so the peak stays on the curve.
    """
    if len(t) <= CURVE_POINTS:
        return tuple(zip((t / 1e9).tolist(), used.tolist(), strict=True))
    edges = np.linspace(0, len(t), CURVE_POINTS + 1).astype(np.int64)
    out = []
    for a, b in itertools.pairwise(edges.tolist()):
        if b > a:
            k = a + int(np.argmax(used[a:b]))
            out.append((float(t[k]) / 1e9, float(used[k])))
    return tuple(out)


def _growth(t: np.ndarray, used: np.ndarray, steps: StepStats | None) -> tuple[float | None, int]:
    """Bytes added each step, when the steps keep growing the memory in use: a leak.

    ``t`` is in ns on the timeline, ``used`` the bytes in use then.
    """
    if steps is None or not steps.starts_s or len(steps.starts_s) != len(steps.durations_s):
        return None, 0
    ends = np.asarray(steps.starts_s) * 1e9 + np.asarray(steps.durations_s) * 1e9
    at = np.searchsorted(t, ends, side="right") - 1
    if len(ends) < LEAK_STEPS or (at < 0).any():
        return None, 0
    level = used[at]
    rises = np.diff(level) > 0
    total = float(level[-1] - level[0])
    if rises.mean() < LEAK_GROWING or total < LEAK_LEAST:
        return None, 0
    return total / (len(level) - 1), len(level)


def _from_runtime(
    meta: RunMetadata, facts: TraceFacts | None, steps: StepStats | None
) -> tuple[Memory, dict[tuple[str, ...], float]]:
    """The backend's figures at the ends of labelled blocks.

    The peak is at the end of the block that reached it.
    """
    figures = meta.memory
    origin = facts.profile_start_ns if facts and facts.profile_start_ns else meta.start_ns or 0
    peaks: dict[tuple[str, ...], float] = {}
    for f in figures:
        for k in range(1, len(f.path) + 1):
            peaks[f.path[:k]] = max(peaks.get(f.path[:k], 0.0), f.in_use)
    top = max(figures, key=lambda f: f.in_use)
    limits = [f.limit for f in figures if f.limit > 0]
    t = np.array([f.t_ns - origin for f in figures], np.float64)
    used = np.array([f.in_use for f in figures], np.float64)
    use = MemoryUse(
        allocator="runtime",
        start_bytes=figures[0].in_use,
        end_bytes=figures[-1].in_use,
        peak_bytes=top.in_use,
        peak_s=(top.t_ns - origin) / 1e9,
        peak_path=top.path,
        peak_line=line_of(meta.numbered_cell, top.path) if top.path else 0,
        capacity_bytes=max(limits) if limits else None,
        curve=_curve(t, used),
    )
    growth = _growth(t, used, steps)
    return Memory(use, None, "runtime", *growth), peaks
