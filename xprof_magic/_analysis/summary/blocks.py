"""Where the cell's host time went: labelled blocks and steps, as summary rows.

Both come from the timeline when it was read (every label, user ``xp.Trace`` and step,
nested as they ran, with the compilations each held) and otherwise from the magic's own
timers in the run's metadata (labels and step times, no compilations). Also where a label
is in the cell's source (:func:`line_of`) and the input shapes its loop saw
(:func:`input_shapes`).
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import replace

from xprof_magic._analysis.model.summary import Gap, LabelRow, StepStats
from xprof_magic._analysis.timeline.facts import STEP, Block, TraceFacts
from xprof_magic._cell.labels import SHAPES_EVENT
from xprof_magic._cell.markers import find_markers, label_for
from xprof_magic._runs.metadata import RunMetadata

__all__ = [
    "INPUT",
    "INPUT_PIPELINE",
    "MAX_LABEL_ROWS",
    "MAX_STEP_DURATIONS",
    "RunsByRow",
    "input_shapes",
    "is_loop",
    "label_names",
    "labels_from_metadata",
    "labels_from_trace",
    "labels_not_in_trace",
    "line_of",
    "main_line",
    "step_stats",
    "steps_from_metadata",
    "steps_from_trace",
    "with_spread",
]

MAX_LABEL_ROWS = 300
INPUT = "input"
INPUT_PIPELINE = "input pipeline (loader threads)"
MAX_STEP_DURATIONS = 10_000

RowKey = tuple[str, tuple[str, ...]]
RunsByRow = dict[RowKey, tuple[int, ...]]
"""For each (thread, path) row, the indices of its runs that held a compilation."""


def label_names(meta: RunMetadata) -> frozenset[str]:
    """The magic's marker names: on the timeline, such events are labels whatever they say."""
    return frozenset(label.path[-1] for label in meta.labels)


def labels_from_trace(
    facts: TraceFacts,
    wall_s: float | None,
    own_steps: frozenset[str] = frozenset(),
    input_pipeline: frozenset[str] = frozenset(),
) -> tuple[tuple[LabelRow, ...], RunsByRow, RunsByRow]:
    """Blocks summed by their path of names, with the runs of each that held a compilation.

    Also returns the numbers of the steps those runs began in (for rows whose compiling runs all
    began in one).

    Blocks on the thread that holds most of the block time are the cell's own (``thread``
    is ""); blocks on other threads keep their thread's name. Step markers named in
    ``own_steps`` (the magic's, which start and end at syncs, across labels) are left out of
    the paths: the steps section shows them, and a label keeps one path whichever step it
    ran in.
    """
    blocks = facts.blocks
    if not blocks:
        return (), {}, {}
    groups = _groups(blocks, main_line(blocks, input_pipeline), own_steps, input_pipeline)
    window_s = (facts.window[1] - facts.window[0]) / 1e9 if facts.window else None
    return _rows(groups, blocks, wall_s or window_s)


def main_line(blocks: list[Block], input_pipeline: frozenset[str]) -> str:
    """The line (thread) whose outermost blocks, the loader's aside, hold the most time."""
    time_by_line: dict[str, float] = {}
    for b in blocks:
        if b.parent < 0 and b.name not in input_pipeline:
            time_by_line[b.line] = time_by_line.get(b.line, 0.0) + b.end - b.start
    return max(time_by_line, key=lambda k: time_by_line[k]) if time_by_line else ""


def _groups(
    blocks: list[Block],
    main_line: str,
    own_steps: frozenset[str],
    input_pipeline: frozenset[str],
) -> dict[RowKey, _Agg]:
    """The blocks summed by (thread, path), in the order each row first appears."""
    paths: list[tuple[str, ...]] = []
    groups: dict[RowKey, _Agg] = {}
    pipeline_key: RowKey = ("", (INPUT_PIPELINE,))
    for b in blocks:
        parent = b.parent
        if b.continued and parent >= 0 and blocks[parent].end <= b.start:
            # The piece before it, ended at the same instant, is its sibling, not its parent.
            parent = blocks[parent].parent
        p = paths[parent] if parent >= 0 else ()
        if (b.kind == STEP and b.name in own_steps) or b.name.startswith(SHAPES_EVENT):
            paths.append(p)
            continue
        if not p and b.name in input_pipeline:
            p = (INPUT_PIPELINE,)
            pipeline = groups.get(pipeline_key)
            if pipeline is None:
                pipeline = groups[pipeline_key] = _Agg(INPUT, b.start)
            pipeline.count += 1
            pipeline.total_ns += b.end - b.start
            pipeline.first = min(pipeline.first, b.start)
        p += (b.name,)
        paths.append(p)
        key = ("" if b.line == main_line or p[0] == INPUT_PIPELINE else b.line, p)
        agg = groups.get(key)
        if agg is None:
            agg = groups[key] = _Agg(b.kind, b.start)
        agg.add(b)
    return groups


