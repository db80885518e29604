"""A summary as plain text (``text/plain``).

The text form is what terminals, logs and tests read: the headlines first, then one short
section per question. The pieces both forms share (the header line, the steps sentence,
the runtime figures) live here too, so the HTML says the same words.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from xprof_magic._analysis.render.gaps import gaps_said
from xprof_magic._analysis.render.memory_section import memory_lines
from xprof_magic._analysis.render.notes import notes_of
from xprof_magic._backends.registry import get_vocabulary
from xprof_magic._backends.words import XLA_THREAD_ROLES
from xprof_magic._units import NONE, data_size, percent, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.summary import (
        Fallback,
        LabelRow,
        OpRow,
        StepStats,
        Summary,
        ThreadGroup,
        Timed,
    )
    from xprof_magic._backends import Vocabulary

__all__ = [
    "estimated_steps",
    "fallback_hint",
    "header",
    "label_name",
    "op_sections",
    "per_thread",
    "plain",
    "render_text",
    "runtime_parts",
    "spread_steps",
    "steps_line",
    "thread_role",
    "versions_line",
]

TEXT_LABEL_ROWS = 25
TEXT_OPS = 6
_LEVEL_MARK = {"error": "✖", "warning": "!", "info": "·"}
_KIND_TAG = {"trace": " [xp.Trace]", "step": " [step]", "label": ""}
CODE = re.compile(r"`([^`\n]+)`")
"""Code that a note's prose quotes, between backticks (the cell's line, a program)."""


def thread_role(group: ThreadGroup, words: Vocabulary) -> str:
    """What a kind of host thread does, in the backend's words (the runtime's, else the user's)."""
    return {**XLA_THREAD_ROLES, **words.timeline.thread_roles}.get(group.name, "other host threads")


def fallback_hint(fallback: Fallback, words: Vocabulary) -> str:
    """What to do about an op that fell back to the CPU, in its backend's words."""
    return words.advice.fallback_hints.get(fallback.op, words.advice.fallback_hint)


def plain(prose: str) -> str:
    """A note's prose as text: the code it quotes, without the backticks that mark it."""
    return CODE.sub(r"\1", prose)


def _timed(t: Timed | None) -> str:
    if t is None:
        return NONE
    text = f"{t.count} × {seconds(t.total_s)}"
    return f"{text}, {data_size(t.bytes)}" if t.bytes is not None else text


def steps_line(steps: StepStats) -> str:
    """The steps in one sentence: the first apart, then the spread of the rest."""
    where = "the timeline" if steps.source == "trace" else "the magic's step timer"
    first = f"first {seconds(steps.first_s)}"
    if 0 in steps.compiling:
        first += " (compiled)"
    text = f"{steps.count} × '{steps.name}' (from {where}): {first}"
    if steps.rest_median_s is not None:
        text += (
            f"; the other {steps.count - 1}: min {seconds(steps.rest_min_s)} · median "
            f"{seconds(steps.rest_median_s)} · max {seconds(steps.rest_max_s)}"
        )
    later = [i for i in steps.compiling if i > 0]
    if later:
        shown = ", ".join(str(i) for i in later[:6]) + (", …" if len(later) > 6 else "")
        text += f"; {'step' if len(later) == 1 else f'{len(later)} later steps'} {shown} compiled"
    if steps.estimated:
        text += f"; {estimated_steps(steps)}"
    if steps.spread:
        text += f"; {spread_steps(steps)}"
    return text


ESTIMATE = (
    "the device's busy time shared out among the launches it ran, since the timeline shows "
    "neither whose work each piece was nor each execution whole"
)
"""From what an estimated step's end comes (:attr:`StepStats.estimated`)."""


def estimated_steps(steps: StepStats) -> str:
    """Which steps' times are estimates, and from what."""
    shown = steps.estimated[:6]
    which = ", ".join(str(i) for i in shown) + (", …" if len(steps.estimated) > 6 else "")
    noun = "step" if len(steps.estimated) == 1 else "steps"
    return f"{noun} {which} estimated: {ESTIMATE}"


SPREAD = (
    "a loop of tiny steps counted, not timed one by one: their host times are spread evenly "
    "between the line sampler's looks"
)
"""From what the times of a counted loop's steps come (:attr:`StepStats.spread`)."""


