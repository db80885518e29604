"""Where in the cell an instant of the timeline is.

The label path open then, and the line inside a block that calls a function.

The diagnosis gives the device's time to the statement that launched the work
(:mod:`~xprof_magic._analysis.diagnosis.attribution`): the block open on the cell's thread
when the launch happened (:func:`paths_at`, its path as the summary's label rows name it),
and inside that block the line that calls the launched function (:func:`call_line`), which
a loop's label alone does not say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from xprof_magic._analysis.timeline.facts import STEP, Block
from xprof_magic._cell.labels import SHAPES_EVENT
from xprof_magic._cell.markers import find_markers, label_for
from xprof_magic._cell.step_tracker import STEP_EVENT

__all__ = ["INPUT_PREFIX", "call_line", "label_at", "method_call_line", "own_steps", "paths_at"]

INPUT_PREFIX = "next("
"""How the label of a loop's ``next()`` starts (:func:`xprof_magic._cell.labels.inputs`)."""


def own_steps(step_rule: str | None) -> frozenset[str]:
    """The names of the magic's own step markers in a run whose steps ``step_rule`` found.

    They start and end at syncs, across labels, so label paths leave them out.
    """
    return frozenset({STEP_EVENT}) if step_rule in ("sync", "iteration") else frozenset()


def paths_at(
    blocks: Sequence[Block],
    line: str,
    steps: frozenset[str],
    times: Sequence[float],
    aside: frozenset[str] = frozenset(),
) -> list[tuple[str, ...]]:
    """The label path of the innermost block of ``line`` open at each of ``times``, ``()`` if none.

    Paths leave out the magic's ``steps`` and shape markers, as the summary's rows name blocks,
    and a loop's ``next(…)`` stands for its loop. Blocks named in ``aside`` (a data loader's own
    traces, on its threads) are no one's.

    Blocks on a line nest, so the innermost one open at ``t`` is the last to start before
    it, or the nearest of that one's enclosing blocks still open.
    """
    kept = [
        i
        for i, b in enumerate(blocks)
        if b.line == line and not _skipped(b, steps) and b.name not in aside
    ]
    if not kept or not len(times):
        return [()] * len(times)
    up = _kept_parents(blocks, kept, steps)
    order = sorted(range(len(kept)), key=lambda k: blocks[kept[k]].start)
    rank = {k: r for r, k in enumerate(order)}
    start = np.array([blocks[kept[k]].start for k in order])
    end = np.array([blocks[kept[k]].end for k in order])
    parent = np.array([rank[up[k]] if up[k] >= 0 else -1 for k in order], np.int64)
    t = np.asarray(times, np.float64)
    at = np.searchsorted(start, t, side="right") - 1
    while True:
        closed = (at >= 0) & (end[np.maximum(at, 0)] < t)
        if not closed.any():
            break
        at[closed] = parent[at[closed]]
    known: dict[int, tuple[str, ...]] = {}
    return [_path(blocks, kept[order[a]], steps, known) if a >= 0 else () for a in at.tolist()]


def _kept_parents(blocks: Sequence[Block], kept: list[int], steps: frozenset[str]) -> list[int]:
    """For each kept block (by its place in ``kept``), the place of its nearest kept parent.

    The parent is its nearest kept enclosing block, -1 for none.
    """
    place = {i: k for k, i in enumerate(kept)}
    out = []
    for i in kept:
        up = blocks[i].parent
        while up >= 0 and up not in place:
            up = blocks[up].parent
        out.append(place.get(up, -1))
    return out


def _skipped(b: Block, steps: frozenset[str]) -> bool:
    return (b.kind == STEP and b.name in steps) or b.name.startswith(SHAPES_EVENT)


def _path(
    blocks: Sequence[Block], at: int, steps: frozenset[str], known: dict[int, tuple[str, ...]]
) -> tuple[str, ...]:
    if at not in known:
        names: list[str] = []
        up = at
        while up >= 0:
            if not _skipped(blocks[up], steps):
                names.append(blocks[up].name)
            up = blocks[up].parent
        path = tuple(reversed(names))
        known[at] = path[:-1] if len(path) > 1 and path[-1].startswith(INPUT_PREFIX) else path
    return known[at]


def label_at(cell: str, line: int) -> str:
    """The label of the statement at cell line ``line`` (from 1); "" for none."""
    lines = cell.splitlines()
    return label_for(lines[line - 1]) if 0 < line <= len(lines) else ""


def method_call_line(cell: str, name: str) -> tuple[int, str]:
    """The first cell line that calls ``name`` as an attribute, and its label.

    An attribute call is ``jnp.pad(…)``, a module's function or a method; ``(0, "")`` if none
    does.
    """
    calls = re.compile(rf"\.\s*{re.escape(name)}\s*\(")
    for number, text in enumerate(cell.splitlines(), 1):
        if calls.search(text) and not text.lstrip().startswith("#"):
            return number, label_for(text)
    return 0, ""


def call_line(cell: str, line: int, name: str) -> tuple[int, str]:
    """The first line calling ``name`` in the block starting at cell line ``line``, and its label.

    The block is a statement and the lines indented under it, or a ``# xprof:`` marker's
    statements up to the next marker; the label is :func:`~xprof_magic._cell.markers.label_for`'s.
    ``(0, "")`` if none does.
    """
    lines = cell.splitlines()
    if not name.isidentifier() or not 0 < line <= len(lines):
        return 0, ""
    first = lines[line - 1]
    indent = len(first) - len(first.lstrip())
    marker = first.lstrip().startswith("#")
    markers = {m.line for m in find_markers(cell)} if marker else set()
    calls = re.compile(rf"(?<![\w]){re.escape(name)}\s*\(")
    for number in range(line, len(lines) + 1):
        text = lines[number - 1]
        if number > line and text.strip():
            depth = len(text) - len(text.lstrip())
            if depth < indent or (depth == indent and (not marker or number in markers)):
                break
        code = text.strip()
        if code.startswith(("def ", "async def ", "#")):
            continue
        if calls.search(code):
            return number, label_for(text)
    return 0, ""