def _rows(
    groups: dict[RowKey, _Agg], blocks: list[Block], cell_s: float | None
) -> tuple[tuple[LabelRow, ...], RunsByRow, RunsByRow]:
    """The rows as a tree, thread by thread, each level in the order it first ran.

    At most :data:`MAX_LABEL_ROWS`.
    """
    compiled: RunsByRow = {}
    children: dict[RowKey, list[RowKey]] = {}
    for key in groups:
        children.setdefault((key[0], key[1][:-1]), []).append(key)
    ordered: list[LabelRow] = []

    def walk(parent: RowKey) -> None:
        for key in sorted(children.get(parent, []), key=lambda k: groups[k].first):
            if len(ordered) >= MAX_LABEL_ROWS:
                return
            agg = groups[key]
            total = agg.total_ns / 1e9
            ordered.append(
                LabelRow(
                    path=key[1],
                    kind=agg.kind,
                    count=agg.count,
                    total_s=total,
                    mean_s=total / agg.count,
                    share=total / cell_s if cell_s else None,
                    thread=key[0],
                    compiles=agg.compiles,
                    compile_s=agg.compile_ns / 1e9,
                    compiled_runs=len(agg.compiled_runs),
                )
            )
            compiled[key] = tuple(agg.compiled_runs)
            numbers = [_step_at(spans, t) for t in agg.compiled_at]
            if numbers and None not in numbers:
                in_steps[key] = tuple(n for n in numbers if n is not None)
            walk(key)

    spans = sorted(
        (b.start, b.end, b.step_num) for b in blocks if b.kind == STEP and b.step_num is not None
    )
    in_steps: RunsByRow = {}
    for thread in sorted({k[0] for k in groups}):
        walk((thread, ()))
    return tuple(ordered), compiled, in_steps


def _step_at(spans: list[tuple[float, float, int]], t: float) -> int | None:
    """The number of the step whose span holds instant ``t``, if one does."""
    i = bisect.bisect_right(spans, (t, float("inf"), 0)) - 1
    return spans[i][2] if i >= 0 and t <= spans[i][1] else None


class _Agg:
    """The runs of one block path, added up."""

    __slots__ = (
        "compile_ns",
        "compiled_at",
        "compiled_runs",
        "compiles",
        "count",
        "first",
        "kind",
        "total_ns",
    )

    def __init__(self, kind: str, first: float) -> None:
        self.kind = kind
        self.first = first
        self.count = 0
        self.total_ns = 0.0
        self.compiles = 0
        self.compile_ns = 0.0
        self.compiled_runs: list[int] = []
        self.compiled_at: list[float] = []

    def add(self, b: Block) -> None:
        """Add one run; a piece continued after a step boundary adds to the run before it."""
        if not b.continued or not self.count:
            self.count += 1
        if b.compiles and self.count - 1 not in self.compiled_runs[-1:]:
            self.compiled_runs.append(self.count - 1)
            self.compiled_at.append(b.start)
        self.total_ns += b.end - b.start
        self.compiles += b.compiles
        self.compile_ns += b.compile_ns


def labels_from_metadata(meta: RunMetadata, wall_s: float | None) -> tuple[LabelRow, ...]:
    """The magic's label timers as rows, each under its parent in the order first entered."""
    order = {label.path: i for i, label in enumerate(meta.labels)}
    children: dict[tuple[str, ...], list[tuple[tuple[str, ...], int, float]]] = {}
    for label in meta.labels:
        children.setdefault(label.path[:-1], []).append((label.path, label.count, label.total_s))
    out: list[LabelRow] = []

    def walk(parent: tuple[str, ...]) -> None:
        for path, count, total in sorted(children.get(parent, []), key=lambda r: order[r[0]]):
            out.append(
                LabelRow(
                    path=path,
                    kind="label",
                    count=count,
                    total_s=total,
                    mean_s=total / count if count else 0.0,
                    share=total / wall_s if wall_s else None,
                )
            )
            walk(path)

    walk(())
    known = {r.path for r in out}
    for label in meta.labels:  # orphans whose parent path was not listed
        if label.path not in known:
            count, total = label.count, label.total_s
            out.append(
                LabelRow(label.path, "label", count, total, total / count if count else 0.0, None)
            )
    return tuple(out[:MAX_LABEL_ROWS])