def spread_steps(steps: StepStats) -> str:
    """Which steps' times are spread between the sampler's looks, and why."""
    shown = [f"{a}–{b - 1}" if b - a > 1 else str(a) for a, b in steps.spread[:4]]
    which = ", ".join(shown) + (", …" if len(steps.spread) > 4 else "")
    noun = "step" if sum(b - a for a, b in steps.spread) == 1 else "steps"
    return f"{noun} {which} estimated: {SPREAD}"


def runtime_parts(s: Summary) -> list[tuple[str, str]]:
    """The backend's figures for this cell: compilations, executions and transfers."""
    c = s.compiles
    parts: list[tuple[str, str]] = []
    if c.count is not None:
        text = f"{c.count} × {seconds(c.total_s)}"
        if c.cache_hits is not None:
            text += f" ({c.cache_hits} cache hits)"
        parts.append(("compilations", text))
        if c.functions:
            named = ", ".join(f"{name} ×{count}" for name, count, _ in c.functions[:6])
            more = len(c.functions) - 6
            parts.append(("compiled", named + (f", … {more} more" if more > 0 else "")))
    elif c.trace_count is not None:
        parts.append(("compilations (timeline)", f"{c.trace_count} × {seconds(c.trace_s)}"))
    parts.append(("executions", _timed(s.executions)))
    parts.append(("transfers to device", _timed(s.to_device)))
    parts.append(("transfers from device", _timed(s.from_device)))
    return parts


def header(s: Summary) -> str:
    """The first line: run, status, wall time, device, start."""
    status = s.status if s.error is None else f"{s.status}: {s.error}"
    bits = [f"run {s.run}", status]
    if s.wall_s is not None:
        bits.append(f"wall {seconds(s.wall_s)}")
    bits.append(f"device {s.device.kind}")
    if s.start:
        bits.append(s.start[:19])
    return " · ".join(bits)


def label_name(row: LabelRow) -> str:
    """A block's own name, tagged with its kind and, at the top, its thread."""
    thread = f"[{row.thread}] " if row.thread and len(row.path) == 1 else ""
    return f"{thread}{row.path[-1]}{_KIND_TAG.get(row.kind, '')}"


def hosts_lines(s: Summary) -> list[str]:
    """The hosts table of a multi-host run (empty for one host)."""
    if not s.hosts:
        return []
    slowest = f"; slowest: {s.slowest_host}" if s.slowest_host else ""
    out = [
        "",
        f"Hosts — {len(s.hosts)} captured{slowest}; the sections below read {s.host}",
        f"  {'step':>9} {'steps':>6} {'busy':>9} {'share':>6}  host (what a step is)",
    ]
    for h in s.hosts:
        if h.problem:
            out.append(f"  {NONE:>9} {NONE:>6} {NONE:>9} {NONE:>6}  {h.host}: {h.problem}")
            continue
        step = seconds(h.step_s) if h.step_s is not None else NONE
        busy = seconds(h.busy_s) if h.busy_s is not None else NONE
        mark = "  ← slowest" if h.host == s.slowest_host else ""
        what = f" ({h.step_name})" if h.step_name else ""
        out.append(
            f"  {step:>9} {h.steps:>6} {busy:>9} {percent(h.busy_share):>6}  {h.host}{what}{mark}"
        )
    return out


def render_text(summary: Summary) -> str:
    """The ``text/plain`` form: the headlines first, then one short section per question."""
    s = summary
    words = get_vocabulary(s.backend)
    out = [f"xprof summary — {header(s)}"]
    out.extend(f"  {_LEVEL_MARK.get(n.level, '·')} {plain(n.text)}" for n in notes_of(s))
    out.extend(hosts_lines(s))
    out.extend(_labels_lines(s))
    if s.steps:
        out += ["", f"Steps: {steps_line(s.steps)}"]
    out.extend(_device_lines(s))
    out.extend(memory_lines(s))
    out += ["", f"{words.headings.metrics}:"]
    out.extend(f"  {name}: {value}" for name, value in runtime_parts(s))
    if s.compiles.sites:
        out.append("  compiled inside (innermost block):")
        for site in s.compiles.sites[:10]:
            flag = " — recompiled" if site.recompiled and not site.warm_up else ""
            out.append(
                f"    {' › '.join(site.path)}: {site.compiles} × {seconds(site.total_s)} in "
                f"{site.compiled_runs} of {site.runs} runs{flag}"
            )
    if s.compiles.outside_labels:
        out.append(f"  {s.compiles.outside_labels} compilation(s) outside any labelled block")
    if s.fallbacks:
        out += ["", f"{words.headings.fallbacks}:"]
        out.extend(f"  {f.op} ×{f.count} — {fallback_hint(f, words)}" for f in s.fallbacks)
    for title, ops in op_sections(s):
        out += ["", f"{title} (self time):"]
        out.extend(
            f"  {seconds(op.self_s):>9} {percent(op.share):>6} {op.count:>6}×  {op.name}"
            + (f" [{op.category}]" if op.category not in ("XLA op", "compile") else "")
            for op in ops[:TEXT_OPS]
        )
    if s.missing:
        out += ["", "Missing from this summary:"]
        out.extend(f"  - {m}" for m in gaps_said(s))
    if s.versions:
        out += ["", f"Versions: {versions_line(s)}"]
    out += ["", f"({s.events} timeline events read in {seconds(s.read_s)}; run folder {s.run_dir})"]
    return "\n".join(out)


