"""The diagnosis in words: its headline, its fix in the backend's words, its evidence.

The diagnosis stage decides (:mod:`~xprof_magic._analysis.diagnosis.verdict`: the category,
its share and every other's, the cause, where in the cell, the chip's busy share, the
offloaded arrays); this module says it, when the summary is shown: :func:`said`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xprof_magic._analysis.model.categories import (
    CHEAPEST_FIRST,
    FEW_CORES_CAUSES,
    KIND,
    WORDED_CAUSES,
)
from xprof_magic._analysis.model.diagnosis import MIN_CELL_S, Diagnosis
from xprof_magic._analysis.render.idle import idle_words
from xprof_magic._analysis.render.memory_section import oom_headline
from xprof_magic._backends import Vocabulary
from xprof_magic._backends.registry import get_vocabulary
from xprof_magic._units import counted, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.summary import Summary

__all__ = [
    "Said",
    "changes",
    "evidence",
    "fix",
    "gained",
    "headline",
    "said",
    "speedup",
    "split",
]

TITLED = frozenset(CHEAPEST_FIRST)
"""The verdicts a headline is written for: every category's but idle."""


@dataclass(frozen=True)
class Said:
    """A verdict in words: its headline, the fix, and the evidence.

    ``headline``: the summary's first note after the device line, at ``level``; ``fix``: one
    sentence of advice in the backend's words; ``evidence``: the numbers behind it as
    ``(name, value)`` text pairs.
    """

    headline: str = ""
    fix: str = ""
    evidence: tuple[tuple[str, str], ...] = ()
    level: str = "info"


def said(s: Summary) -> Said:
    """The verdict of summary ``s`` in its backend's words: headline, fix and evidence.

    The ``headline`` the summary shows first, the ``fix`` and the ``evidence``, made now from its
    figures (a summary saved with its words, schema 2: those words).
    """
    d = s.diagnosis
    if s.saved_words is not None:
        saved = s.saved_words
        return Said(saved.headline, saved.fix, saved.evidence, d.level)
    if d == Diagnosis():  # nothing to measure against: no timeline, no wall time
        return Said(level=d.level)
    words = get_vocabulary(s.backend)
    advice = fix(d, words)
    if d.verdict == "memory":
        return Said(oom_headline(s, d, advice), advice, evidence(d), d.level)
    read = words.advice.fixes.get("sync", "") if d.read_back is not None else ""
    return Said(headline(s, d, advice, read), advice, evidence(d), d.level)


def fix(d: Diagnosis, words: Vocabulary) -> str:
    """The vocabulary's advice for the diagnosis's cause, else for its verdict."""
    fixes = words.advice.fixes
    for key in d.advice_keys():
        if fixes.get(key):
            return fixes[key]
    return ""


def evidence(d: Diagnosis) -> tuple[tuple[str, str], ...]:
    """The numbers behind the verdict, as ``(name, value)`` text pairs."""
    parts = d.breakdown
    source = (("source", "metadata (timeline pending)"),) if d.source == "metadata" else ()
    if not parts.categories or parts.total_s() <= 0:
        return source
    if not d.shares:
        short = ("cell time", f"{seconds(parts.total_s())}, under {seconds(MIN_CELL_S)}")
        return (short, *source)
    basis = d.basis()
    of_steps = bool(basis.steps)
    what = counted(basis.step_count, "step") if of_steps else "the cell"
    out = [("time", f"{seconds(basis.total_s(of_steps))} of {what}")]
    out += [
        (c, f"{d.share_of(c):.0%} ({seconds(basis.seconds(c, of_steps))})")
        for c in basis.categories
        if c != "idle" and basis.seconds(c, of_steps) > 0
    ]
    if d.warm_up and d.verdict != "unknown":
        out.append(("warm-up steps", str(d.warm_up)))
    if d.mixed:
        out.append(("no single bottleneck", f"{split(d)}; runner-up {d.runner_up}"))
    g = d.gain
    if g is not None and g.step_s > 0:
        name = "device alone" if g.category == "device" else f"without {g.category}"
        times = f"{seconds(g.without_s)} instead of {seconds(g.step_s)} ({speedup(g.speedup)})"
        out.append((name, times))
    return (*out, *source)


