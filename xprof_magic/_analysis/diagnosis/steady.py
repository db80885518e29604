"""What the verdict is about: the steady steps, or the cell; and what it names apart.

A loop's verdict describes the steps it runs again and again, since those are what a fix
speeds up. Three kinds of time are not such steps, and each is named apart rather than
mixed into the shares:

- the warm-up: the first steps that compiled (:func:`~.verdict.diagnose` leaves them out);
- a step unlike the others (:func:`unlike`): at least :data:`APART_RATIO` times the median
  step, when such steps are at most a quarter of the steps (a first execution that waits on
  its freshly compiled program, a checkpoint every N steps): named with what held it;
- the cell's statements outside its steps (:func:`outside`): a compile or an evaluation
  after the loop is the cell's, named at its own line. When the steps hold less than
  :data:`STEPS_SHARE` of the cell's busy time, the verdict is about the cell instead
  (:func:`scope`), and the loop is the statement named apart.

And one pattern inside the steps: a read-back each step (:func:`read_back`), which keeps the
host from launching the next step while the device works.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from xprof_magic._analysis.diagnosis.attribution import StepActivity
from xprof_magic._analysis.model.diagnosis import (
    APART_MOST,
    APART_RATIO,
    OUTSIDE_SHARE,
    STEPS_SHARE,
    Aside,
    Breakdown,
    ReadBack,
)
from xprof_magic._analysis.model.summary import Summary
from xprof_magic._analysis.summary.blocks import is_loop, line_of
from xprof_magic._analysis.summary.where import call_line

__all__ = ["READ_CALLS", "outside", "read_back", "scope", "unlike"]

READ_CALLS = ("float", "item", "asarray", "device_get", "tolist", "int", "bool", "print")
"""The calls that read a device value back on the host, in the order a loop's body is
searched for the one to name."""
READ_GAIN = 0.10
"""The least part of the steps' time a read-back each step must cost to be named."""


def unlike(parts: Breakdown, warm_up: int, compiling: Sequence[int]) -> tuple[Aside, ...]:
    """The steps after the warm-up that take :data:`APART_RATIO` times their median or more.

    Only when they are at most a quarter of those steps (at least 4 of them), and, where there are
    two or more, hold less than :data:`APART_MOST` of their time: such steps are the loop's cost
    come round again (a loader that hands its batches over in bursts, a checkpoint every N
    steps), not exceptions to it. One slow step stays apart however long (the first run of a
    fresh program). Each with the category that held most of it. Steps that compiled
    (``compiling``: their positions) are neither measured nor left out: a compile is the
    verdict's to name.
    """
    skip = set(compiling)
    steps = [(i, s) for i, s in enumerate(parts.steps) if i >= warm_up and i not in skip]
    if len(steps) < 4:
        return ()
    median = statistics.median(s.total_s for _, s in steps)
    if median <= 0:
        return ()
    slow = [i for i, s in steps if s.total_s >= APART_RATIO * median]
    if not slow or len(slow) * 4 > len(steps):
        return ()
    held = sum(parts.steps[i].total_s for i in slow)
    if len(slow) > 1 and held >= APART_MOST * sum(s.total_s for _, s in steps):
        return ()
    out = []
    for i in slow:
        step = parts.steps[i]
        at = max(range(len(step.seconds)), key=lambda k: step.seconds[k])
        out.append(Aside(step.total_s, parts.categories[at], step.seconds[at], step=i))
    return tuple(out)


def scope(parts: Breakdown) -> str:
    """What the verdict is about: ``steps``, or ``cell`` when steps hold little of its busy time.

    ``steps`` when the steps hold at least :data:`STEPS_SHARE` of the cell's busy time (or there are
    none: the verdict is the cell's anyway), else ``cell``.
    """
    busy = parts.total_s(of_steps=False)
    if not parts.steps or busy <= 0:
        return "steps"
    steps = sum(s.total_s for s in parts.steps)
    return "steps" if steps >= STEPS_SHARE * busy else "cell"


def outside(s: Summary, parts: Breakdown, in_scope: str) -> tuple[Aside, ...]:
    """What the verdict leaves out of the cell, each with its line.

    For a verdict about the steps, the statements outside them holding :data:`OUTSIDE_SHARE` of the
    cell or more; for one about the cell, the loop (its steps' time), when they hold that much.
    """
    total = parts.total_s(of_steps=False)
    if total <= 0:
        return ()
    if in_scope == "cell":
        steps = sum(st.total_s for st in parts.steps)
        loops = [r for r in s.labels if not r.thread and len(r.path) == 1 and is_loop(r.path[0])]
        loop = max(loops, key=lambda r: r.total_s, default=None)
        if loop is None or steps < OUTSIDE_SHARE * total:
            return ()
        held = {c: sum(st.seconds[k] for st in parts.steps) for k, c in enumerate(parts.categories)}
        category = max(held, key=lambda c: held[c])
        return (
            Aside(steps, category, held[category], path=loop.path, line=line_of(s.cell, loop.path)),
        )
    return tuple(
        Aside(a.seconds, a.category, a.held_s, path=a.path, line=line_of(s.cell, a.path))
        for a in parts.outside
        if a.seconds >= OUTSIDE_SHARE * total
    )


def read_back(
    s: Summary, parts: Breakdown, steady: Sequence[int], activity: StepActivity | None
) -> ReadBack | None:
    """The steady steps' read-backs, when they cost at least :data:`READ_GAIN` of those steps' time.

    Without them the host would launch the next step while the device runs this one, so each reading
    step would take the longer of the two, not their sum.
    """
    if activity is None or len(activity.reads) != len(parts.steps):
        return None
    reading = [i for i in steady if activity.reads[i] > 0]
    if len(reading) < 3:
        return None
    now = sum(parts.steps[i].total_s for i in reading)
    left = 0.0
    for i in reading:
        step = parts.steps[i]
        left += max(step.busy_s, step.total_s - step.busy_s)
    everything = sum(parts.steps[i].total_s for i in steady)
    if everything <= 0 or now - left < READ_GAIN * everything:
        return None
    path = activity.read_path
    line = line_of(s.cell, path) if path else 0
    number, text = 0, ""
    for name in READ_CALLS:
        number, text = call_line(s.cell, line, name) if line else (0, "")
        if number:
            break
    return ReadBack(
        steps=len(reading),
        of=len(steady),
        reads=sum(activity.reads[i] for i in reading),
        path=path,
        line=number or line,
        call=text,
        step_s=round(now / len(reading), 9),
        without_s=round(left / len(reading), 9),
        shared=s.device is not None and s.device.on_cpu,
    )
