"""The verdict: which cost bounds the cell, where in its code, why, and the fix.

Drawn from the step-time breakdown (:mod:`.breakdown`) and the summary's own figures,
with these thresholds (shares of step time; of the cell's busy time without steps):

- ``input``: at least 20% is "highly input-bound", XProf's own threshold
  (``op_stats_to_input_pipeline_analysis.cc``), and wins over every other category; 5% to
  20% is XProf's "moderately", said as a secondary note;
- otherwise the largest category wins, when it holds at least :data:`MIN_SHARE` (20%);
  ``device`` is the healthy case and raises no alarm; below that (the time went nowhere
  measured) the verdict is ``unknown``;
- a cell whose breakdown covers less than :data:`MIN_CELL_S` (10 ms) has no bottleneck worth
  acting on: ``unknown``, and no headline (a one-line ``x = 1`` is not "host-bound").

A compile verdict names its cause: a ``growing graph`` when the steps compiled again and
again and the loop never synced (a backend with lazy graphs), ``changing shapes`` when the
input shapes changed between steps, ``warm-up`` when only the first steps compiled, and
``first run`` when a cell without steps (no loop: one-off eager calls) spent its time compiling
what it ran for the first time, which is no alarm.

A transfer verdict's cause is ``host offload`` when at least :data:`HOST_OFFLOAD` (half) of
the cell's transfer time is the chip's own host-offload copies
(:attr:`~xprof_magic._analysis.model.diagnosis.Breakdown.offload_s`): the chip waits for arrays
in host memory, which no host-side advice fixes. The headline's "the device is busy" is the
chip's busy time (compute and its own waits: collectives, infeed, outfeed, host-offload
copies), not the ``device`` (compute) column alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from xprof_magic._analysis.diagnosis.breakdown import INPUT_PREFIX, breakdown, from_metrics
from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis
from xprof_magic._analysis.model.summary import LabelRow, Summary
from xprof_magic._analysis.summary.blocks import main_line
from xprof_magic._analysis.timeline.facts import OFFLOAD, TraceFacts, device_side
from xprof_magic._backends import Vocabulary
from xprof_magic._labels import SHAPES_EVENT
from xprof_magic._metadata import RunMetadata
from xprof_magic._rewrite import find_markers, label_for
from xprof_magic._units import seconds

__all__ = [
    "HIGHLY_INPUT",
    "HOST_OFFLOAD",
    "MIN_CELL_S",
    "MIN_SHARE",
    "MODERATELY_INPUT",
    "diagnose",
    "from_metadata",
    "from_trace",
]

HIGHLY_INPUT = 0.20
MODERATELY_INPUT = 0.05
MIN_SHARE = 0.20
MIN_CELL_S = 0.010
HOST_OFFLOAD = 0.5
_CANDIDATES = ("host", "compile", "transfer", "sync", "device", "collective")
_WHAT = {
    "input": "waits for the next batch",
    "host": "is Python and graph building on the host",
    "compile": "is compilation",
    "transfer": "copies data between host and device",
    "sync": "waits for the device in mid-step",
    "device": "runs on the device",
    "collective": "waits on collectives between the chips (all-reduce and the like)",
}
_TITLE = {
    "input": "Input-bound",
    "host": "Host-bound",
    "compile": "Compile-bound",
    "transfer": "Transfer-bound",
    "sync": "Sync-bound",
    "device": "Device-bound",
    "collective": "Collective-bound",
}


def diagnose(
    s: Summary,
    words: Vocabulary,
    parts: Breakdown,
    *,
    step_rule: str = "",
    shapes: Sequence[str] = (),
) -> Diagnosis:
    """The diagnosis of summary ``s`` from its breakdown ``parts``; ``step_rule`` is how the
    capture found the steps (``sync``: the loop synced), ``shapes`` the input shapes seen."""
    if not parts.categories or parts.total_s() <= 0:
        return Diagnosis(breakdown=parts)
    if parts.total_s() < MIN_CELL_S:
        short = ("cell time", f"{seconds(parts.total_s())}, under {seconds(MIN_CELL_S)}")
        return Diagnosis(share=None, breakdown=parts, evidence=(short,))
    warm_up = _warm_up(s, parts)
    basis = replace(parts, steps=parts.steps[warm_up:]) if warm_up else parts
    of_steps = bool(basis.steps)
    share = {c: basis.share(c, of_steps) for c in basis.categories}
    verdict = "input" if share["input"] >= HIGHLY_INPUT else ""
    if not verdict:
        best = max(_CANDIDATES, key=lambda c: share[c])
        verdict = best if share[best] >= MIN_SHARE else "unknown"
    if verdict == "unknown":
        return Diagnosis(share=None, breakdown=parts, evidence=_evidence(basis, share, of_steps))
    fixes = words.advice.fixes
    cause = _cause(s, words, step_rule, shapes) if verdict == "compile" else ""
    transfer_s = parts.seconds("transfer", of_steps=False)
    if verdict == "transfer" and transfer_s > 0 and parts.offload_s >= HOST_OFFLOAD * transfer_s:
        cause = "host offload"
    fix = fixes.get(cause) or fixes.get(verdict, "")
    where, line = _where(s, verdict)
    diagnosis = Diagnosis(
        verdict=verdict,
        share=share[verdict],
        where=where,
        line=line,
        evidence=_evidence(basis, share, of_steps)
        + ((("warm-up steps", str(warm_up)),) if warm_up else ()),
        fix=fix,
        cause=cause,
        shapes=tuple(shapes) if cause == "changing shapes" else (),
        level="info" if verdict == "device" or cause in ("warm-up", "first run") else "warning",
        breakdown=parts,
    )
    return _with_headline(diagnosis, s, share, of_steps, warm_up)


def _warm_up(s: Summary, parts: Breakdown) -> int:
    """How many first steps to leave out of the verdict: those that compiled, when only the
    first one or two did and at least three steps follow (the steady state is the fact)."""
    steps = s.steps
    if steps is None or not steps.compiling or len(parts.steps) != steps.count:
        return 0
    first = max(steps.compiling) + 1
    if first <= 2 and steps.count - first >= 3:
        return first
    return 0


def _cause(s: Summary, words: Vocabulary, step_rule: str, shapes: Sequence[str]) -> str:
    steps = s.steps
    compiling = len(steps.compiling) if steps else 0
    count = steps.count if steps else 0
    if steps is not None and compiling and all(i < 2 for i in steps.compiling) and count > 3:
        return "warm-up"
    if len(set(shapes)) >= 2:
        return "changing shapes"
    again = compiling >= 3 or (s.compiles.count or 0) >= 3
    if words.advice.syncs and again and step_rule != "sync":
        return "growing graph"
    if not count:
        return "first run"
    return ""


def _where(s: Summary, verdict: str) -> tuple[tuple[str, ...], int]:
    """The label path that carries the verdict's time, and the cell line it starts at."""
    rows = [r for r in s.labels if not r.thread and r.kind in ("label", "trace")]
    inputs = [r for r in rows if r.path[-1].startswith(INPUT_PREFIX)]
    pick: LabelRow | None = None
    if verdict == "input" and inputs:
        pick = max(inputs, key=lambda r: r.total_s)
        path = pick.path[:-1] or pick.path
        return path, _line_of(s.cell, path)
    if verdict == "compile":
        sites = sorted(s.compiles.sites, key=lambda site: -site.total_s)
        if sites:
            return sites[0].path, _line_of(s.cell, sites[0].path)
    work = [r for r in rows if r not in inputs]
    leaves = [r for r in work if not any(o.path[: len(r.path)] == r.path and o != r for o in work)]
    if leaves:
        pick = max(leaves, key=lambda r: r.total_s)
        return pick.path, _line_of(s.cell, pick.path)
    return (), 0


