"""The host's time that is the user's own Python, apart from the framework's, and its line.

The breakdown's ``host`` is the rest of a step: the framework dispatching ops or building
its graph, and plain Python and numpy that run no framework op at all (making batches,
logging, saving). Their fixes are opposite, so this module tells them apart from the
cell's thread sampled during the capture (:mod:`xprof_magic._cell.sampler`: the cell's line
and whether the innermost Python frame was the framework's, each look on the timeline's
clock). A look is the framework's when its innermost frame is, or its line makes the
framework's ops (torch_xla's counter grew while it ran: :func:`_made_ops`), or it falls in the
runtime's own events on the Python thread (:data:`~..timeline.facts.FRAMEWORK`: JAX's
``PjitFunction`` dispatch, a sync, a copy), a launch or a compile; it is input inside a
``next()``; a line that only moves data to the device (:func:`moves_data`) is the
framework's copy; else it is the user's own code, at the cell line it was on.

:func:`sampled` places every look in its step; :func:`own_python` sums the steps a verdict
is about into an :class:`~xprof_magic._analysis.model.diagnosis.OwnPython`.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from xprof_magic._analysis.model.diagnosis import Breakdown, HostLooks
from xprof_magic._analysis.summary.blocks import main_line
from xprof_magic._analysis.summary.step_spans import fetch_spans, line_step_spans
from xprof_magic._analysis.summary.where import label_at
from xprof_magic._analysis.timeline.facts import (
    FRAMEWORK,
    LAUNCH,
    READ,
    STEP_END,
    TraceFacts,
)
from xprof_magic._analysis.timeline.intervals import Spans, merge
from xprof_magic._backends import Vocabulary
from xprof_magic._runs.metadata import RunMetadata

__all__ = [
    "MIN_LOOKS",
    "OWN_HOST",
    "Sampled",
    "feeds_the_step",
    "framework_python",
    "held_by",
    "moves_data",
    "own_python",
    "prints",
    "sampled",
]

GREW = 2
"""A look's flag: the framework's ops counter grew since the look before
(:data:`xprof_magic._cell.sampler.GREW`; 1 is the innermost frame's being the framework's)."""
OWN_HOST = 0.5
"""The share of the host's sampled time that must be the user's own for the verdict to say so."""
STALLED = 4
"""A look's flag: the cell's thread had run no CPU to speak of since the look before and made
no ops (:data:`xprof_magic._cell.sampler.STALLED`: a busy machine), so the pair says nothing
of whether its line makes ops."""
WEIGHT = 8
"""A look's flags divided by this: how many looks it stands for, 0 meaning one
(:data:`xprof_magic._cell.sampler.WEIGHT`: the sampler looks less often in a loop of tiny
steps)."""
MIN_LOOKS = 5
"""The fewest looks at the host's time that say anything."""
_FRAMEWORK_KEYS = ("compile", "transfer", "sync", STEP_END, READ, FRAMEWORK)
_ELSEWHERE = ("compile", "transfer", "sync", "device", "collective")
"""The span keys whose instants the breakdown does not count as host time."""


@dataclass(frozen=True)
class Sampled:
    """Every look within the cell: its step, whose time it was, and the cell's line.

    For each look: its step (its position in the breakdown's steps; -1: in none), whether it was the
    host's time (no other category held the instant), the user's own Python, the device busy then,
    the cell's line, and whether that own Python was making the step's data (``batch``: its line
    :func:`feeds_the_step`).
    """

    step: NDArray[np.int64]
    host: NDArray[np.bool_]
    own: NDArray[np.bool_]
    device: NDArray[np.bool_]
    line: NDArray[np.int64]
    batch: NDArray[np.bool_] | None = None
    fed: NDArray[np.bool_] | None = None
    """Whether each look was the loop waiting for its next batch (in a fetch)."""
    ran: NDArray[np.bool_] | None = None
    """Whether the cell's thread ran on a CPU before each look (not :data:`STALLED`)."""
    cpus: int = 0
    """The cores the cell's process could run on (:attr:`RunMetadata.cpus`; 0: unknown)."""
    workers_s: float = 0.0
    """The CPU seconds the cell's child processes (a DataLoader's workers) used while it ran
    (:attr:`RunMetadata.children_cpu_s`; 0: none, or not known)."""

    def batches(self) -> NDArray[np.bool_]:
        """Whether each look was the user's own Python making batches."""
        return self.batch if self.batch is not None else np.zeros(len(self.step), bool)

    def waits_on_cpu(self) -> float:
        """The share of the looks at the loop's waits for a batch in which its thread ran.

        A loader that decodes on the cell's thread (no workers) computes there (1.0); one that
        waits on a store's latency does not. 1.0 without such looks, or where the thread's CPU
        clock is not read.
        """
        if self.fed is None or self.ran is None or not self.fed.any():
            return 1.0
        return float(self.ran[self.fed].mean())


