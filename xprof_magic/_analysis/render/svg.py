"""What the summary's inline SVG charts share: text with its box, the step axis, the colours.

The charts are static (no script: a saved notebook and Colab show them as they are), so
nothing measures text in the browser. Each label is placed from a width estimated on the
safe side (:data:`CHAR_WIDTH` of the font size per character, above what system sans-serif
fonts draw), and the layout keeps every two labels' boxes apart by construction;
``tests/test_browser_summary.py`` checks the boxes Chromium draws.

The categories' colours are their records' (:data:`~xprof_magic._analysis.model.categories.KIND`):
both charts and every cell use them, so a colour always means the same category.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from xprof_magic._analysis.model import categories as _categories

__all__ = [
    "BLUE",
    "FONT",
    "GREY",
    "ORANGE",
    "Text",
    "axes",
    "escape",
    "overlaps",
    "step_ticks",
    "svg",
]

BLUE, ORANGE = "#4e79a7", "#e8833a"
GREY = _categories.GREY
FONT = "system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"
FONT_SIZE = 11
CHAR_WIDTH = 0.66
"""A character's width in font sizes, on the safe side: DejaVu Sans, Linux's usual
sans-serif, draws its digits 0.64 wide, most other fonts less."""


def escape(text: object) -> str:
    """``text`` safe inside an element or a quoted attribute."""
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class Text:
    """One label: ``x`` where ``anchor`` puts it, ``y`` its baseline."""

    x: float
    y: float
    text: str
    anchor: str = "start"
    size: int = FONT_SIZE
    weight: str = ""

    @property
    def width(self) -> float:
        return len(self.text) * self.size * CHAR_WIDTH

    def box(self) -> tuple[float, float, float, float]:
        """``(left, top, right, bottom)``: the ink's extent, ascenders and descenders in."""
        left = {"start": self.x, "middle": self.x - self.width / 2, "end": self.x - self.width}
        x0 = left.get(self.anchor, self.x)
        return (x0, self.y - self.size, x0 + self.width, self.y + self.size * 0.3)

    def svg(self) -> str:
        weight = f' font-weight="{self.weight}"' if self.weight else ""
        anchor = f' text-anchor="{self.anchor}"' if self.anchor != "start" else ""
        return (
            f'<text x="{self.x:.1f}" y="{self.y:.1f}" font-size="{self.size}"{anchor}{weight} '
            f'fill="currentColor">{escape(self.text)}</text>'
        )


def overlaps(a: Text, b: Text, gap: float = 3.0) -> bool:
    """Whether two labels' boxes, each grown by ``gap``, meet."""
    ax0, ay0, ax1, ay1 = a.box()
    bx0, by0, bx1, by1 = b.box()
    return ax0 - gap < bx1 and bx0 - gap < ax1 and ay0 - gap < by1 and by0 - gap < ay1


_STRIDES = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10_000)


def step_ticks(
    numbers: list[int], bar_w: float, left: float, y: float, per_bar: int = 1, end: int = -1
) -> list[Text]:
    """The step numbers under their bars, every n-th where they would not fit.

    Bar ``i`` spans ``left + i * bar_w`` and holds the steps from ``numbers[i]`` to the next bar's,
    ``per_bar`` of them, the last bar's up to ``end``. n is the least of 1, 2, 5, 10, 20, … steps
    that leaves each label its width and a gap.
    """
    if not numbers:
        return []
    ends = [*numbers[1:], end if end > numbers[-1] else numbers[-1] + 1]
    widest = Text(0, 0, str(ends[-1])).width + 8
    stride = next((s for s in _STRIDES if s / per_bar * bar_w >= widest), _STRIDES[-1])
    ticks = []
    for i, (first, after) in enumerate(zip(numbers, ends, strict=True)):
        shown = -(-first // stride) * stride
        if shown < after:
            ticks.append(Text(left + (i + 0.5) * bar_w, y, str(shown), "middle"))
    return ticks


def axes(left: float, top: float, right: float, bottom: float) -> str:
    """A chart's two axes: up its left side and along its bottom.

    Up from ``bottom`` to ``top``, and along from ``left`` to ``right``.
    """
    return (
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}" stroke="{GREY}"/>'
        f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="{GREY}"/>'
    )


def svg(width: int, height: int, label: str, body: str, css_class: str = "") -> str:
    """The chart's root: ``width`` × ``height`` pixels at most, in :data:`FONT`.

    It shrinks with a narrower output (its viewBox keeps the proportions).
    """
    cls = f' class="{css_class}"' if css_class else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}"{cls} '
        f'font-family="{escape(FONT)}" style="max-width:100%;height:auto">{body}</svg>'
    )