def _percent(value: float) -> str:
    return f"{value:.0%}" if value >= 0.01 or value == 0 else "<1%"


def headline(s: Summary, d: Diagnosis, advice: str, read_fix: str = "") -> str:
    """The verdict in one paragraph, ending with ``advice`` (the fix), then what it leaves out.

    What it leaves out is :func:`asides`; a read-back each step is said before the advice, with
    ``read_fix``; "" for ``unknown``.
    """
    if d.verdict not in TITLED:
        return ""
    each = "of each step" if d.basis().steps else "of the cell's time"
    if d.warm_up:
        each += f" after the {'first' if d.warm_up == 1 else f'first {d.warm_up}'} (compiling)"
    where = f" (`{d.where[-1]}`, line {d.line})" if d.where and d.line else ""
    if d.where and not d.line:
        where = f" (`{d.where[-1]}`)"
    if d.program and d.verdict == "device":
        where = _launched(d)
    if d.cause == "eager shapes":
        where = f" (`{d.where[-2]}`)" if len(d.where) > 1 else ""
    if d.mixed:
        text = f"No single bottleneck: {split(d)} {each}" + _cheapest(d, where)
    else:
        title = KIND[d.verdict].title
        if d.verdict == "input":
            title += " (highly, XProf's ≥ 20%)"
        own = WORDED_CAUSES.get(d.cause)
        what = own.what if own is not None else KIND[d.verdict].what
        text = f"{title}: {_percent(d.share or 0.0)} {each} {what}{where}"
    if d.verdict == "compile":
        text += _compiled(s, d)
    if d.cause == "host offload":
        text += (
            f", most of it ({seconds(d.breakdown.offload_s)}) the chip waiting for its "
            f"host-offload copies{_offloaded(d.offloaded)}"
        )
    if d.verdict == "transfer" and (s.to_device or s.from_device):
        moved = sum((t.bytes or 0.0) for t in (s.to_device, s.from_device) if t is not None)
        if moved:
            text += f", {moved / 1e6:,.0f} MB moved"
    idle = idle_words(d, each)
    if d.verdict != "device":
        text += f"; the device is busy {_percent(d.busy)}"
        if d.breakdown.on_device:
            text += f", computing {_percent(d.share_of('device'))}"
        text += f", {idle}" if idle else ""
    elif idle:
        text += f"; the device is {idle}"
    if d.verdict == "device" and d.read_back is not None:
        # The cheaper fix first, and the model's own compute is not yet the limit.
        parts: tuple[str, ...] = (f"{text}.", read_back(d), read_fix, asides(d))
    else:
        parts = (f"{text}.", gained(d), read_back(d), read_fix, advice, asides(d))
    return " ".join(part for part in parts if part)


_HELD = {
    "input": "waiting for data",
    "host": "on the host",
    "compile": "compiling",
    "transfer": "copying between host and device",
    "sync": "waiting for the device",
    "device": "on the device",
    "collective": "in collectives",
    "idle": "idle",
}