def sampled(facts: TraceFacts, meta: RunMetadata, words: Vocabulary) -> Sampled | None:
    """The run's looks (:attr:`RunMetadata.lines`) placed on its timeline; None without."""
    if not meta.lines or not facts.profile_start_ns:
        return None
    looks = np.array(meta.lines, dtype=np.int64)
    t = (looks[:, 0] - facts.profile_start_ns).astype(np.float64)
    if facts.window is not None:
        keep = (t >= facts.window[0]) & (t < facts.window[1])
        looks, t = looks[keep], t[keep]
    spans = {key: merge(pieces) for key, pieces in facts.spans.items()}
    pipeline = words.timeline.input_pipeline
    line = main_line(facts.blocks, pipeline)  # once: a walk over every block
    mine = [b for b in facts.blocks if b.line == line]
    fetches = fetch_spans(mine, pipeline)
    steps = line_step_spans(facts, line, pipeline)  # the breakdown's, worked out once
    starts = np.array([s.start for s in steps])
    ends = np.array([s.end for s in steps])
    at = np.searchsorted(starts, t, side="right") - 1
    inside = (at >= 0) & (t < ends[np.maximum(at, 0)]) if len(steps) else np.zeros(len(t), bool)
    framework = merge(
        [spans[k] for k in _FRAMEWORK_KEYS if k in spans]
        + [spans[k] for k in spans if k.startswith(LAUNCH)]
    )
    device = merge([spans[k] for k in ("device", "collective") if k in spans])
    elsewhere = merge([spans[k] for k in _ELSEWHERE if k in spans] + [fetches])
    host = ~_within(elsewhere, t)
    flags = looks[:, 2]
    step = np.where(inside, at, -1)
    grew, ran = (flags & GREW) > 0, (flags & STALLED) == 0
    theirs = _frames(looks[:, 1], (flags & 1) > 0, grew, ran) | _made_ops(
        looks[:, 1], grew, looks[:, 3], ran
    )
    cell_lines = np.unique(looks[:, 1]).tolist()
    moving = [v for v in cell_lines if moves_data(meta.numbered_cell, v)]
    own = host & ~theirs & ~_within(framework, t) & (looks[:, 1] > 0)
    own &= ~np.isin(looks[:, 1], moving)
    feeding = [
        v for v in np.unique(looks[own, 1]).tolist() if feeds_the_step(meta.numbered_cell, v)
    ]
    # A look taken less often stands for as many: counted that many times, once its own
    # facts (the ops made since the look before) are read.
    times = np.maximum(flags // WEIGHT, 1)
    return Sampled(
        step=np.repeat(step, times),
        host=np.repeat(host, times),
        own=np.repeat(own, times),
        device=np.repeat(_within(device, t), times),
        line=np.repeat(looks[:, 1], times),
        batch=np.repeat(own & np.isin(looks[:, 1], feeding), times),
        fed=np.repeat(_within(fetches, t), times),
        ran=np.repeat(ran, times),
        cpus=meta.cpus or 0,
        workers_s=meta.children_cpu_s or 0.0,
    )


TRACING = 0.25
"""Where the framework counts the ops it makes (torch_xla), the share of a line's looks after
which it had made ops that its framework frames need to be its tracing."""


def _frames(
    line: NDArray[np.int64],
    frame: NDArray[np.bool_],
    grew: NDArray[np.bool_],
    ran: NDArray[np.bool_],
) -> NDArray[np.bool_]:
    """Whether each look's innermost frame is the framework's, and that is the framework's time.

    Where it counts the ops it makes (any look ``grew``), a line whose looks made ops after fewer
    than :data:`TRACING` of them is not its tracing: torch stacking CPU tensors in a ``collate_fn``,
    or other Python of its that makes no device op, is the user's own work, whose fix is never
    ``torch_xla.compile``. The share is of the looks after which the thread had ``ran`` (all of
    the line's where none had).
    """
    if not grew.any():
        return frame
    out: NDArray[np.bool_] = frame.copy()
    for value in np.unique(line[frame]).tolist():
        at = line == value
        counted = at & ran
        if not counted.any():
            counted = at
        if grew[counted].mean() < TRACING:
            out[at] = False
    return out


def _made_ops(
    line: NDArray[np.int64],
    grew: NDArray[np.bool_],
    step: NDArray[np.int64],
    ran: NDArray[np.bool_],
) -> NDArray[np.bool_]:
    """Whether the framework made ops at each look's line (torch_xla's counter ``grew`` meanwhile).

    ``grew`` says the counter grew since the look before. A line seen at two looks in a row of the
    same ``step`` (the step tracker's count of steps ended at each look), at least twice, is judged
    by whether the counter grew between most of those (the line ran all that time): a NumPy line
    before a step's ops is not theirs. A pair between which the thread had not ``ran`` (waiting
    for a core) counts for neither. Another look, by its own growth.
    """
    out: NDArray[np.bool_] = np.array(grew, dtype=bool)
    same = np.zeros(len(line), bool)
    same[1:] = (line[1:] == line[:-1]) & (step[1:] == step[:-1]) & ran[1:]
    for value in np.unique(line[same]).tolist():
        pairs = same & (line == value)
        if pairs.sum() >= 2:
            out[line == value] = grew[pairs].mean() >= 0.5
    return out


def _within(spans: Spans, t: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Whether each instant ``t`` lies in ``spans`` (merged: sorted, apart)."""
    lo, hi = np.asarray(spans[0], dtype=np.float64), np.asarray(spans[1], dtype=np.float64)
    if not len(lo):
        return np.zeros(len(t), bool)
    at = np.searchsorted(lo, t, side="right") - 1
    return (at >= 0) & (t < hi[np.maximum(at, 0)])


def own_python(
    found: Sampled | None, steps: Sequence[int], cell: str, batches: bool | None = None
) -> HostLooks | None:
    """The user's own Python in the looks of ``steps``, when it is enough of the host's looks.

    ``steps`` are positions (none: the whole cell); the answer is None unless it is at least
    :data:`OWN_HOST` of the host's looks there. ``batches``: only the looks making batches (True),
    only the others (False), any (None); the host's looks counted against them leave out those
    making batches when False (their time is the input pipeline's, :mod:`.batches`).
    """
    return _looks(found, steps, cell, "own", batches)


def framework_python(found: Sampled | None, steps: Sequence[int], cell: str) -> HostLooks | None:
    """The framework's time on the host (dispatch, graph building) in the looks of ``steps``.

    At the cell line holding most of it; None with fewer than :data:`MIN_LOOKS`.
    """
    return _looks(found, steps, cell, "framework")


def held_by(
    verdict: str, found: Sampled | None, steady: Sequence[int], cell: str, basis: Breakdown
) -> tuple[HostLooks | None, HostLooks | None, str, float]:
    """Whose Python holds a verdict's time, the cause that says so, and the part a fix removes.

    The user's own (its looks) or the framework's (its looks), the cause (``""``: none), and the
    part of the verdict's time a fix at that line removes. An ``input`` verdict whose input time is
    mostly batches made in the user's Python (:attr:`Breakdown.made`) is ``making batches``, at the
    line that makes them; a ``host`` verdict whose host time is mostly the user's other Python is
    ``own code``, else the framework's at its line; either is ``printing`` when that line prints
    (:func:`prints`: a print of device values waits for them, reads them back and, in torch_xla,
    formats them with device ops), and a fix there removes that line's part of the host's time.
    """
    of_steps = bool(basis.steps)
    if verdict == "input":
        made = basis.made(of_steps)
        if made <= 0 or made < 0.5 * basis.seconds("input", of_steps):
            return None, None, "", 1.0
        return own_python(found, steady, cell, batches=True), None, "making batches", 1.0
    if verdict != "host":
        return None, None, "", 1.0
    own = own_python(found, steady, cell, batches=False)
    theirs = None if own is not None else framework_python(found, steady, cell)
    held = own or theirs
    if held is not None and found is not None and prints(cell, held.line):
        pick = np.isin(found.step, list(steady)) if steady else np.ones(len(found.step), bool)
        host = pick & found.host & ~found.batches()
        at = float((host & (found.line == held.line)).sum()) / max(1, int(host.sum()))
        return own, theirs, "printing", at
    if own is not None:
        return own, None, "own code", own.of_host
    return None, theirs, "", 1.0


_PRINTS = re.compile(r"^\s*(?:print|(?:logging|logger|log|tqdm)\.\w+|\w+\.write)\s*\(")


def prints(cell: str, line: int) -> bool:
    """Whether the cell's ``line`` is a statement that prints or logs.

    ``print(…)``, ``logger.info(…)``, ``tqdm.write(…)``, ``f.write(…)``.
    """
    lines = cell.splitlines()
    return 0 < line <= len(lines) and _PRINTS.match(lines[line - 1]) is not None


def _looks(
    found: Sampled | None, steps: Sequence[int], cell: str, whose: str, batches: bool | None = None
) -> HostLooks | None:
    if found is None:
        return None
    pick = np.isin(found.step, list(steps)) if steps else np.ones(len(found.step), bool)
    made = found.batches()
    looks = int(pick.sum())
    host = int((pick & found.host & (~made if batches is False else True)).sum())
    if whose == "own":
        held = pick & found.own & (made if batches else ~made if batches is False else True)
        enough = held.sum() >= (MIN_LOOKS if batches else OWN_HOST * host)
    else:
        held = pick & found.host & ~found.own & (found.line > 0)
        enough = held.sum() >= MIN_LOOKS
    if host < MIN_LOOKS or looks == 0 or not held.any() or not enough:
        return None
    line, _ = Counter(found.line[held].tolist()).most_common(1)[0]
    return HostLooks(
        share=round(float(held.sum()) / looks, 4),
        of_host=round(float(held.sum()) / host, 4),
        line=int(line),
        statement=label_at(cell, int(line)),
        idle=round(float((held & ~found.device).sum()) / looks, 4),
        batches=whose == "own" and feeds_the_step(cell, int(line)),
        whose=whose,
    )


def feeds_the_step(cell: str, line: int) -> bool:
    """Whether the statement at ``line`` makes the step's data.

    It does when it assigns a name that a loop iterates, or that a later statement of its own body
    passes to a call.
    """
    try:
        tree = ast.parse(cell)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for k, stmt in enumerate(body):
            if not isinstance(stmt, ast.stmt) or not stmt.lineno <= line <= (stmt.end_lineno or 0):
                continue
            if not isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            names = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and _stored(n)}
            for later in body[k + 1 :]:
                for n in ast.walk(later):
                    if isinstance(n, ast.For) and _names(n.iter) & names:
                        return True
                    if isinstance(n, ast.Call) and any(_names(a) & names for a in n.args):
                        return True
    return False


_MOVES = frozenset(
    {
        "to",
        "cuda",
        "device_put",
        "device_put_replicated",
        "device_put_sharded",
        "send_cpu_data_to_device",
    }
)
"""The calls that copy data to a device: a tensor's ``.to(dev)`` and ``.cuda()``, JAX's
``device_put`` and its variants, torch_xla's ``send_cpu_data_to_device``."""
_WALKS = frozenset({"items", "values", "keys"})
"""The calls a statement that moves data may also make: walking a dict of tensors."""


def moves_data(cell: str, line: int) -> bool:
    """Whether the statement at ``line`` only copies data to the device.

    ``x, y = x.to(dev), y.to(dev)``, ``batch = {k: v.cuda() for k, v in batch.items()}``,
    ``x = jax.device_put(x)``: every call it makes is one of :data:`_MOVES` (or walks a dict),
    and one at least copies. Its time is the framework's transfer, not the user's own Python
    making a batch (whose fix is the data path's): its looks are never :func:`own_python`'s.
    A statement that also calls anything else (``torch.from_numpy(augment(raw)).to(dev)``)
    makes the batch it moves, so it stays the user's.
    """
    try:
        tree = ast.parse(cell)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or isinstance(node, _COMPOUND):
            continue
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        calls = [_called(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
        return bool(calls) and set(calls) <= _MOVES | _WALKS and not _WALKS.issuperset(calls)
    return False


_COMPOUND = (
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.If,
    ast.With,
    ast.AsyncWith,
    ast.Try,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
)
"""Statements that hold others: the line's own statement is the simple one inside them."""


def _called(func: ast.expr) -> str:
    """The name a call's function goes by: ``x.to`` is ``to``, ``jax.device_put`` ``device_put``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _stored(name: ast.Name) -> bool:
    return isinstance(name.ctx, ast.Store)


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
