"""The diagnosis's picture: each step's time as a stacked bar of its breakdown, inline SVG.

Static like :mod:`.chart` (no script, so it renders in a saved notebook and in Colab). The
categories keep the breakdown's order everywhere, bottom to top in each bar and left to right in
the legend, each in its colour (its record's in
:data:`~xprof_magic._analysis.model.categories.KIND`), so that a category sits in the same
place, in the same colour, in every cell; a category without time in this cell stays in the
legend, faint. The bars are numbered by step (every n-th where many). Without steps, one bar for
the cell. A first bar over three times the longest of the others (a step that compiled) is cut
at 1.25 times that, its parts scaled to fit, and its length written in a row of its own above
the plot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xprof_magic._analysis.model.categories import KIND
from xprof_magic._analysis.render.svg import (
    Text,
    axes,
    escape,
    step_ticks,
    svg,
)
from xprof_magic._units import counted, seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis
    from xprof_magic._analysis.model.summary import StepStats

__all__ = ["breakdown_svg"]

MAX_BARS = 240
_LEFT, _RIGHT, _TOP, _PLOT_H, _ROW = 70, 8, 18, 112, 15

Bar = tuple[str, int, tuple[float, ...]]
"""A bar's name (``step 3``), the number it is shown by (-1: none), and its seconds per
category."""


def _colour(category: str) -> str:
    kind = KIND.get(category)
    return kind.colour if kind is not None else "#888"


def breakdown_svg(d: Diagnosis, steps: StepStats | None = None, width: int = 640) -> str:
    """Per-step stacked bars of ``d.breakdown``; "" when there is nothing to draw.

    With the summary's ``steps`` (whose times the bars are), also their median after the first, a
    dashed line, and which of them are estimates.
    """
    parts = d.breakdown
    if not parts.categories:
        return ""
    if parts.steps:
        bars = _bucketed([(s.step, s.seconds) for s in parts.steps])
    else:
        bars = [("the cell", -1, parts.cell)]
    totals = [sum(values) for _, _, values in bars]
    if not any(t > 0 for t in totals):
        return ""
    plot_w = width - _LEFT - _RIGHT
    ymax = max(totals)
    rest = max(totals[1:], default=0.0)
    clipped = rest > 0 and ymax > 3 * rest
    if clipped:
        # A first step that compiled would squash the others: cut it, and say its length.
        ymax = rest * 1.25
    bar_w = plot_w / len(bars)
    gap = 1.0 if bar_w > 3 else 0.0
    axis_y = _TOP + _PLOT_H
    shapes: list[str] = []
    labels = [Text(_LEFT - 6, _TOP + 9, seconds(ymax), "end")]
    for n, (name, _, values) in enumerate(bars):
        x = _LEFT + n * bar_w
        y = float(axis_y)
        # A cut bar keeps its mix: its parts scaled to the full height.
        scale = min(1.0, ymax / totals[n]) if totals[n] > 0 else 1.0
        for category, value in zip(parts.categories, values, strict=True):
            h = value * scale / ymax * _PLOT_H
            if h <= 0:
                continue
            y -= h
            shapes.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - gap, 0.6):.1f}" '
                f'height="{h:.1f}" fill="{_colour(category)}">'
                f"<title>{escape(name)}: {category} {seconds(value)}</title></rect>"
            )
        if clipped and totals[n] > ymax:
            labels.append(Text(x, _TOP - 5, f"↑ {name}: {seconds(totals[n])}, cut"))
            shapes.append(_cut_mark(x, max(bar_w - gap, 0.6)))
    median = steps.rest_median_s if steps is not None and parts.steps else None
    if median is not None and ymax > 0 and len(bars) > 1:
        y = axis_y - min(median, ymax) / ymax * _PLOT_H
        shapes.append(
            f'<line x1="{_LEFT}" x2="{_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="currentColor" stroke-dasharray="4 3" stroke-opacity="0.6">'
            f"<title>median of the steps after the first: {seconds(median)}</title></line>"
        )
    else:
        median = None
    below = axis_y + _ROW
    if parts.steps:
        labels.append(Text(_LEFT - 8, axis_y + 13, "step", "end"))
        per_bar = -(-len(parts.steps) // len(bars))
        numbers = [number for _, number, _ in bars]
        end = parts.steps[-1].step + 1
        labels += step_ticks(numbers, bar_w, _LEFT, axis_y + 13, per_bar, end)
        below += 13
    what = counted(parts.step_count, "step") if parts.steps else "the cell"
    dashed = f"; dashed: median of the rest, {seconds(median)}" if median is not None else ""
    caption = f"where the time of {what} went (verdict: {d.verdict}{dashed})"
    labels.append(Text(_LEFT, below, caption))
    if steps is not None and steps.estimated and parts.steps:
        below += _ROW
        labels.append(Text(_LEFT, below, _estimated(steps)))
    legend, rows = _legend(parts, below + _ROW, width - _RIGHT)
    axis = axes(_LEFT, _TOP, _LEFT + plot_w, axis_y)
    body = axis + "".join(shapes) + "".join(t.svg() for t in labels) + legend
    height = below + _ROW * rows + 6
    return svg(width, height, "step-time breakdown", body, "xprof-magic-breakdown")


def _estimated(steps: StepStats) -> str:
    """The chart's line on the steps whose times are estimates."""
    first, count = steps.estimated[0], len(steps.estimated)
    which = f"step {first}" if count == 1 else f"{count} steps from step {first}"
    return f"{which}: estimated (the device's busy time shared out among its launches)"


def _legend(parts: Breakdown, y: float, right: float) -> tuple[str, int]:
    """The breakdown's categories in order, in rows that end before ``right``, and how many rows.

    A category with no time in this cell is drawn faint.
    """
    out: list[str] = []
    x, row = float(_LEFT), 0
    for category in parts.categories:
        name = Text(x + 14, y + row * _ROW, category)
        slot = 14 + name.width + 10
        if x + slot > right and x > _LEFT:
            x, row = float(_LEFT), row + 1
            name = Text(x + 14, y + row * _ROW, category)
        timed = parts.seconds(category) > 0 or parts.seconds(category, of_steps=False) > 0
        faint = "" if timed else ' opacity="0.35"'
        out.append(
            f'<g class="xprof-legend"{faint}><rect x="{x:.1f}" y="{name.y - 9:.1f}" '
            f'width="10" height="10" fill="{_colour(category)}"/>{name.svg()}</g>'
        )
        x += slot
    return "".join(out), row + 1


def _cut_mark(x: float, w: float) -> str:
    """Two white slashes across a cut bar, a little below its top."""
    y = _TOP + 6
    return (
        f'<path d="M{x - 1:.1f} {y + 3:.1f} L{x + w + 1:.1f} {y - 1:.1f} '
        f'M{x - 1:.1f} {y + 7:.1f} L{x + w + 1:.1f} {y + 3:.1f}" stroke="#fff" '
        'stroke-width="2"/>'
    )


def _bucketed(rows: list[tuple[int, tuple[float, ...]]]) -> list[Bar]:
    """At most :data:`MAX_BARS` bars, each the mean of as many consecutive steps."""
    size = max(1, -(-len(rows) // MAX_BARS))
    if size == 1:
        return [(f"step {step}", step, values) for step, values in rows]
    out: list[Bar] = []
    for at in range(0, len(rows), size):
        chunk = rows[at : at + size]
        mean = tuple(sum(v[i] for _, v in chunk) / len(chunk) for i in range(len(chunk[0][1])))
        name = f"steps {chunk[0][0]} to {chunk[-1][0]} (mean)"
        out.append((name, chunk[0][0], mean))
    return out