def labels_not_in_trace(meta: RunMetadata, facts: TraceFacts) -> list[Gap]:
    """The magic's labels that the timeline lacks, as a gap (none: empty)."""
    seen = {b.name for b in facts.blocks}
    lost = tuple(sorted(label_names(meta) - seen))
    return [Gap("labels not on timeline", names=lost)] if lost else []


def step_stats(
    name: str,
    source: str,
    durations: list[float],
    compiling: tuple[int, ...],
    starts: list[float] | None = None,
    estimated: tuple[int, ...] = (),
    host_starts: list[float] | None = None,
) -> StepStats:
    rest = durations[1:]
    return StepStats(
        name=name,
        source=source,
        count=len(durations),
        durations_s=tuple(durations[:MAX_STEP_DURATIONS]),
        first_s=durations[0],
        rest_min_s=min(rest) if rest else None,
        rest_median_s=statistics.median(rest) if rest else None,
        rest_max_s=max(rest) if rest else None,
        compiling=compiling,
        starts_s=tuple(starts[:MAX_STEP_DURATIONS]) if starts else (),
        estimated=tuple(i for i in estimated if i < MAX_STEP_DURATIONS),
        host_starts_s=tuple(host_starts[:MAX_STEP_DURATIONS]) if host_starts else (),
    )


def with_spread(steps: StepStats, spread: tuple[tuple[int, int], ...], first: int) -> StepStats:
    """``steps`` with the ranges of step numbers whose times were spread (counted, not timed).

    ``first``: the number of the run's first step, its index 0.
    """
    ranges = tuple(
        (max(a - first, 0), min(b - first, steps.count))
        for a, b in spread
        if min(b - first, steps.count) > max(a - first, 0)
    )
    return replace(steps, spread=ranges)


def steps_from_trace(facts: TraceFacts) -> StepStats | None:
    """The most frequent step name's runs (ties: the longest in all), in time order."""
    by_name: dict[str, list[Block]] = {}
    for b in facts.blocks:
        if b.kind == STEP:
            by_name.setdefault(b.name, []).append(b)
    if not by_name:
        return None
    name, blocks = max(
        by_name.items(), key=lambda kv: (len(kv[1]), sum(b.end - b.start for b in kv[1]))
    )
    blocks.sort(key=lambda b: b.start)
    return step_stats(
        name,
        "trace",
        [(b.end - b.start) / 1e9 for b in blocks],
        tuple(i for i, b in enumerate(blocks) if b.holds_compile),
        [b.start / 1e9 for b in blocks],
    )


def steps_from_metadata(meta: RunMetadata) -> StepStats | None:
    """The magic's step timer, when the cell had steps."""
    return step_stats("step", "metadata", list(meta.steps), ()) if meta.steps else None


def is_loop(statement: str) -> bool:
    """Whether a label made from a statement is a loop's (``for``, ``while``, ``async for``)."""
    return statement.lstrip().startswith(("for ", "while ", "async for "))


def line_of(cell: str, path: tuple[str, ...]) -> int:
    """The cell line (from 1) of the innermost element of ``path`` found in ``cell``; 0 if none.

    The line is a ``# xprof: NAME`` comment's, or the statement a label was made from.
    """
    lines = cell.splitlines()
    markers = find_markers(cell) if "xprof:" in cell else []
    for name in reversed(path):
        for marker in markers:
            if marker.name == name:
                return marker.line
        for number, text in enumerate(lines, 1):
            if text.strip() and label_for(text) == name:
                return number
    return 0


def input_shapes(facts: TraceFacts) -> tuple[str, ...]:
    """The input shapes the cell's loop saw, in order, each change once.

    Read from the markers :func:`xprof_magic._cell.labels.inputs` leaves.
    """
    seen: list[str] = []
    for b in sorted(facts.blocks, key=lambda b: b.start):
        if b.name.startswith(SHAPES_EVENT):
            shape = b.name[len(SHAPES_EVENT) :].strip()
            if not seen or seen[-1] != shape:
                seen.append(shape)
    return tuple(seen)
