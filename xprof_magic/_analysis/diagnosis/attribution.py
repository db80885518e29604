"""Whose the device's time is: the statement that launched the work, not the one that waited.

With asynchronous dispatch (a jitted JAX call, torch_xla's executions after a sync) the host
launches a program and runs on; the device computes it later, while the host is in another
statement, often one that only waits for the result (``jax.block_until_ready``,
``float(loss)``, ``.item()``). The host time of that wait says nothing of who made the work.
The timeline does: each program's launch is an event on the Python thread (the vocabulary's
``launches``: JAX's ``PjitFunction(name)``, torch_xla's sync), and each stretch of device time
(:data:`~xprof_magic._analysis.timeline.facts.TraceFacts.spans`' ``device``) goes to the
launch it ran: the device runs launches in order, so each stretch after an idle moment is
the first launch made since (:func:`_owners`). A launch belongs to the innermost block of
the cell's thread that holds it; the block that launched most of the device's time, and the
program it names, are what :func:`of_trace` returns. A stretch that runs several queued
launches back to back (a loop's steps, then an evaluation) is the first one's: the block is
right, the program may be the first of a few.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from xprof_magic._analysis.model.summary import StepStats
from xprof_magic._analysis.summary.blocks import line_of, main_line
from xprof_magic._analysis.summary.step_spans import STALE_NS
from xprof_magic._analysis.summary.where import call_line, own_steps, paths_at
from xprof_magic._analysis.timeline.facts import LAUNCH, READ, TraceFacts
from xprof_magic._analysis.timeline.intervals import merge
from xprof_magic._analysis.timeline.line_arrays import Floats
from xprof_magic._backends import Vocabulary
from xprof_magic._runs.metadata import RunMetadata

__all__ = [
    "Launch",
    "StepActivity",
    "activity",
    "callable_name",
    "launcher",
    "of_trace",
    "where_launched",
]


@dataclass(frozen=True)
class Launch:
    """The block that launched most of the device's time, the program it launched, and its share.

    ``path``: its label path on the cell's thread (a loop's ``next(…)`` stands for its loop);
    ``program``: the program its launches name (the launch event's own name,
    ``PjitFunction(train)``; ``""`` where they name none); ``share``: the share of the device's time
    that followed them.
    """

    path: tuple[str, ...]
    program: str
    share: float


@dataclass(frozen=True)
class StepActivity:
    """What the runtime did in each step (by position, as the summary's steps): launches and reads.

    ``launches``: its program launches; ``named``: of them, those that named a program
    (``PjitFunction(train)``: a compiled function or an eager op's program); ``reads``: its reads of
    a device value on the host (:data:`~xprof_magic._analysis.timeline.facts.READ`); ``read_path``:
    the label path the reads were made in most (the loop).
    """

    launches: tuple[int, ...]
    named: tuple[int, ...]
    reads: tuple[int, ...]
    read_path: tuple[str, ...] = ()
    program: str = ""
    """The program the steps launched most (``PjitFunction(train)``; "" for none named)."""


def activity(
    facts: TraceFacts, meta: RunMetadata, words: Vocabulary, steps: StepStats | None
) -> StepActivity | None:
    """Each step's launches and reads, counted in its span on the timeline.

    None without the steps' places on it.
    """
    if steps is None or not steps.starts_s or len(steps.starts_s) != len(steps.durations_s):
        return None
    lo = np.asarray(steps.starts_s, np.float64) * 1e9
    hi = lo + np.asarray(steps.durations_s, np.float64) * 1e9
    if len(steps.host_starts_s) == len(lo):
        lo, hi = host_parts(lo, hi, np.asarray(steps.host_starts_s, np.float64) * 1e9)

    def count(keys: list[str]) -> tuple[int, ...]:
        times = [np.asarray(a, np.float64) for key in keys for a, _ in facts.spans.get(key, [])]
        at = np.sort(np.concatenate(times)) if times else np.empty(0)
        inside = np.searchsorted(at, hi, side="left") - np.searchsorted(at, lo, side="left")
        return tuple(int(n) for n in inside)

    launches = [key for key in facts.spans if key.startswith(LAUNCH)]
    by_program = {key: sum(count([key])) for key in launches if key != LAUNCH}
    top = max(by_program, key=lambda k: by_program[k], default="")
    reads = [a for a, _ in facts.spans.get(READ, [])]
    path: tuple[str, ...] = ()
    if reads:
        pipeline = words.timeline.input_pipeline
        at = [float(t) for chunk in reads for t in chunk]
        found = paths_at(
            facts.blocks, main_line(facts.blocks, pipeline), own_steps(meta.step_rule), at, pipeline
        )
        named = [p for p in found if p]
        path = max(set(named), key=named.count) if named else ()
    return StepActivity(
        launches=count(launches),
        named=count([key for key in launches if key != LAUNCH]),
        reads=count([READ]),
        read_path=path,
        program=top[len(LAUNCH) :] if top and by_program[top] else "",
    )


def host_parts(lo: Floats, hi: Floats, host: Floats) -> tuple[Floats, Floats]:
    """Each step's span on the host's side, where the host launches and reads its work.

    A step's span (``lo`` to ``hi``) lasts until the device has finished it; where the host ran
    ahead (a jitted step dispatched asynchronously), the host launched it earlier, at ``host``,
    and launched the next one before this one ended. So each step is counted from its host start
    to the next one's, or to its own end where the host waited for it (the gap between steps
    left out); the last to its end.
    """
    start = np.minimum(lo, host)
    end = hi.copy()
    end[:-1] = np.where(start[1:] < hi[:-1], np.maximum(start[1:], start[:-1]), hi[:-1])
    return start, end


def of_trace(facts: TraceFacts, meta: RunMetadata, words: Vocabulary) -> Launch | None:
    """The launcher (:func:`launcher`) of a run's timeline, on its cell's thread."""
    pipeline = words.timeline.input_pipeline
    return launcher(facts, main_line(facts.blocks, pipeline), own_steps(meta.step_rule), pipeline)


def launcher(
    facts: TraceFacts, line: str, steps: frozenset[str], aside: frozenset[str] = frozenset()
) -> Launch | None:
    """The block of ``line`` whose launches the device's time followed most.

    None: no launch, or no device time after one. ``steps`` are the magic's step markers, left out
    of label paths as the summary's rows leave them; ``aside`` the data loader's traces.
    """
    device = facts.spans.get("device")
    keys = [key for key in facts.spans if key.startswith(LAUNCH)]
    if not device or not keys:
        return None
    lo, hi = merge(device)
    if facts.window is not None:
        lo, hi = np.maximum(lo, facts.window[0]), np.minimum(hi, facts.window[1])
    at = np.concatenate([np.asarray(a, np.float64) for key in keys for a, _ in facts.spans[key]])
    program = np.concatenate(
        [np.full(len(a), i, np.int64) for i, key in enumerate(keys) for a, _ in facts.spans[key]]
    )
    order = np.argsort(at, kind="stable")
    at, program = at[order], program[order]
    owner = _owners(at, lo, hi)
    keep = (owner >= 0) & (hi > lo)
    if not keep.any():
        return None
    seconds = np.bincount(owner[keep], weights=hi[keep] - lo[keep], minlength=len(at))
    owning = np.flatnonzero(seconds > 0)
    by_path: dict[tuple[str, ...], float] = {}
    by_program: dict[tuple[tuple[str, ...], int], float] = {}
    paths = paths_at(facts.blocks, line, steps, at[owning].tolist(), aside)
    for i, path in zip(owning.tolist(), paths, strict=True):
        if path:
            by_path[path] = by_path.get(path, 0.0) + float(seconds[i])
            key = (path, int(program[i]))
            by_program[key] = by_program.get(key, 0.0) + float(seconds[i])
    if not by_path:
        return None
    path = max(by_path, key=lambda p: by_path[p])
    index = max((k for k in by_program if k[0] == path), key=lambda k: by_program[k])[1]
    return Launch(path, keys[index][len(LAUNCH) :], by_path[path] / float(seconds.sum()))


def _owners(at: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each stretch of device time ``[lo, hi)``, the index in ``at`` of its launch (-1: none).

    The stretches are sorted and disjoint; ``at`` holds the launch times, sorted. The device runs
    launches in order, so a stretch that starts after an idle moment runs the first launch made
    since then (but not one made :data:`~xprof_magic._analysis.summary.step_spans.STALE_NS` or more
    before it: that one ran nothing the timeline shows); one with no launch since (the device went
    on with what was queued) runs what the stretch before it ran. A program the host ran itself,
    inside its launch (the CPU client runs small ones so), is no stretch's: its launch goes to the
    device's next stretch.
    """
    idle = np.concatenate([[-np.inf], hi[:-1]])
    first = np.searchsorted(at, np.maximum(idle, lo - STALE_NS), side="left")
    launched = np.searchsorted(at, lo, side="right") > first
    owner = np.where(launched, first, -1)
    return np.maximum.accumulate(owner) if len(owner) else owner


def callable_name(program: str) -> str:
    """What the cell calls to launch ``program``: the last name inside its brackets.

    ``PjitFunction(Model.apply)`` → ``apply``; ``""`` when that is no identifier.
    """
    inner = program.partition("(")[2].rpartition(")")[0]
    name = inner.rpartition(".")[2]
    return name if name.isidentifier() else ""


def where_launched(cell: str, path: tuple[str, ...], launch: Launch) -> tuple[tuple[str, ...], int]:
    """Where ``launch`` is in the cell: a label path and its line.

    ``path`` is its label (its own path, or a start of it): the answer is that path and the label's
    line; where its program names a function called inside the label's block on another line (a
    loop's body), that statement's label is appended to the path, and the line is its.
    """
    line = line_of(cell, path)
    name = callable_name(launch.program)
    if not line or not name:
        return path, line
    number, text = call_line(cell, line, name)
    if number and number != line:
        return (*path, text), number
    return path, line
