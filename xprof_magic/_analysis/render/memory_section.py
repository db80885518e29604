"""The device's memory in words and pictures: section, chart, out-of-memory headline, leak note.

The section says the peak first (with its block and line, and the device's capacity), then the start
and end of the cell, pinned host memory apart, and a loop whose memory grows each step plainly;
where neither the capture nor the backend has figures (the CPU client), one line says so instead of
zeros. The chart draws the bytes in use over the cell's time with the steps marked and the peak's
point labelled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xprof_magic._analysis.render.svg import BLUE, ORANGE, Text, axes, overlaps, svg
from xprof_magic._units import counted, data_size, percent, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.device_memory import Allocation, Memory, MemoryUse, OutOfMemory
    from xprof_magic._analysis.model.diagnosis import Diagnosis
    from xprof_magic._analysis.model.summary import Summary

__all__ = [
    "NO_FIGURES",
    "growth_note",
    "memory_lines",
    "memory_svg",
    "oom_headline",
    "peak_line",
]

NO_FIGURES = (
    "No device memory figures: the capture holds no allocator events and the runtime keeps "
    "none (XLA's CPU client does not count its memory)."
)


def peak_line(m: Memory) -> str:
    """``peak 2.4 GB (2% of 112.6 GB) at `for i in range(60)`, line 3``; "" without figures."""
    d = m.device
    if d is None:
        return ""
    of = (
        f" ({percent(d.peak_bytes / d.capacity_bytes)} of {data_size(d.capacity_bytes)})"
        if d.capacity_bytes
        else ""
    )
    where = f" in `{d.peak_path[-1]}`" if d.peak_path else ""
    line = f", line {d.peak_line}" if d.peak_line else ""
    return f"peak {data_size(d.peak_bytes)}{of}{where}{line}"


def _use_line(name: str, u: MemoryUse) -> str:
    return (
        f"{name}: {data_size(u.start_bytes)} at the start, {data_size(u.end_bytes)} at the end, "
        f"peak {data_size(u.peak_bytes)}"
    )


def memory_lines(s: Summary) -> list[str]:
    """The memory section of the text summary."""
    m = s.memory
    out = ["", "Device memory:"]
    if m.device is None and m.host is None:
        if s.device.on_cpu or m.oom is None:
            out.append(f"  {NO_FIGURES}")
        return out if m.oom is None else [*out, *_oom_lines(m.oom)]
    source = {"timeline": "the allocators' events", "runtime": "the runtime's figures"}
    out.append(f"  {peak_line(m)} (from {source.get(m.source, m.source)})")
    if m.device is not None:
        out.append(f"  {_use_line(f'device ({m.device.allocator})', m.device)}")
    if m.host is not None:
        out.append(f"  {_use_line(f'pinned host memory ({m.host.allocator})', m.host)}")
    note = growth_note(s)
    if note:
        out.append(f"  {note}")
    if m.oom is not None:
        out.extend(_oom_lines(m.oom))
    return out


def _oom_lines(oom: OutOfMemory) -> list[str]:
    out = [f"  out of memory ({oom.at}): asked {data_size(oom.asked_bytes)}"]
    if oom.available_bytes is not None:
        out[-1] += f", {data_size(oom.available_bytes)} available"
    for a in oom.allocations:
        out.append(f"    {_allocation(a)}")
    return out


def _allocation(a: Allocation) -> str:
    op = a.operator.rsplit("/", 1)[-1].split("[", 1)[0] if a.operator else ""
    where = f"line {a.cell_line}" if a.cell_line else ""
    if not where and a.source_file:
        where = f"{a.source_file.rsplit('/', 1)[-1]}:{a.source_line}"
    said = ", ".join(part for part in (f"`{op}`" if op else "", where) if part)
    return f"{data_size(a.size_bytes)} {a.shape}".rstrip() + (f" ({said})" if said else "")


def growth_note(s: Summary) -> str:
    """The note of memory that grows step after step; "" when it does not.

    ``Memory grows step after step: +120.0 MB a step on average over 40 steps …``; the growth is the
    mean of the steps', most of which grew.
    """
    m = s.memory
    if m.growth_per_step is None or m.device is None:
        return ""
    grows = data_size(m.growth_per_step)
    return (
        f"Device memory grows step after step: +{grows} a step on average over "
        f"{counted(m.growth_steps, 'step')} ({data_size(m.device.start_bytes)} → "
        f"{data_size(m.device.end_bytes)}): something the loop keeps holds on to device "
        "arrays (a list of losses or outputs, a growing graph)."
    )


def oom_headline(s: Summary, d: Diagnosis, advice: str) -> str:
    """The out-of-memory verdict: what was asked against what was available.

    Then XLA's largest allocations, the cell's lines named.
    """
    oom = s.memory.oom
    if oom is None:
        return ""
    space = "HBM" if oom.space == "hbm" else "device memory"
    when = "compiling the program" if oom.at == "compile" else "running"
    text = f"Out of memory while {when}: it needed {data_size(oom.asked_bytes)} of {space}"
    if oom.available_bytes is not None:
        text += f", {data_size(oom.available_bytes)} "
        text += "fit" if oom.at == "compile" else "was free"
        if oom.asked_bytes > oom.available_bytes:
            text += f" (over by {data_size(oom.asked_bytes - oom.available_bytes)})"
    if d.where and d.line:
        text += f" (`{d.where[-1]}`, line {d.line})"
    text += "."
    if oom.allocations:
        text += " Largest allocations: " + "; ".join(_allocation(a) for a in oom.allocations[:3])
        text += "."
    return " ".join(part for part in (text, advice) if part)


def memory_svg(s: Summary, width: int = 640, height: int = 150) -> str:
    """Device bytes in use over the cell's time, steps marked, peak labelled; "" without a curve."""
    d = s.memory.device
    if d is None or len(d.curve) < 2:
        return ""
    left, top, bottom = 70, 14, 30
    plot_w, plot_h = width - left - 8, height - top - bottom
    t0 = min(t for t, _ in d.curve)
    t1 = max(t for t, _ in d.curve)
    if s.steps and s.steps.starts_s:
        t0 = min(t0, s.steps.starts_s[0])
        t1 = max(t1, s.steps.starts_s[-1] + s.steps.durations_s[-1])
    span = (t1 - t0) or 1.0
    high, low = max(b for _, b in d.curve), min(b for _, b in d.curve)
    # From zero where the cell's own use is most of it; else the band it moved in.
    ymin = 0.0 if low < 0.5 * high else low - 0.15 * (high - low or high)
    ymax = high + 0.15 * (high - ymin) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * plot_w

    def y(b: float) -> float:
        return top + plot_h - (b - ymin) / (ymax - ymin) * plot_h

    points = " ".join(f"{x(t):.1f},{y(b):.1f}" for t, b in d.curve)
    shapes = [axes(left, top, left + plot_w, top + plot_h)]
    if s.steps and s.steps.starts_s:
        every = max(1, len(s.steps.starts_s) // 60)
        for start in s.steps.starts_s[::every]:
            shapes.append(
                f'<line x1="{x(start):.1f}" x2="{x(start):.1f}" y1="{top + plot_h}" '
                f'y2="{top + plot_h - 5}" stroke="currentColor" stroke-opacity="0.5"/>'
            )
    shapes.append(f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="1.5"/>')
    labels = [
        Text(left - 6, top + 9, data_size(ymax), "end"),
        Text(left - 6, top + plot_h, data_size(ymin) if ymin else "0", "end"),
    ]
    if d.peak_s is not None:
        px, py = x(d.peak_s), y(d.peak_bytes)
        shapes.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{ORANGE}"/>')
        where = f" in {d.peak_path[-1]}" if d.peak_path else ""
        label = f"peak {data_size(d.peak_bytes)}{where}"
        label = label if len(label) <= 48 else label[:47] + "…"
        anchor = "end" if px > left + plot_w / 2 else "start"
        below = py < top + 14
        peak = Text(
            px - 5 if anchor == "end" else px + 5, py + 14 if below else py - 6, label, anchor
        )
        if not any(overlaps(peak, other) for other in labels):
            labels.append(peak)
    caption = (
        f"device memory in use over {seconds(span)}"
        + (" (ticks: steps)" if s.steps and s.steps.starts_s else "")
        + (f"; capacity {data_size(d.capacity_bytes)}" if d.capacity_bytes else "")
    )
    labels.append(Text(left, height - 4, caption))
    body = "".join(shapes) + "".join(t.svg() for t in labels)
    return svg(width, height, "device memory", body)
