"""What a fix would gain: a step's time without one category's, from the breakdown.

The model, per step (the steps the shares are of; the cell's busy time without steps):
removing a category's time leaves the rest of the step, ``total - removed``, but never less
than the device's own busy time in that step (:attr:`StepBreakdown.busy_s`): on a lazy or
asynchronous backend the host's work overlaps the device's, and a step cannot end before the
device has done its work. A wait for the next batch that overlapped the device (a loader
whose ``next()`` ends the previous step) so gains only the part the device was idle. The
estimate is the mean of those steps against the mean step now (:class:`Gain`).

A graph that grows because the loop never syncs (:data:`GROWING`) also makes each step run
the steps before it again, which the fix ends too: every step would then cost what the least
of them costs without its compile.

A wait for the next batch whose fix spreads the batches' making over other cores (DataLoader
workers) is bounded by the machine's cores too (``cores``): that work, as much of it as ran
on a CPU (``on_cpu``), and the step's own host work still share them, and the work has the
cores but the step's own to go to, so that on a 2-core machine workers gain far less than the
wait (:data:`SPREAD`).

``device``, the healthy case, has no cost to remove: its estimate is the step reduced to the
device's own time, the most that any fix outside the model would gain.

:func:`step_time` is a run's mean step as the estimate measures it, so that a comparison of
the run before a fix with the run after it (:mod:`.compare`) sets the measured speed-up
beside the predicted one.
"""

from __future__ import annotations

from xprof_magic._analysis.model.categories import FEW_CORES_CAUSES
from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, Gain

__all__ = ["GROWING", "SPREAD", "gain_of", "step_time"]

GROWING = "growing graph"
"""The compile cause whose fix (a sync per step) also stops each step from running the graph
of every step before it again: each step would cost what the least of them costs without
its compile."""


SPREAD = "input"
"""The category whose fix spreads its work over the machine's other cores (a loader's
workers), when the verdict's cause is the wait itself (not batches made in the step)."""


def gain_of(
    parts: Breakdown,
    category: str,
    cause: str = "",
    part: float = 1.0,
    cores: int = 0,
    on_cpu: float = 1.0,
) -> Gain | None:
    """The mean step of ``parts`` now, and without ``category``'s seconds or ``part`` of them.

    ``parts`` is a diagnosis's basis; ``cause`` is the verdict's (:data:`GROWING`); ``part`` is the
    part of the seconds a fix removes (the host's own Python, of its time). ``cores`` (0: not
    known) and ``on_cpu`` bound a :data:`SPREAD` wait's fix, which moves its work to other cores
    (the module's text); for :data:`FEW_CORES_CAUSES` the gain carries ``cores``. None when it
    has no such category or no time.
    """
    if category not in parts.categories or "device" not in parts.categories:
        return None
    at, device = parts.categories.index(category), parts.categories.index("device")
    host = parts.categories.index("host") if "host" in parts.categories else -1
    if parts.steps:
        rows = [
            (s.total_s, s.seconds[at] * part, s.seconds[device], s.busy_s, _at(s.seconds, host))
            for s in parts.steps
        ]
    elif parts.cell:
        cell = parts.cell
        rows = [
            (parts.total_s(False), cell[at] * part, cell[device], parts.busy_s, _at(cell, host))
        ]
    else:
        return None
    total = sum(row[0] for row in rows)
    if total <= 0:
        return None
    lefts = [_left(category, *row[:4]) for row in rows]
    bound = 0
    if category == SPREAD and cause == "" and cores > 0:
        spread = [
            max(left, (r[1] * on_cpu + r[4]) / cores, r[1] * on_cpu / max(1, cores - 1))
            for left, r in zip(lefts, rows, strict=True)
        ]
        if sum(spread) > sum(lefts) * 1.05:
            lefts, bound = spread, cores
    if cause in FEW_CORES_CAUSES:
        bound = cores
    left = min(lefts) * len(lefts) if cause == GROWING else sum(lefts)
    return Gain(category, round(total / len(rows), 9), round(left / len(rows), 9), bound)


def _at(seconds: tuple[float, ...], at: int) -> float:
    return seconds[at] if at >= 0 else 0.0


def _left(category: str, total: float, removed: float, device: float, busy: float) -> float:
    """One step's time without ``removed``, bounded below by the device's busy time."""
    floor = max(busy, device)
    if category == "device":
        return min(total, floor)
    return min(total, max(total - removed, floor))


def step_time(d: Diagnosis) -> float | None:
    """A diagnosis's basis's mean step, as :func:`gain_of` measures it; None without a breakdown.

    The basis is its steps after the warm-up, or the cell's busy time without steps.
    """
    parts = d.basis()
    if not parts.categories:
        return None
    if parts.steps:
        return sum(s.total_s for s in parts.steps) / len(parts.steps)
    total = parts.total_s(False)
    return total if total > 0 else None
