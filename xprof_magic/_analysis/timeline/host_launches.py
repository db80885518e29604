"""What the host launched on the device, read off one host line.

The timeline pass's part that says whose the device's work is.

Two kinds of events say it:

* the runtime's program launches on the Python threads (the vocabulary's ``launches``:
  JAX's ``PjitFunction(name)``, torch_xla's syncs), kept as spans by the program they name
  (:data:`~.facts.LAUNCH`). A launch's event also holds what must come before the launch
  itself (a barrier for the step before, a first call's compilation), so each span starts
  where those end;
* a GPU's CUDA calls (``cuGraphLaunch``, a kernel's launch, ``MemcpyH2D``), which carry the
  ``correlation_id`` that the kernels and copies they launched carry on the device's plane
  (:attr:`~.facts.TraceFacts.launch_ids`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.timeline import nesting
from xprof_magic._analysis.timeline.events import launched_program
from xprof_magic._analysis.timeline.facts import LAUNCH, execution_key
from xprof_magic._analysis.timeline.line_arrays import (
    EndTimes,
    Floats,
    Index,
    Ints,
    Line,
    first_of_each,
)
from xprof_magic._analysis.timeline.programs import module_of

__all__ = ["correlated", "executions", "launch_spans"]


def launch_spans(
    start: Floats,
    end: EndTimes,
    name_id: Ints,
    names: list[str],
    launch: NDArray[np.bool_],
    before: NDArray[np.bool_],
    nest: nesting.Nesting,
    prefixes: tuple[str, ...],
) -> list[tuple[str, Floats, Floats]]:
    """The line's program launches, as spans by the span key of the program they name.

    Of the ``launch`` events, those not inside another are kept; ``prefixes`` are the
    vocabulary's ``launches``. Each span runs from when it launched, after the events inside
    it that come first (``before``), to its end. The line's events are in time order, with
    their nesting ``nest``.
    """
    outer = np.flatnonzero(launch & ~((nest.parent >= 0) & launch[nest.parent]))
    if not len(outer):
        return []
    owner = np.full(len(start), -1, np.int64)
    owner[outer] = outer
    for level in range(1, int(nest.depth.max(initial=0)) + 1):
        here = np.flatnonzero((nest.depth == level) & (owner < 0) & (nest.parent >= 0))
        owner[here] = owner[nest.parent[here]]
    made = start.copy()
    inside = np.flatnonzero(before & (owner >= 0))
    np.maximum.at(made, owner[inside], end[inside])
    at = outer[np.argsort(name_id[outer], kind="stable")]
    found = []
    for group in np.split(at, np.flatnonzero(np.diff(name_id[at])) + 1):
        program = launched_program(names[int(name_id[group[0]])], prefixes)
        found.append((LAUNCH + program, made[group], end[group]))
    return found


def correlated(
    line: Line,
    order: Index,
    start: Floats,
    name_id: Ints,
    firsts: tuple[Ints, Ints] | None = None,
) -> tuple[list[float], list[float]] | None:
    """The line's launches of device work that name it: each one's id and start.

    A launch names its work with a ``correlation_id`` stat; None: none. A stat read per
    distinct name first, then per event of those names only. ``order``, ``start`` and
    ``name_id`` are the line's in time order; ``firsts``: ``first_of_each(name_id)`` where
    the caller has it.
    """
    _, first = first_of_each(name_id) if firsts is None else firsts
    if not len(first):
        return None
    named = line.has(order[first], "correlation_id")
    if not named.any():
        return None
    at = np.flatnonzero(np.isin(name_id, name_id[first[named]]))
    ids = line.numbers(order[at], "correlation_id")
    known = ~np.isnan(ids)
    if not known.any():
        return None
    return ids[known].tolist(), start[at[known]].tolist()


def executions(
    program: list[str], start: Floats, name_id: Ints, ends: NDArray[np.bool_]
) -> list[tuple[str, Floats]]:
    """The XLA CPU client's executions on one of its lines, by program.

    Each mark of an execution's end (``ends``: :data:`~.events.EXECUTION_ENDS`) is the program
    of the last XLA op the line ran before it; for each program's span key
    (:func:`~.facts.execution_key`), when its executions ended (ns). The line's events are in
    time order (``start``); ``program``: each event name's (:func:`~.programs.name_programs`).
    """
    is_op = np.array([bool(p) for p in program], bool)[name_id]
    ops = np.flatnonzero(is_op)
    marks = np.flatnonzero(ends)
    before = np.searchsorted(start[ops], start[marks], side="right") - 1
    # The name of the op before each mark (-1: none), each name's key worked out once.
    last_op = np.full(len(marks), -1, np.int64)
    ran = before >= 0
    last_op[ran] = name_id[ops[before[ran]]]
    names, which = np.unique(last_op, return_inverse=True)
    name_keys = [execution_key(module_of(program[u])) if u >= 0 else "" for u in names.tolist()]
    keys = sorted(set(name_keys))
    key_at = np.array([keys.index(key) for key in name_keys], np.int64)[which]
    return [(key, start[marks[key_at == k]]) for k, key in enumerate(keys)]