def _line_of(cell: str, path: tuple[str, ...]) -> int:
    """The cell line (from 1) of the innermost element of ``path`` found in ``cell``: a
    ``# xprof: NAME`` comment's line, or the statement a label was made from."""
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


def _evidence(
    parts: Breakdown, share: dict[str, float], of_steps: bool
) -> tuple[tuple[str, str], ...]:
    basis = f"{parts.step_count} steps" if of_steps else "the cell"
    out = [("time", f"{seconds(parts.total_s(of_steps))} of {basis}")]
    out += [
        (c, f"{share[c]:.0%} ({seconds(parts.seconds(c, of_steps))})")
        for c in parts.categories
        if c != "idle" and parts.seconds(c, of_steps) > 0
    ]
    return tuple(out)


def _percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else "<1%"


def _with_headline(
    d: Diagnosis, s: Summary, share: dict[str, float], of_steps: bool, warm_up: int
) -> Diagnosis:
    each = "of each step" if of_steps else "of the cell's time"
    if warm_up:
        each += f" after the {'first' if warm_up == 1 else f'{warm_up} first'} (compiling)"
    where = f" (`{d.where[-1]}`, line {d.line})" if d.where and d.line else ""
    if d.where and not d.line:
        where = f" (`{d.where[-1]}`)"
    title = _TITLE[d.verdict]
    if d.verdict == "input":
        title += " (highly, XProf's ≥ 20%)"
    text = f"{title}: {_percent(d.share or 0.0)} {each} {_WHAT[d.verdict]}{where}"
    if d.verdict == "compile":
        c = s.compiles
        if c.count:
            noun = "compilation" if c.count == 1 else "compilations"
            text += f", {c.count} {noun} ({seconds(c.total_s or 0.0)})"
        if d.cause == "growing graph":
            text += "; the loop never syncs, so its pending graph grows and compiles every step"
        elif d.cause == "changing shapes":
            text += f"; the input shapes changed: {' → '.join(d.shapes[:6])}"
        elif d.cause == "warm-up":
            text += "; only the first steps compiled (warm-up)"
        elif d.cause == "first run":
            text += "; the cell has no steps, so this is its programs compiling on first use"
    if d.cause == "host offload":
        text += (
            f", most of it ({seconds(d.breakdown.offload_s)}) the chip waiting for its "
            f"host-offload copies{_offloaded(s)}"
        )
    if d.verdict == "transfer" and (s.to_device or s.from_device):
        moved = sum((t.bytes or 0.0) for t in (s.to_device, s.from_device) if t is not None)
        if moved:
            text += f", {moved / 1e6:,.0f} MB moved"
    if d.verdict != "device":
        text += f"; the device is busy {_percent(_chip_busy(d.breakdown, share))}"
        if d.breakdown.on_device:
            text += f", computing {_percent(share['device'])}"
    return replace(d, headline=f"{text}. {d.fix}".strip())


