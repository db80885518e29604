"""The summary's one chart, as inline SVG: step times as bars, else the largest labels.

Static (no script), sized in pixels, coloured with ``currentColor`` and the few colours
below, so that it reads on a light and a dark notebook theme alike; :mod:`.html` places it.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from xprof_magic._units import seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.summary import LabelRow, StepStats, Summary

__all__ = ["BLUE", "GREY", "ORANGE", "chart_svg", "escape"]

BLUE, ORANGE, GREY = "#4e79a7", "#e8833a", "rgba(127,127,127,0.35)"


def escape(text: object) -> str:
    """``text`` safe inside an element or a quoted attribute."""
    return html.escape(str(text), quote=True)


def chart_svg(summary: Summary, width: int = 560, height: int = 150) -> str:
    """Step times as bars (compiling steps orange), else the largest labels; "" if neither."""
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
    left, top, bottom = 56, 16, 18
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
    for i, (value, hot) in enumerate(bars):
        h = min(value, ymax) / ymax * plot_h if ymax > 0 else 0
        x = left + i * step_w
        color = ORANGE if hot else BLUE
        shapes.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(step_w - gap, 0.6):.1f}" '
            f'height="{h:.1f}" fill="{color}">'
            f"<title>step {i * buckets}: {seconds(value)}</title></rect>"
        )
        if clipped and value > ymax:
            shapes.append(
                f'<text x="{x + 2:.1f}" y="{top - 4}" font-size="10" fill="currentColor">'
                f"↑ {seconds(value)}</text>"
            )
    if steps.rest_median_s is not None and ymax > 0:
        y = top + plot_h - min(steps.rest_median_s, ymax) / ymax * plot_h
        shapes.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="currentColor" stroke-dasharray="4 3" stroke-opacity="0.6"/>'
            f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="10" text-anchor="end" '
            f'fill="currentColor">{seconds(steps.rest_median_s)}</text>'
        )
    axis = (
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="{GREY}"/>'
        f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" '
        f'stroke="{GREY}"/>'
        f'<text x="{left - 4}" y="{top + 8}" font-size="10" text-anchor="end" '
        f'fill="currentColor">{seconds(ymax)}</text>'
        f'<text x="{left}" y="{height - 4}" font-size="10" fill="currentColor">'
        f"{escape(steps.name)} times, {steps.count} steps (orange: compiled; dashed: median of "
        "the rest)</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step times">'
        f"{axis}{''.join(shapes)}</svg>"
    )


def _step_bars(values: list[float], compiling: set[int]) -> tuple[list[tuple[float, bool]], int]:
    """At most 240 bars: each the longest of ``buckets`` steps, hot if one of them compiled."""
    buckets = max(1, -(-len(values) // 240))
    bars: list[tuple[float, bool]] = []
    for i in range(0, len(values), buckets):
        chunk = range(i, min(i + buckets, len(values)))
        bars.append((max(values[j] for j in chunk), any(j in compiling for j in chunk)))
    return bars, buckets


def _labels_svg(rows: list[LabelRow], width: int) -> str:
    row_h, name_w, top = 18, 200, 4
    height = top + row_h * len(rows) + 18
    biggest = max(r.total_s for r in rows) or 1.0
    plot_w = width - name_w - 80
    shapes = []
    for i, r in enumerate(rows):
        y = top + i * row_h
        name = " › ".join(r.path)
        short = name if len(name) <= 32 else name[:31] + "…"
        w = r.total_s / biggest * plot_w
        shapes.append(
            f'<text x="{name_w - 6}" y="{y + 12}" font-size="11" text-anchor="end" '
            f'fill="currentColor">{escape(short)}<title>{escape(name)}</title></text>'
            f'<rect x="{name_w}" y="{y + 3}" width="{max(w, 0.5):.1f}" height="{row_h - 6}" '
            f'fill="{BLUE}"/>'
            f'<text x="{name_w + w + 4:.1f}" y="{y + 12}" font-size="11" '
            f'fill="currentColor">{seconds(r.total_s)}</text>'
        )
    caption = (
        f'<text x="{name_w}" y="{height - 4}" font-size="10" fill="currentColor">'
        "host time of the largest labelled blocks</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="label times">'
        f"{''.join(shapes)}{caption}</svg>"
    )
