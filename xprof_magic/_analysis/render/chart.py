"""The summary's one chart, as inline SVG: step times as bars, else the largest labels.

Static (no script), sized in pixels (shrunk to a narrower output), coloured with
``currentColor`` and the colours of :mod:`.svg`, so that it reads on a light and a dark
notebook theme alike; :mod:`.html` places it. Its labels never meet: the cut first step's
length has a row of its own above the plot, the steps are numbered under it (every n-th
where many), and the median's label is left out where it would touch the top one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xprof_magic._analysis.model.categories import KIND
from xprof_magic._analysis.render.svg import (
    BLUE,
    GREY,
    ORANGE,
    Text,
    axes,
    escape,
    overlaps,
    step_ticks,
    svg,
)
from xprof_magic._units import counted, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.summary import LabelRow, StepStats, Summary

__all__ = ["BLUE", "GREY", "ORANGE", "chart_svg", "escape"]

COMPILED = KIND["compile"].colour
"""A step that compiled: the breakdown's compile colour, so that both charts agree."""


def chart_svg(summary: Summary, width: int = 640, height: int = 176) -> str:
    """Step times as bars, else the largest labels; "" if neither.

    Compiling steps are drawn in the compile colour.
    """
    if summary.steps and summary.steps.count >= 2:
        return _steps_svg(summary.steps, width, height)
    loader = {r.path for r in summary.labels if r.kind == "input"}
    rows = [
        r for r in summary.labels if len(r.path) <= 2 and not r.thread and r.path[:1] not in loader
    ]
    if rows:
        return _labels_svg(sorted(rows, key=lambda r: -r.total_s)[:8], width)
    return ""


def _steps_svg(steps: StepStats, width: int, height: int) -> str:
    left, top, bottom = 70, 18, 34
    plot_w, plot_h = width - left - 8, height - top - bottom
    values = list(steps.durations_s)
    bars, buckets = _step_bars(values, set(steps.compiling))
    rest = values[1:] or values
    ymax = max(values)
    clipped = ymax > 3 * max(rest)
    if clipped:
        ymax = max(rest) * 1.25
    step_w = plot_w / len(bars)
    gap = 1.0 if step_w > 3 else 0.0
    shapes = []
    labels = [Text(left - 6, top + 9, seconds(ymax), "end")]
    median: Text | None = None
    for i, (value, hot) in enumerate(bars):
        h = min(value, ymax) / ymax * plot_h if ymax > 0 else 0
        x = left + i * step_w
        color = COMPILED if hot else BLUE
        shapes.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(step_w - gap, 0.6):.1f}" '
            f'height="{h:.1f}" fill="{color}">'
            f"<title>step {i * buckets}: {seconds(value)}</title></rect>"
        )
        if clipped and value > ymax:
            labels.append(Text(x, top - 5, f"↑ step {i * buckets}: {seconds(value)}, cut"))
    if steps.rest_median_s is not None and ymax > 0:
        y = top + plot_h - min(steps.rest_median_s, ymax) / ymax * plot_h
        shapes.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" stroke-dasharray="4 3" stroke-opacity="0.6"/>'
        )
        median = Text(left - 6, y + 4, seconds(steps.rest_median_s), "end")
    axis_y = top + plot_h
    labels.append(Text(left - 8, axis_y + 13, "step", "end"))
    numbers = [i * buckets for i in range(len(bars))]
    labels += step_ticks(numbers, step_w, left, axis_y + 13, buckets, len(values))
    if median is not None and not any(overlaps(median, label) for label in labels):
        labels.append(median)
    labels.append(
        Text(
            left,
            height - 4,
            f"{steps.name} times, {counted(steps.count, 'step')} (yellow: compiled; dashed: "
            "median of the rest)",
        )
    )
    axis = axes(left, top, left + plot_w, axis_y)
    body = axis + "".join(shapes) + "".join(t.svg() for t in labels)
    return svg(width, height, "step times", body)


def _step_bars(values: list[float], compiling: set[int]) -> tuple[list[tuple[float, bool]], int]:
    """At most 240 bars: each the longest of ``buckets`` steps, hot if one of them compiled."""
    buckets = max(1, -(-len(values) // 240))
    bars: list[tuple[float, bool]] = []
    for i in range(0, len(values), buckets):
        chunk = range(i, min(i + buckets, len(values)))
        bars.append((max(values[j] for j in chunk), any(j in compiling for j in chunk)))
    return bars, buckets


def _labels_svg(rows: list[LabelRow], width: int) -> str:
    row_h, name_w, top = 18, 230, 4
    height = top + row_h * len(rows) + 18
    biggest = max(r.total_s for r in rows) or 1.0
    plot_w = width - name_w - 80
    shapes = []
    for i, r in enumerate(rows):
        y = top + i * row_h
        name = " › ".join(r.path)
        short = name if len(name) <= 30 else name[:29] + "…"
        w = r.total_s / biggest * plot_w
        label = Text(name_w - 6, y + 12, short, "end").svg()
        shapes.append(
            label.replace("</text>", f"<title>{escape(name)}</title></text>")
            + f'<rect x="{name_w}" y="{y + 3}" width="{max(w, 0.5):.1f}" height="{row_h - 6}" '
            f'fill="{BLUE}"/>' + Text(name_w + w + 4, y + 12, seconds(r.total_s)).svg()
        )
    caption = Text(name_w, height - 4, "host time of the largest labelled blocks").svg()
    return svg(width, height, "label times", "".join(shapes) + caption)
