"""The verdict: which cost bounds the cell, where in its code, why, and which fix; as data.

Drawn from the step-time breakdown (:mod:`.breakdown`) and the summary's own figures,
with these thresholds (shares of step time; of the cell's busy time without steps):

- ``input``: at least 20% is "highly input-bound", XProf's own threshold
  (``op_stats_to_input_pipeline_analysis.cc``), and wins over every other category; 5% to
  20% is XProf's "moderately", said as a secondary note;
- otherwise the largest category wins, when it holds at least :data:`MIN_SHARE` (20%);
  ``device`` is the healthy case and raises no alarm; below that (the time went nowhere
  measured) the verdict is ``unknown``;
- a cell whose breakdown covers less than :data:`MIN_CELL_S` (10 ms) has no bottleneck worth
  acting on: ``unknown``, and no headline (a one-line ``x = 1`` is not "host-bound");
- a step is ``mixed`` (no single bottleneck) when its largest category holds less than
  :data:`MIXED_LEADER` (half) or the runner-up is within :data:`MIXED_MARGIN` (10 points)
  of it: the verdict is then the category, of those holding at least :data:`MIXED_NAMED`
  (15%), whose fix is cheapest (:data:`CHEAPEST_FIRST`: a loader's option, a sync or a
  copy before the way the step is compiled, the step's own code, the device's own compute
  last).

Every verdict carries what removing its time would gain (:mod:`.gain`): a step's time now
and without it, bounded below by the device's busy time; ``unknown`` that of its largest
category.

A compile verdict names its cause: a ``growing graph`` when the steps compiled again and
again and the loop never synced (a backend with lazy graphs), ``changing shapes`` when the
input shapes changed between steps (the loop's items' shapes; else the compiled programs'
shapes, for tensors made inside the step: :mod:`.causes`), ``changing values`` when the
programs compiled again with the same shapes (a Python number baked into the graph),
``warm-up`` when only the first steps compiled, and ``first run`` when a cell without steps
(no loop: one-off eager calls) spent its time compiling what it ran for the first time,
which is no alarm.

A transfer verdict's cause is ``host offload`` when at least :data:`HOST_OFFLOAD` (half) of
the cell's transfer time is the chip's own host-offload copies
(:attr:`~xprof_magic._analysis.model.diagnosis.Breakdown.offload_s`): the chip waits for arrays
in host memory, which no host-side advice fixes. ``busy`` is the chip's busy time (compute
and its own waits: collectives, infeed, outfeed, host-offload copies), not the ``device``
(compute) column alone.

The verdict decides and the render stage words it
(:mod:`~xprof_magic._analysis.render.headline`): this module writes no sentence. The
thresholds are the model's (:mod:`~xprof_magic._analysis.model.diagnosis`), which the
renderers read too.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import replace

from xprof_magic._analysis.diagnosis import steady
from xprof_magic._analysis.diagnosis.attribution import (
    Launch,
    StepActivity,
    callable_name,
    where_launched,
)
from xprof_magic._analysis.diagnosis.breakdown import INPUT_PREFIX
from xprof_magic._analysis.diagnosis.causes import Changes, compile_changes
from xprof_magic._analysis.diagnosis.gain import gain_of
from xprof_magic._analysis.diagnosis.idle import idle_time
from xprof_magic._analysis.diagnosis.own import Sampled, held_by
from xprof_magic._analysis.model.categories import BREAKDOWN, as_cause, as_verdict
from xprof_magic._analysis.model.diagnosis import (
    CHEAPEST_FIRST,
    HIGHLY_INPUT,
    HOST_OFFLOAD,
    MIN_CELL_S,
    MIN_SHARE,
    MIXED_LEADER,
    MIXED_MARGIN,
    MIXED_NAMED,
    Breakdown,
    Diagnosis,
    Gain,
)
from xprof_magic._analysis.model.summary import LabelRow, Summary
from xprof_magic._analysis.summary.blocks import is_loop, line_of
from xprof_magic._analysis.summary.where import label_at, method_call_line
from xprof_magic._analysis.timeline.facts import OFFLOAD, device_side
from xprof_magic._analysis.timeline.programs import Program
from xprof_magic._backends import Vocabulary
from xprof_magic._backends.registry import capabilities

__all__ = ["diagnose"]

_CANDIDATES = tuple(c for c in BREAKDOWN if c not in ("input", "idle"))
"""The categories a verdict may name by :data:`MIN_SHARE` (input has a rule of its own)."""

FEW_CORES = 2
"""The most cores a machine has whose loader's workers would share them with the step (its
own host thread, a CPU device's): there a wait for batches made on the loop's thread is fixed by
making them cheaper, not elsewhere (cause ``few cores``). On this project's 2-core machine two
workers slowed such a loop by 5 to 48% (``bench device-truth``, kind ``xla_loader``)."""

ON_CPU = 0.5
"""The least share of the looks at the loop's waits for a batch in which its thread ran on a CPU
for the batches to count as made on that thread (:meth:`.own.Sampled.waits_on_cpu`)."""

WORKERS_BUSY = 0.5
"""The least CPU time a loader's workers (the cell's child processes) use, as a share of the
cell's wait for their batches, on a machine of at most :data:`FEW_CORES` cores, for that wait to
be cause ``busy workers``: they compute rather than wait (on a store), and more of them would
share the same cores. Measured on 2 cores: two workers tokenizing used 0.7–1.5 times the wait,
four reading a store 0.2 (``Sampled.workers_s``)."""


def diagnose(
    s: Summary,
    words: Vocabulary,
    parts: Breakdown,
    *,
    step_rule: str = "",
    shapes: Sequence[str] = (),
    source: str = "timeline",
    launched: Launch | None = None,
    programs: Sequence[Program] = (),
    activity: StepActivity | None = None,
    looks: Sampled | None = None,
    device_loader: bool = False,
) -> Diagnosis:
    """The diagnosis of summary ``s`` from its breakdown ``parts``.

    A host verdict whose time is mostly the user's own Python says so (cause ``making batches`` or
    ``own code``), at the line that holds it.

    Args:
        step_rule: how the capture found the steps (``sync``: the loop synced).
        shapes: the input shapes seen.
        source: what ``parts`` was measured from (``timeline`` or ``metadata``).
        launched: the block that launched most of the device's time (:mod:`.attribution`).
        programs: the compiled programs the timeline holds (:mod:`.causes`).
        activity: each step's launches and reads (:func:`.attribution.activity`).
        looks: the cell's thread sampled (:func:`.own.sampled`).
        device_loader: the framework's own loader fed the loop (its traces are on the timeline:
            torch_xla's MpDeviceLoader), so a wait for its batches is cause ``device loader``,
            whose fix is its DataLoader's, never "load through MpDeviceLoader".
    """
    if s.memory.oom is not None:
        return _out_of_memory(s, parts, source)
    if not parts.categories or parts.total_s() <= 0:
        return Diagnosis(breakdown=parts, source=source)
    in_scope = steady.scope(parts)
    of_loop = bool(parts.steps) and in_scope == "steps"
    if parts.total_s(of_loop) < MIN_CELL_S:
        share = {c: parts.share(c, of_loop) for c in parts.categories}
        basis = parts if of_loop else replace(parts, steps=())
        return Diagnosis(
            breakdown=parts, source=source, gain=_largest_gain(basis, share), scope=in_scope
        )
    warm_up = _warm_up(s, parts)
    unlike = (
        steady.unlike(parts, warm_up, s.steps.compiling if s.steps else ())
        if in_scope == "steps"
        else ()
    )
    apart = (*unlike, *steady.outside(s, parts, in_scope))
    frame = Diagnosis(breakdown=parts, warm_up=warm_up, apart=apart, scope=in_scope)
    basis = frame.basis()
    of_steps = bool(basis.steps)
    read_back = steady.read_back(s, parts, frame.steady(), activity) if of_steps else None
    share = {c: basis.share(c, of_steps) for c in basis.categories}
    shares = tuple((c, share[c]) for c in basis.categories if c != "idle")
    verdict = "input" if share["input"] >= HIGHLY_INPUT else ""
    if not verdict:
        best = max(_CANDIDATES, key=lambda c: share[c])
        verdict = best if share[best] >= MIN_SHARE else "unknown"
    if verdict == "unknown":
        return replace(
            frame,
            share=None,
            shares=shares,
            source=source,
            gain=_largest_gain(basis, share),
            read_back=read_back,
        )
    mixed, verdict = mixed_step(share, verdict)
    cause, changes = "", Changes()
    if verdict == "compile":
        cause = _cause(s, words, step_rule, shapes)
        changes = compile_changes(cause, shapes, programs, _compiled(s))
        cause = changes.cause or cause
    transfer_s = parts.seconds("transfer", of_steps=False)
    if verdict == "transfer" and transfer_s > 0 and parts.offload_s >= HOST_OFFLOAD * transfer_s:
        cause = "host offload"
    if verdict == "host":
        cause = _host_cause(parts, frame.steady(), activity, words, s.cell)
    own, theirs, whose, part = held_by(verdict, looks, frame.steady(), s.cell, basis)
    cause = whose or cause
    input_cause = _input_cause(device_loader, looks, parts.seconds("input", of_steps=False))
    if verdict == "input" and not cause:
        cause = input_cause
    where, line = _where(s, verdict, of_steps)
    held = own or theirs
    if held is not None and held.line and held.statement and cause != "eager shapes":
        outer = where[:1] if where and where[0] != held.statement and of_steps else ()
        where, line = (*outer, held.statement), held.line
    program = ""
    eager = _eager_call(s) if cause == "changing shapes" else None
    if eager is not None:
        cause, program, (where, line) = "eager shapes", eager[0], ((*where, eager[2]), eager[1])
    if verdict == "device" and launched is not None:
        row = _label_row(s, launched.path)
        if row:
            (where, line), program = where_launched(s.cell, row, launched), launched.program
    return replace(
        frame,
        verdict=as_verdict(verdict),
        share=share[verdict],
        where=where,
        line=line,
        cause=as_cause(cause),
        shapes=changes.shapes if cause == "changing shapes" else (),
        level="info" if verdict == "device" or cause in ("warm-up", "first run") else "warning",
        shares=shares,
        busy=_chip_busy(parts, share),
        offloaded=_offloaded(s) if cause == "host offload" else (),
        source=source,
        program=program,
        mixed=mixed,
        runner_up=runner_up(share, verdict),
        gain=gain_of(basis, verdict, cause, part, *_machine(looks)),
        changed=changes.changed,
        changed_in=changes.found_in,
        read_back=read_back,
        own=own,
        framework=theirs,
        idle=idle_time(basis, looks, frame.steady(), _where(s, "input", of_steps)[1]),
        input_cause=as_cause(input_cause),
    )


def _input_cause(device_loader: bool, looks: Sampled | None, waited_s: float) -> str:
    """The cause a wait for the next batch has, whatever the verdict.

    ``device loader`` where the framework's loader fed the loop; on a machine of at most
    :data:`FEW_CORES` cores, whose workers would share them with the step, ``few cores`` where
    the loop's own thread made the batches (in the loader's ``next()``: its collate_fn, its
    Dataset), ``busy workers`` where the loop waited ``waited_s`` (the cell's input seconds) on
    workers that computed for :data:`WORKERS_BUSY` of it or more.
    """
    if device_loader:
        return "device loader"
    if looks is None or not 0 < looks.cpus <= FEW_CORES:
        return ""
    if looks.waits_on_cpu() >= ON_CPU:
        return "few cores"
    busy = waited_s > 0 and looks.workers_s >= WORKERS_BUSY * waited_s
    return "busy workers" if busy else ""


def _machine(looks: Sampled | None) -> tuple[int, float]:
    """The cores the cell could use, and the share of its waits for a batch spent on a CPU."""
    if looks is None:
        return 0, 1.0
    return looks.cpus, looks.waits_on_cpu()


def _eager_call(s: Summary) -> tuple[str, int, str] | None:
    """The library function that compiled 3 times or more because the cell calls it outside ``jit``.

    It is called outside any compiled function (``jnp.pad(x, …)`` compiles ``jit(_pad)`` for each
    new shape): its compiled name, and the cell line and statement that call it. None when the
    recompiled functions are the cell's own.
    """
    for name, count, _ in sorted(s.compiles.functions, key=lambda f: -f[1]):
        if count < 3:
            break
        inner = name[4:-1] if name.startswith("jit(") and name.endswith(")") else name
        bare = inner.lstrip("_")
        if not bare.isidentifier() or re.search(rf"\bdef\s+{re.escape(inner)}\b", s.cell):
            continue
        number, text = method_call_line(s.cell, bare)
        if number:
            return name, number, text
    return None


EAGER_LAUNCHES = 8
"""Program launches a step needs to be eager code: a compiled step launches one or two."""


def _host_cause(
    parts: Breakdown,
    steady_steps: Sequence[int],
    activity: StepActivity | None,
    words: Vocabulary,
    cell: str,
) -> str:
    """Why a host-bound step is: ``eager``, ``compiled step``, or "" where launches do not tell.

    ``eager`` when the steps that hold most of the time launch :data:`EAGER_LAUNCHES` named programs
    or more each (an op at a time), or when the program they launch most is one the cell never calls
    by name (an operator's, ``v * 2`` launching ``multiply``); ``compiled step`` when they launch
    fewer, of a function the cell calls (it already runs as one compiled call, so the host's own
    Python around it is the cost); "" where launches name no program or are not known.
    """
    if activity is None or len(activity.named) != len(parts.steps) or not steady_steps:
        return ""
    if not any(p.endswith("(") for p in words.timeline.launches):
        return ""
    longest = sorted(steady_steps, key=lambda i: -parts.steps[i].total_s)
    half = 0.5 * sum(parts.steps[i].total_s for i in longest)
    held, heavy = 0.0, []
    for i in longest:
        heavy.append(activity.named[i])
        held += parts.steps[i].total_s
        if held >= half:
            break
    typical = statistics.median(heavy)
    if typical >= EAGER_LAUNCHES:
        return "eager"
    if typical < 1 or not activity.program:
        return ""
    name = callable_name(activity.program)
    called = bool(name) and re.search(rf"(?<![\w.]){re.escape(name)}\s*\(", cell) is not None
    return "compiled step" if called else "eager"


def _out_of_memory(s: Summary, parts: Breakdown, source: str) -> Diagnosis:
    """The cell ran out of device memory: that is the verdict, whatever its time did.

    Where it happened (``where``, ``line``) is the cell's line of XLA's largest allocation, when it
    is the cell's.
    """
    oom = s.memory.oom
    assert oom is not None
    at = next((a.cell_line for a in oom.allocations if a.cell_line), 0)
    statement = label_at(s.cell, at)
    where = (statement,) if statement else ()
    return Diagnosis(
        verdict="memory",
        where=where,
        line=at if where else 0,
        level="error",
        breakdown=parts,
        source=source,
    )


def mixed_step(share: dict[str, float], verdict: str) -> tuple[bool, str]:
    """Whether the step has no single bottleneck, and the category to act on.

    The category is ``verdict``, or for a mixed step the one of its categories holding at least
    :data:`MIXED_NAMED` that is cheapest to remove (:data:`CHEAPEST_FIRST`).
    """
    ranked = sorted(("input", *_CANDIDATES), key=lambda c: -share[c])
    leader, second = ranked[0], ranked[1]
    if share[leader] >= MIXED_LEADER and share[leader] - share[second] > MIXED_MARGIN:
        return False, verdict
    named = [c for c in CHEAPEST_FIRST if share.get(c, 0.0) >= MIXED_NAMED]
    return True, named[0] if named else verdict


def runner_up(share: dict[str, float], verdict: str) -> str:
    """The largest category besides ``verdict`` ("" when no other holds any time)."""
    others = [c for c in ("input", *_CANDIDATES) if c != verdict and share[c] > 0]
    return max(others, key=lambda c: share[c]) if others else ""


def _largest_gain(basis: Breakdown, share: dict[str, float]) -> Gain | None:
    """For a step with no verdict: what removing its largest category would gain."""
    largest = max(("input", *_CANDIDATES), key=lambda c: share.get(c, 0.0))
    return gain_of(basis, largest)


def _warm_up(s: Summary, parts: Breakdown) -> int:
    """How many first steps to leave out of the verdict.

    Those that compiled, when only the first one or two did and at least three steps follow (the
    steady state is the fact).
    """
    steps = s.steps
    if steps is None or not steps.compiling or len(parts.steps) != steps.count:
        return 0
    first = max(steps.compiling) + 1
    if first <= 2 and steps.count - first >= 3:
        return first
    return 0


def _compiled(s: Summary) -> int:
    """How many compilations the capture's timeline holds (the backend's count without)."""
    c = s.compiles
    return c.trace_count if c.trace_count is not None else c.count or 0


def _cause(s: Summary, words: Vocabulary, step_rule: str, shapes: Sequence[str]) -> str:
    steps = s.steps
    compiling = len(steps.compiling) if steps else 0
    count = steps.count if steps else 0
    if steps is not None and compiling and all(i < 2 for i in steps.compiling) and count > 3:
        return "warm-up"
    if len(set(shapes)) >= 2:
        return "changing shapes"
    again = compiling >= 3 or (s.compiles.count or 0) >= 3
    if capabilities(words.backend).lazy_graph and again and step_rule != "sync":
        return "growing graph"
    if not count:
        return "first run"
    return ""


def _where(s: Summary, verdict: str, of_steps: bool) -> tuple[tuple[str, ...], int]:
    """The label path that carries the verdict's time, and the cell line it starts at.

    A verdict ``of_steps`` is about the loop that ran them.
    """
    rows = [r for r in s.labels if not r.thread and r.kind in ("label", "trace")]
    inputs = [r for r in rows if r.path[-1].startswith(INPUT_PREFIX)]
    pick: LabelRow | None = None
    if verdict == "input" and inputs:
        pick = max(inputs, key=lambda r: r.total_s)
        path = pick.path[:-1] or pick.path
        return path, line_of(s.cell, path)
    # A verdict on steps is about the loop that ran them, not the statements before it.
    stepped = of_steps and s.steps is not None and bool(s.steps.durations_s)
    if verdict == "compile":
        sites = [site for site in s.compiles.sites if site.first_steps or not stepped]
        sites.sort(key=lambda site: -site.total_s)
        if sites:
            return sites[0].path, line_of(s.cell, sites[0].path)
    work = [r for r in rows if r not in inputs]
    if stepped:
        work = [r for r in work if any(map(is_loop, r.path))] or work
    leaves = [r for r in work if not any(o.path[: len(r.path)] == r.path and o != r for o in work)]
    if leaves:
        pick = max(leaves, key=lambda r: r.total_s)
        return pick.path, line_of(s.cell, pick.path)
    return (), 0


def _label_row(s: Summary, path: tuple[str, ...]) -> tuple[str, ...]:
    """The longest start of ``path`` that is a label (or user trace) row of the cell's thread.

    A user's step marker around it (``xp.StepTrace``) is no statement; () if none.
    """
    rows = {r.path for r in s.labels if not r.thread and r.kind in ("label", "trace")}
    return next((path[:k] for k in range(len(path), 0, -1) if path[:k] in rows), ())


def _chip_busy(parts: Breakdown, share: dict[str, float]) -> float:
    """The device's busy share: ``device`` (compute) and the chip's own part of each other category.

    That part is what the chip's own ops held in the cell (:attr:`Breakdown.on_device`).
    """
    busy = share["device"]
    for at, held in enumerate(parts.on_device):
        whole = parts.cell[at]
        if held > 0 and whole > 0:
            busy += share[parts.categories[at]] * min(1.0, held / whole)
    return busy


_HLO = re.compile(r"^%?(?P<op>[\w.\-]+) = (?P<shape>[a-z0-9]+\[[\d,]*\])")


def _offloaded(s: Summary) -> tuple[tuple[str, str], ...]:
    """The chip's host-offload copies in the device-op table, longest first.

    Each op (as the graph viewer names it) and the HLO shape of the array it moves.
    """
    found: list[tuple[str, str]] = []
    for row in sorted(s.device_ops, key=lambda r: -r.self_s):
        match = _HLO.match(row.name)
        if match is not None and device_side(None, row.name) == OFFLOAD:
            found.append((match["op"], match["shape"]))
    return tuple(found)