def asides(d: Diagnosis) -> str:
    """What the verdict leaves out, named.

    The steps unlike the others (with what held them), the statements outside the steps (or the
    loop, for a verdict on the cell).
    """
    out = []
    slow = [a for a in d.apart if a.step >= 0]
    if slow:
        basis = d.basis().steps
        median = sorted(st.total_s for st in basis)[len(basis) // 2] if basis else 0.0
        named = []
        for a in slow[:3]:
            number = d.breakdown.steps[a.step].step
            times = f", {a.seconds / median:.0f}× the median {seconds(median)}" if median else ""
            held = f"{a.held_s / a.seconds:.0%} {_HELD[a.category]}" if a.seconds else ""
            if a.step == d.warm_up and d.warm_up and a.category in ("device", "sync"):
                held += ": the first run of what the warm-up compiled"
            named.append(f"step {number} ({seconds(a.seconds)}{times}; {held})")
        more = f" and {len(slow) - 3} more" if len(slow) > 3 else ""
        out.append(f"Left out as unlike the others: {', '.join(named)}{more}.")
    for a in (a for a in d.apart if a.step < 0):
        at = f" (line {a.line})" if a.line else ""
        share = a.seconds / d.breakdown.cell_s if d.breakdown.cell_s else 0.0
        most = f", most of it {_HELD[a.category]} ({seconds(a.held_s)})" if a.held_s else ""
        if d.scope == "cell":
            out.append(
                f"The loop's steps, `{a.path[-1]}`{at}, are {share:.0%} of the cell "
                f"({seconds(a.seconds)}){most}."
            )
        else:
            out.append(
                f"Outside the steps, `{a.path[-1]}`{at} took {seconds(a.seconds)} "
                f"({share:.0%} of the cell){most}."
            )
    return " ".join(out)


def read_back(d: Diagnosis) -> str:
    """The steps' read-back, with what dropping it would gain."""
    r = d.read_back
    if r is None:
        return ""
    where = f" (`{r.call}`, line {r.line})" if r.call else f" (line {r.line})" if r.line else ""
    times = r.step_s / r.without_s if r.without_s > 0 else float("inf")
    estimate = (
        f"without the reads those steps would take about {seconds(r.without_s)} instead of "
        f"{seconds(r.step_s)} ({speedup(times)})"
    )
    if r.shared:
        estimate = (
            f"on an accelerator, {estimate}, but here the device is this machine's CPU, whose "
            "cores the host's work shares, so reading less may gain little"
        )
    return (
        f"{r.steps} of {r.of} steps read a value back from the device{where}: the host waits "
        f"there and launches nothing meanwhile, so the device idles between steps; {estimate}."
    )


def split(d: Diagnosis) -> str:
    """The step's categories of 5% or more, largest first.

    ``device 39%, transfers 34%, host 27%``.
    """
    ranked = sorted((c for c, share in d.shares if share >= 0.05), key=lambda c: -d.share_of(c))
    return ", ".join(f"{KIND[c].noun} {d.share_of(c):.0%}" for c in ranked[:4])


def _cheapest(d: Diagnosis, where: str) -> str:
    """The category of a mixed step the verdict names, and why it is the one.

    A cause with words of its own (:data:`WORDED_CAUSES`) is named in them, as a step with one
    bottleneck names it: the host's time around a compiled step is no graph building.
    """
    if d.verdict == "device":
        return f"; the largest is the device's own compute{where}"
    own = WORDED_CAUSES.get(d.cause)
    what = f"the time that {own.what}" if own is not None else KIND[d.verdict].without
    return f". Cheapest to remove: {what}{where}"


def gained(d: Diagnosis) -> str:
    """What removing the verdict's time would leave of a step, and the speed-up.

    For ``device``, the most that a fix outside the model would gain.
    """
    g = d.gain
    if g is None or g.step_s <= 0 or d.verdict not in TITLED:
        return ""
    steps = bool(d.basis().steps)
    unit = "a step" if steps else "the cell"
    # The mean of the steps the verdict is about, as the gain measures it (not the median
    # the steps' line gives): said so.
    mean = " on average" if steps else ""
    times = f"{seconds(g.without_s)} instead of {seconds(g.step_s)}{mean}"
    if g.category == "device":
        rest = 1 - g.without_s / g.step_s
        if rest < 0.05:
            return f"Everything else is under 5% of {unit}, so the gain lies in the model."
        return (
            f"Everything else is {rest:.0%} of {unit}: without it {unit} would take about "
            f"{times} ({speedup(g.speedup)}); beyond that the gain lies in the model."
        )
    own = WORDED_CAUSES.get(d.cause)
    removed = own.removed if own is not None else KIND[g.category].without
    if d.cause in FEW_CORES_CAUSES and g.cores:
        who = (
            "The loop's own thread makes the batches, and workers would share"
            if d.cause == "few cores"
            else "The loader's workers keep the cores busy already: more of them would share"
        )
        return (
            f"{who} this machine's {counted(g.cores, 'core')} with the step: made once before "
            f"the loop, {unit} would take about {times} ({speedup(g.speedup)})."
        )
    if g.cores:
        # The wait's fix moves the batches' work to other cores, which this machine has few of.
        return (
            f"Made by workers, the batches still need this machine's {counted(g.cores, 'core')}"
            f" beside the step: {unit} would take about {times} ({speedup(g.speedup)})."
        )
    return f"Without {removed} {unit} would take about {times} ({speedup(g.speedup)})."


def speedup(times: float) -> str:
    """``7×``, ``1.5×``; ``over 100×``."""
    if times >= 100:
        return "over 100×"
    return f"{times:.0f}×" if times >= 10 else f"{times:.1f}×"


def _launched(d: Diagnosis) -> str:
    """The program the device ran, and the statement that launched it (not one that waited for it).

    As `` (`PjitFunction(train)`, launched by `W = train(W, x)`, line 3)``.
    """
    if not d.where:
        return f" (`{d.program}`)"
    at = f", line {d.line}" if d.line else ""
    return f" (`{d.program}`, launched by `{d.where[-1]}`{at})"


def _compiled(s: Summary, d: Diagnosis) -> str:
    """How many compilations, and why they happened (the cause)."""
    text = ""
    c = s.compiles
    if c.count:
        noun = "compilation" if c.count == 1 else "compilations"
        text += f", {c.count} {noun} ({seconds(c.total_s or 0.0)})"
    if d.cause == "growing graph":
        text += "; the loop never syncs, so its pending graph grows and compiles every step"
    elif d.cause in ("changing shapes", "changing values"):
        text += f"; {changes(d)}"
    elif d.cause == "eager shapes":
        at = f" (`{d.where[-1]}`, line {d.line})" if d.where and d.line else ""
        n = next((count for name, count, _ in c.functions if name == d.program), 0)
        again = f": {d.program} {n} times" if n else ""
        text += (
            f"; an op called outside the compiled step{at} compiles again for each new input "
            f"shape{again}"
        )
    elif d.cause == "warm-up":
        text += "; only the first steps compiled (warm-up)"
    elif d.cause == "first run":
        text += "; the cell has no steps, so this is its programs compiling on first use"
    return text


_CHANGED_IN = {
    "items": "the input shapes changed",
    "program inputs": "the shapes of the compiled step's inputs changed (tensors made in the loop)",
    "program outputs": "the shapes of a tensor the compiled step makes changed",
    "program constants": "a Python number baked into the compiled step changed",
}


def changes(d: Diagnosis) -> str:
    """What changed between the compilations: each input once, with its shapes, or the baked values.

    Shapes in order: ``input_ids (8, 20) → (8, 36) → …``.
    """
    if d.changed_in == "programs" or (d.cause == "changing values" and not d.changed):
        return (
            "the compiled step's shapes stayed the same, so a Python number baked into it "
            "changed (an index, a slice bound, an exponent)"
        )
    listed = d.changed or (("", d.shapes),)
    what = "; ".join(
        (f"{name} " if name else "") + " → ".join(order[:6]) + (" → …" if len(order) > 6 else "")
        for name, order in listed[:3]
    )
    return f"{_CHANGED_IN.get(d.changed_in, _CHANGED_IN['items'])}: {what}"


def _offloaded(copies: tuple[tuple[str, str], ...]) -> str:
    """The arrays the chip's longest host-offload copies move, and those ops.

    `` of <shapes> (`op`, `op`, …)``; else `` (arrays in host memory)``.
    """
    if not copies:
        return " (arrays in host memory)"
    ops = [op for op, _ in copies]
    shapes = list(dict.fromkeys(shape for _, shape in copies))
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
