"""The diagnosis's picture: each step's time as a stacked bar of its breakdown, inline SVG.

Static like :mod:`.chart` (no script, so it renders in a saved notebook and in Colab), one
colour per category, the verdict's category first (at the bottom of each bar and first in
the legend). Without steps, one bar for the cell. A first bar over three times the longest
of the others (a step that compiled) is cut at 1.25 times that, its parts scaled to fit and
its length written on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xprof_magic._analysis.render.chart import escape
from xprof_magic._units import seconds

if TYPE_CHECKING:
    from xprof_magic._analysis.model.diagnosis import Diagnosis

__all__ = ["COLOURS", "breakdown_svg"]

COLOURS = {
    "input": "#e15759",
    "host": "#f28e2b",
    "compile": "#edc948",
    "transfer": "#b07aa1",
    "sync": "#9c755f",
    "device": "#59a14f",
    "collective": "#76b7b2",
    "idle": "rgba(127,127,127,0.35)",
}
MAX_BARS = 240


def breakdown_svg(d: Diagnosis, width: int = 560, height: int = 170) -> str:
    """Per-step stacked bars of ``d.breakdown``; "" when there is nothing to draw."""
    parts = d.breakdown
    if not parts.categories:
        return ""
    order = sorted(
        range(len(parts.categories)),
        key=lambda i: (parts.categories[i] != d.verdict, i),
    )
    if parts.steps:
        rows = [(f"step {s.step}", s.seconds) for s in parts.steps]
    else:
        rows = [("the cell", parts.cell)]
    bars = _bucketed(rows)
    used = [i for i in order if any(values[i] > 0 for _, values in bars)]
    if not used:
        return ""
    left, top, legend_h, bottom = 56, 10, 18, 16
    plot_w, plot_h = width - left - 8, height - top - bottom - legend_h
    totals = [sum(values) for _, values in bars]
    ymax = max(totals) or 1.0
    rest = max(totals[1:], default=0.0)
    clipped = rest > 0 and ymax > 3 * rest
    if clipped:
        # A first step that compiled would squash the others: cut it, and say its length.
        ymax = rest * 1.25
    bar_w = plot_w / len(bars)
    gap = 1.0 if bar_w > 3 else 0.0
    shapes: list[str] = []
    for n, (name, values) in enumerate(bars):
        x = left + n * bar_w
        y = float(top + plot_h)
        # A cut bar keeps its mix: its parts scaled to the full height.
        scale = min(1.0, ymax / totals[n]) if totals[n] > 0 else 1.0
        for i in used:
            h = values[i] * scale / ymax * plot_h
            if h <= 0:
                continue
            y -= h
            category = parts.categories[i]
            shapes.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w - gap, 0.6):.1f}" '
                f'height="{h:.1f}" fill="{COLOURS.get(category, "#888")}">'
                f"<title>{escape(name)}: {category} {seconds(values[i])}</title></rect>"
            )
        if clipped and totals[n] > ymax:
            shapes.append(
                f'<text x="{x + 2:.1f}" y="{top + 8}" font-size="10" fill="currentColor">'
                f"↑ {escape(name)}: {seconds(totals[n])}</text>"
            )
    legend = []
    x = left
    for i in used:
        category = parts.categories[i]
        legend.append(
            f'<rect x="{x}" y="{height - legend_h + 2}" width="10" height="10" '
            f'fill="{COLOURS.get(category, "#888")}"/>'
            f'<text x="{x + 13}" y="{height - legend_h + 11}" font-size="10" '
            f'fill="currentColor">{category}</text>'
        )
        x += 20 + 6 * len(category)
    what = f"{parts.step_count} steps" if parts.steps else "the cell"
    axis = (
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="{COLOURS["idle"]}"/>'
        f'<text x="{left - 4}" y="{top + 8}" font-size="10" text-anchor="end" '
        f'fill="currentColor">{seconds(ymax)}</text>'
        f'<text x="{left}" y="{top + plot_h + 12}" font-size="10" fill="currentColor">'
        f"where the time of {what} went (verdict: {escape(d.verdict)})</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="step-time breakdown" '
        f'class="xprof-magic-breakdown">{axis}{"".join(shapes)}{"".join(legend)}</svg>'
    )


def _bucketed(rows: list[tuple[str, tuple[float, ...]]]) -> list[tuple[str, tuple[float, ...]]]:
    """At most :data:`MAX_BARS` bars, each the mean of as many consecutive steps."""
    size = max(1, -(-len(rows) // MAX_BARS))
    if size == 1:
        return rows
    out = []
    for at in range(0, len(rows), size):
        chunk = rows[at : at + size]
        mean = tuple(sum(v[i] for _, v in chunk) / len(chunk) for i in range(len(chunk[0][1])))
        out.append((f"{chunk[0][0]} to {chunk[-1][0]} (mean)", mean))
    return out