def _chip_busy(parts: Breakdown, share: dict[str, float]) -> float:
    """The device's busy share: ``device`` (compute) and, of each other category, the part
    the chip's own ops held in the cell (:attr:`Breakdown.on_device`)."""
    busy = share["device"]
    for at, held in enumerate(parts.on_device):
        whole = parts.cell[at]
        if held > 0 and whole > 0:
            busy += share[parts.categories[at]] * min(1.0, held / whole)
    return busy


_HLO = re.compile(r"^%?(?P<op>[\w.\-]+) = (?P<shape>[a-z0-9]+\[[\d,]*\])")


def _offloaded(s: Summary) -> str:
    """`` of <shapes> (`op`, `op`, …)``: the arrays the chip's longest host-offload copies
    move, and those ops (as the graph viewer names them), from the device-op table; else
    `` (arrays in host memory)``."""
    shapes: list[str] = []
    ops: list[str] = []
    for row in sorted(s.device_ops, key=lambda r: -r.self_s):
        found = _HLO.match(row.name)
        if found is None or device_side(None, row.name) != OFFLOAD:
            continue
        if found["shape"] not in shapes:
            shapes.append(found["shape"])
        ops.append(found["op"])
    if not ops:
        return " (arrays in host memory)"
    more = ", …" if len(ops) > 3 else ""
    named = ", ".join(f"`{op}`" for op in ops[:3])
    sized = [f"{shape}{_size(shape)}" for shape in shapes[:2]]
    return f" of {' and '.join(sized)} in host memory ({named}{more})"


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f64": 8}
_BYTES |= {"s64": 8, "u64": 8, "c64": 8, "c128": 16}


def _size(shape: str) -> str:
    """`` (5.4 GB)``: an HLO array shape's size (4-byte elements unless named above)."""
    kind, _, dims = shape.partition("[")
    count = 1
    for dim in dims.rstrip("]").split(","):
        count *= int(dim) if dim else 1
    size = count * _BYTES.get(kind, 4)
    if size >= 1e8:
        return f" ({size / 1e9:.1f} GB)"
    return f" ({size / 1e6:.1f} MB)" if size >= 1e5 else f" ({size / 1e3:.1f} KB)"


def from_trace(
    summary: Summary, meta: RunMetadata, words: Vocabulary, facts: TraceFacts
) -> Diagnosis:
    """The breakdown of the cell's thread and the verdict drawn from it."""
    pipeline = words.timeline.input_pipeline
    copy = (
        meta.metrics.metrics.get(words.metrics.host_copy_ns) if words.metrics.host_copy_ns else None
    )
    parts = breakdown(
        facts,
        main_line(facts.blocks, pipeline),
        pipeline,
        untimed_copy_s=copy.total_s / 1e9 if copy else 0.0,
    )
    return diagnose(summary, words, parts, step_rule=meta.step_rule or "", shapes=_shapes(facts))


def from_metadata(summary: Summary, meta: RunMetadata, words: Vocabulary) -> Diagnosis:
    """The verdict from the metadata alone, while the timeline waits (a pending summary):
    the ``next()`` timers and the backend's compile, execute and transfer metrics."""
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
    parts = from_metrics(meta.wall_s or 0.0, measured)
    found = diagnose(summary, words, parts, step_rule=meta.step_rule or "")
    return replace(found, evidence=(*found.evidence, ("source", "metadata (timeline pending)")))


def _shapes(facts: TraceFacts) -> tuple[str, ...]:
    """The input shapes the cell's loop saw, in order, each change once (from the markers
    :func:`xprof_magic._labels.inputs` leaves)."""
    seen: list[str] = []
    for b in sorted(facts.blocks, key=lambda b: b.start):
        if b.name.startswith(SHAPES_EVENT):
            shape = b.name[len(SHAPES_EVENT) :].strip()
            if not seen or seen[-1] != shape:
                seen.append(shape)
    return tuple(seen)
