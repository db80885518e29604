"""The summary's two charts, the per-step breakdown and the step times: what they draw where.

Pure tests of the SVG (no capture, no IPython), and one in Chromium that measures the text
boxes the browser draws: no two labels meet, at JupyterLab's 848 px output and narrower.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests._browser import launch_chromium
from tests.conftest import ARTIFACTS
from xprof_magic._analysis import StepStats, Summary, chart_svg
from xprof_magic._analysis.model.categories import BREAKDOWN as NAMES
from xprof_magic._analysis.model.categories import KIND
from xprof_magic._analysis.model.diagnosis import Breakdown, Diagnosis, StepBreakdown
from xprof_magic._analysis.render.breakdown_chart import breakdown_svg
from xprof_magic._analysis.render.svg import Text, overlaps


def _step(n: int, **seconds: float) -> StepBreakdown:
    parts = dict.fromkeys(NAMES, 0.0) | seconds
    return StepBreakdown(n, sum(parts.values()), tuple(parts[c] for c in NAMES))


def _diagnosis(verdict: str, steps: list[StepBreakdown]) -> Diagnosis:
    cell = tuple(sum(s.seconds[i] for s in steps) for i in range(len(NAMES)))
    parts = Breakdown(NAMES, cell, sum(cell), tuple(steps), len(steps))
    return Diagnosis(verdict=verdict, breakdown=parts)


INPUT_BOUND = _diagnosis(
    "input",
    [_step(0, compile=0.9, input=0.03)]
    + [_step(n, input=0.03, host=0.001, sync=0.0005) for n in range(1, 10)],
)
HEALTHY = _diagnosis(
    "device", [_step(0, compile=0.2, device=0.01)] + [_step(n, device=0.03) for n in range(1, 10)]
)
MANY = _diagnosis("host", [_step(n, host=0.01 + n % 7 * 1e-3) for n in range(5000)])
CELL = replace(HEALTHY, breakdown=replace(HEALTHY.breakdown, steps=(), step_count=0))


def _legend(svg: str) -> list[tuple[str, str, bool]]:
    """(category, colour, faint) of each legend entry, in order."""
    found = re.findall(
        r'<g class="xprof-legend"( opacity="[\d.]+")?><rect [^>]*fill="([^"]+)"/>'
        r"<text [^>]*>([^<]+)</text></g>",
        svg,
    )
    return [(name, colour, bool(faint)) for faint, colour, name in found]


def _texts(svg: str) -> list[Text]:
    """Every label of a chart, rebuilt from its SVG, with the box the renderer planned."""
    out = []
    for attrs, text in re.findall(r"<text ([^>]*)>([^<]*)", svg):
        values = dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
        out.append(
            Text(
                float(values["x"]),
                float(values["y"]),
                text.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"),
                values.get("text-anchor", "start"),
                int(values["font-size"]),
            )
        )
    return out


def test_the_legend_is_every_category_in_the_breakdowns_order_in_every_cell() -> None:
    """Two cells with different categories show the same legend, in the same order and
    colours (the categories absent from a cell drawn faint), so a colour is always in the
    same place."""
    one, other = _legend(breakdown_svg(INPUT_BOUND)), _legend(breakdown_svg(HEALTHY))
    assert [name for name, _, _ in one] == [name for name, _, _ in other] == list(NAMES)
    assert [colour for _, colour, _ in one] == [KIND[c].colour for c in NAMES]
    assert [colour for _, colour, _ in other] == [KIND[c].colour for c in NAMES]
    faint = {name for name, _, dim in other if dim}
    assert faint == set(NAMES) - {"compile", "device"}
    assert {name for name, _, dim in one if not dim} == {"input", "host", "compile", "sync"}


def test_each_bar_stacks_the_categories_in_the_breakdowns_order() -> None:
    svg = breakdown_svg(INPUT_BOUND)
    bars: dict[str, list[tuple[float, str]]] = {}
    for y, title in re.findall(r'<rect x="[\d.]+" y="([\d.]+)"[^>]*><title>([^<]+)</title>', svg):
        step, category = title.split(":")[0], title.split()[2]
        bars.setdefault(step, []).append((float(y), category))
    assert len(bars) == 10
    for parts in bars.values():
        by_height = [category for _, category in sorted(parts, reverse=True)]  # bottom first
        assert by_height == [c for c in NAMES if c in by_height]


def test_the_bars_are_numbered_by_step_every_nth_when_many() -> None:
    ticks = [t.text for t in _texts(breakdown_svg(INPUT_BOUND)) if t.text.isdigit()]
    assert ticks == [str(n) for n in range(10)]
    shown = [int(t.text) for t in _texts(breakdown_svg(MANY)) if t.text.isdigit()]
    assert 3 <= len(shown) <= 30 and shown == sorted(shown) and shown[0] == 0
    strides = {b - a for a, b in itertools.pairwise(shown)}
    assert len(strides) == 1, shown
    steps = StepStats("step", "trace", 10, (0.9,) + (0.03,) * 9, 0.9, 0.03, 0.03, 0.03, (0,))
    timed = chart_svg(Summary(run="r", run_dir="/x", steps=steps))
    assert [t.text for t in _texts(timed) if t.text.isdigit()] == [str(n) for n in range(10)]


def _charts() -> dict[str, str]:
    """Every layout the charts have: a cut compiling first step, one bar for the cell, many
    steps, and step times whose median sits at the top of the scale or at its foot."""
    near_top = StepStats("step", "trace", 4, (0.1, 0.1, 0.1, 0.1), 0.1, 0.1, 0.1, 0.1, ())
    foot = StepStats("step", "trace", 10, (0.9,) + (1e-3,) * 9, 0.9, 1e-3, 1e-3, 1e-3, (0,))
    cut = _diagnosis("input", [_step(0, compile=9.0)] + [_step(n, input=0.5) for n in range(1, 8)])
    return {
        "input-bound": breakdown_svg(INPUT_BOUND),
        "cut": breakdown_svg(cut),
        "healthy": breakdown_svg(HEALTHY),
        "cell": breakdown_svg(CELL),
        "many": breakdown_svg(MANY),
        "median-at-top": chart_svg(Summary(run="r", run_dir="/x", steps=near_top)),
        "median-at-foot": chart_svg(Summary(run="r", run_dir="/x", steps=foot)),
    }


def test_no_two_labels_are_planned_to_meet() -> None:
    for name, svg in _charts().items():
        texts = _texts(svg)
        assert texts, name
        for a, b in itertools.combinations(texts, 2):
            assert not overlaps(a, b, gap=0), (name, a, b)
        width = float(re.search(r'width="(\d+)"', svg)[1])  # type: ignore[index]
        assert all(t.box()[0] >= 0 and t.box()[2] <= width for t in texts), name
    assert "↑ step 0: 9.00 s, cut" in _charts()["cut"]


@pytest.mark.browser
def test_chromium_draws_no_two_labels_over_each_other(tmp_path: Path) -> None:
    """The boxes Chromium draws for every label (``getBBox``, in the SVG's own units): none
    meets another, and none is wider than planned, at an 848 px output and at 560 px, where
    the charts shrink to fit."""
    charts = _charts()
    page_html = "".join(f'<div class="chart" id="{n}">{svg}</div>' for n, svg in charts.items())
    measure = """() => Array.from(document.querySelectorAll('.chart')).map(c => ({
      name: c.id,
      shown: c.querySelector('svg').getBoundingClientRect().width,
      boxes: Array.from(c.querySelectorAll('text')).map(t => {
        const b = t.getBBox();
        return {text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height};
      }),
    }))"""
    with launch_chromium(tmp_path) as browser:
        for width in (848, 560):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.set_content(
                f'<body style="margin:0;font-family:system-ui,sans-serif">{page_html}</body>'
            )
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"charts-{width}.png"), full_page=True)
            for chart in page.evaluate(measure):
                assert chart["shown"] <= width, chart["name"]
                planned = {t.text: t for t in _texts(charts[chart["name"]])}
                boxes = chart["boxes"]
                for box in boxes:
                    assert box["w"] <= planned[box["text"]].width + 0.5, (chart["name"], box)
                for a, b in itertools.combinations(boxes, 2):
                    apart = (
                        a["x"] + a["w"] <= b["x"]
                        or b["x"] + b["w"] <= a["x"]
                        or a["y"] + a["h"] <= b["y"]
                        or b["y"] + b["h"] <= a["y"]
                    )
                    assert apart, (chart["name"], width, a, b)
            page.close()
