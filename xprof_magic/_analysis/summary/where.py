"""Where in the cell an instant of the timeline is: the label path open then, and the line
inside a block that calls a function.

The diagnosis gives the device's time to the statement that launched the work
(:mod:`~xprof_magic._analysis.diagnosis.launches`): the block open on the cell's thread
when the launch happened (:func:`paths_at`, its path as the summary's label rows name it),
and inside that block the line that calls the launched function (:func:`call_line`), which
a loop's label alone does not say.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xprof_magic._analysis.timeline.facts import STEP, Block
from xprof_magic._labels import SHAPES_EVENT
from xprof_magic._markers import find_markers, label_for
from xprof_magic._steps import STEP_EVENT

__all__ = ["INPUT_PREFIX", "call_line", "own_steps", "paths_at"]

INPUT_PREFIX = "next("
"""How the label of a loop's ``next()`` starts (:func:`xprof_magic._labels.inputs`)."""


def own_steps(step_rule: str | None) -> frozenset[str]:
    """The names of the magic's own step markers in a run whose steps ``step_rule`` found:
    they start and end at syncs, across labels, so label paths leave them out."""
    return frozenset({STEP_EVENT}) if step_rule in ("sync", "iteration") else frozenset()


def paths_at(
    blocks: Sequence[Block], line: str, steps: frozenset[str], times: Sequence[float]
) -> list[tuple[str, ...]]:
    """The label path of the innermost block of ``line`` open at each of ``times`` (in
    order), ``()`` where none is; without the magic's ``steps`` and shape markers, as the
    summary's rows name blocks, and a loop's ``next(…)`` standing for its loop."""
    mine = sorted(
        (i for i, b in enumerate(blocks) if b.line == line and not _skipped(b, steps)),
        key=lambda i: (blocks[i].start, -blocks[i].end),
    )
    out: list[tuple[str, ...]] = []
    open_: list[int] = []
    known: dict[int, tuple[str, ...]] = {}
    k = 0
    for t in times:
        while k < len(mine) and blocks[mine[k]].start <= t:
            open_.append(mine[k])
            k += 1
        while open_ and blocks[open_[-1]].end < t:
            open_.pop()
        inner = next((i for i in reversed(open_) if blocks[i].end >= t), -1)
        out.append(_path(blocks, inner, steps, known) if inner >= 0 else ())
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


def call_line(cell: str, line: int, name: str) -> tuple[int, str]:
    """The first line of the block starting at cell line ``line`` (a statement and the
    lines indented under it, or a ``# xprof:`` marker's statements up to the next marker)
    that calls ``name``, and its label (:func:`~xprof_magic._markers.label_for`);
    ``(0, "")`` if none does."""
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