def versions_line(s: Summary) -> str:
    """The libraries that made the capture, e.g. ``torch 2.13.0, torch-tpu 0.2.0``."""
    return ", ".join(f"{name} {version}" for name, version in s.versions)


def _labels_lines(s: Summary) -> list[str]:
    """The labelled blocks as an indented table, at most :data:`TEXT_LABEL_ROWS` rows."""
    if not s.labels:
        return []
    source = {"trace": "the timeline", "metadata": "the magic's timers"}.get(
        s.label_source, s.label_source
    )
    cell = f"the {seconds(s.wall_s)} cell" if s.wall_s else "the capture"
    out = ["", f"Labels — host time from {source}; share of {cell}"]
    peaks = any(row.peak_bytes is not None for row in s.labels)
    memory = f" {'peak mem':>9}" if peaks else ""
    out.append(
        f"  {'total':>9} {'mean':>9} {'runs':>6} {'share':>6} {'compiles':>8}{memory}  block"
    )
    for row in s.labels[:TEXT_LABEL_ROWS]:
        compiles = "" if row.compiles is None else str(row.compiles or "")
        indent = "  " * (len(row.path) - 1)
        peak = f" {data_size(row.peak_bytes) if row.peak_bytes is not None else '':>9}"
        out.append(
            f"  {seconds(row.total_s):>9} {seconds(row.mean_s):>9} {row.count:>6} "
            f"{percent(row.share):>6} {compiles:>8}{peak if peaks else ''}  "
            f"{indent}{label_name(row)}"
        )
    if len(s.labels) > TEXT_LABEL_ROWS:
        out.append(f"  … {len(s.labels) - TEXT_LABEL_ROWS} more blocks")
    return out


def _device_lines(s: Summary) -> list[str]:
    """How busy the device (or the CPU client), each device and each host thread group was."""
    d = s.device
    out = ["", f"Device {d.kind} and host threads:"]
    if d.busy_s is not None and d.window_s:
        what = "XLA ops ran (any CPU client thread)" if d.on_cpu else "the device was busy"
        if not d.on_cpu and len(d.devices) > 1:
            what = f"the {len(d.devices)} devices were busy, on average each,"
        out.append(
            f"  {what} {seconds(d.busy_s)} of the {seconds(d.window_s)} window "
            f"({percent(d.busy_share)})"
            + ("" if d.on_cpu else f"; idle {percent(1 - (d.busy_share or 0))}")
        )
    for dev in d.devices[:8]:
        copying = f", {seconds(dev.copy_s)} of it copying" if dev.copy_s else ""
        out.append(f"  {dev.name}: busy {seconds(dev.busy_s)} ({percent(dev.share)}){copying}")
    if d.threads:
        out.append("  host threads (busy thread time; share of the window, per thread):")
        for g in d.threads:
            out.append(
                f"    {g.name} ×{g.threads}: {seconds(g.busy_s)} ({percent(per_thread(g))})"
                f" — {thread_role(g, get_vocabulary(s.backend))}"
            )
    return out


def per_thread(group: ThreadGroup) -> float:
    """A thread group's busy share of the window per thread.

    Its thread time adds its threads up, so the whole group's share would pass 100% with two threads
    busy.
    """
    return group.share / group.threads if group.threads else group.share


def op_sections(s: Summary) -> list[tuple[str, tuple[OpRow, ...]]]:
    """The non-empty tables of top operations, with their titles."""
    device = "XLA ops on the CPU client" if s.device.on_cpu else "XLA ops on the device"
    return [
        (title, ops)
        for title, ops in (
            ("Top host operations", s.host_ops),
            (f"Top {device}", s.device_ops),
            ("Top compilation work", s.compile_ops),
        )
        if ops
    ]
